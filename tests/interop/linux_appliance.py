"""The suite's ``Appliance`` on a Linux gateway: the FreeBSD-only questions answered with ``ip``.

Why: ``TunnelProvisioner`` asks the appliance for strongSwan (``swanctl --load-all``,
``--initiate``, ``--terminate``, ``--list-sas``: the same commands on Linux, run unchanged by
the inherited methods and read by the suite's parsers) and, for an IPv6 inner family, for
the 000 page's two prerequisites: is IPv6 enabled on the association's port (``ifconfig``),
does the peer's inner network route out of that port (``route -n get``), else add the route.
Those are FreeBSD commands whose output the suite's parsers read; this machine has Linux's.
Here they are answered from ``ip -j`` (JSON) into the suite's own result types
(``parsers.ifconfig.Interface``, ``parsers.route_get.RouteGet``), and the changes are made
with ``ip``/``sysctl``, so the provisioner's journalled undo path (route added, removed at
teardown) really runs. What this does NOT test: the FreeBSD commands' text and the parsers
for them (the golden tests do), and the undo journal's FreeBSD recovery scripts.
"""

from __future__ import annotations

import json
from typing import Any

from ipsec_hil.lab.appliance import Appliance, RouteChange
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.parsers.ifconfig import Inet4, Inet6, Interface
from ipsec_hil.lab.parsers.route_get import RouteGet
from ipsec_hil.lab.remote import RunResult, argv


def _fam(family: str | None, address: str) -> list[str]:
    v6 = family == "ipv6" if family else ":" in address
    return ["-6"] if v6 else ["-4"]


class LinuxAppliance(Appliance):
    """An ``Appliance`` whose interface and route questions are asked in Linux's terms."""

    #: charon here uses kernel-libipsec (user-space ESP): its policies are in charon, not in a
    #: kernel SPD that ``setkey -DP`` could show, so the provisioner's SPD check skips this end
    reads_spd = False

    def __init__(self, name: str, host: Any) -> None:
        super().__init__(name, host, profile=None)

    def interface(self, name: str) -> Interface:
        r = self._run(argv("ip", "-j", "addr", "show", "dev", name)).check(f"ip addr show dev {name}")
        (data,) = json.loads(r.stdout)
        off = self._run(f"cat /proc/sys/net/ipv6/conf/{name}/disable_ipv6").check("disable_ipv6").stdout.strip()
        inet, inet6 = [], []
        for a in data.get("addr_info", []):
            if a["family"] == "inet":
                inet.append(Inet4(a["local"], int(a["prefixlen"])))
            elif a["family"] == "inet6":
                flags = tuple(f for f in ("tentative", "dadfailed") if a.get(f))
                inet6.append(Inet6(a["local"], int(a["prefixlen"]), flags=flags))
        return Interface(name=name, flags=tuple(data.get("flags", ())), mtu=int(data["mtu"]),
                         inet=tuple(inet), inet6=tuple(inet6),
                         nd6_flags=("IFDISABLED",) if off == "1" else ())

    def ifconfig(self, name: str, *args: str) -> RunResult:
        """The ``ifconfig`` forms the provisioner uses, made with ``ip``/``sysctl``."""
        if args in (("inet6", "-ifdisabled"), ("inet6", "ifdisabled")):
            cmd = argv("sysctl", "-q", "-w", f"net.ipv6.conf.{name}.disable_ipv6={0 if args[1][0] == '-' else 1}")
        elif len(args) == 3 and args[0] == "inet6" and args[2] in ("alias", "-alias"):
            cmd = argv("ip", "-6", "addr", "add" if args[2] == "alias" else "del", args[1], "dev", name,
                       *(["nodad"] if args[2] == "alias" else []))
        else:
            raise LabError(f"{self.name}: no Linux equivalent for ifconfig {name} {' '.join(args)}")
        return self._run(cmd).check(f"ifconfig {name} {' '.join(args)} (as {cmd.strip()})")

    def route_get(self, dst: str, family: str | None = None) -> RouteGet | None:
        r = self._run(argv("ip", "-j", *_fam(family, dst), "route", "get", dst))
        if r.status != 0:
            if "unreachable" in r.stderr:
                return None
            r.check(f"ip route get {dst}")
        (route,) = json.loads(r.stdout)
        return RouteGet(found=True, route_to=dst, destination=route.get("dst"), gateway=route.get("gateway"),
                        interface=route.get("dev"), if_address=route.get("prefsrc"))

    def route_add(self, prefix: str, gateway: str | None = None, interface: str | None = None,
                  family: str | None = None) -> RouteChange:
        if (gateway is None) == (interface is None):
            raise LabError("route_add needs exactly one of gateway= or interface=")
        via = ["via", gateway] if gateway else ["dev", interface]
        r = self._run(argv("ip", *_fam(family, prefix), "route", "add", prefix, *via))  # type: ignore[arg-type]
        if r.status != 0:  # "File exists" is kept verbatim: the provisioner reads it as "not ours"
            raise LabError(f"{self.name}: ip route add {prefix} {' '.join(via)} failed: {r.stderr.strip()}")
        return RouteChange(prefix, "ipv6" if _fam(family, prefix) == ["-6"] else "ipv4", gateway, interface)

    def route_delete(self, prefix: str, family: str | None = None) -> bool:
        r = self._run(argv("ip", *_fam(family, prefix), "route", "del", prefix))
        if r.status != 0 and "No such process" in r.stderr:
            return False
        if r.status != 0:
            raise LabError(f"{self.name}: ip route del {prefix} failed: {r.stderr.strip()}")
        return True
