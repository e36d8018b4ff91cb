"""Preflight: is the lab ready for a run? Every check answers in one command, no waiting.

Why (issue 14): a run that finds a missing module by waiting for a tunnel that never comes
up costs minutes and reads as a driver failure. Seed 003: IPsec is not in FreeBSD's
GENERIC kernel -- without ipsec.ko ``netstat -s -p esp`` prints nothing and charon's SAs
never reach the kernel. So before any test: each appliance answers over SSH with its
pinned host key, ipsec.ko and the driver are in ``kldstat``, charon answers on its VICI
socket (``swanctl --stats``), every port the topology names exists with its addresses
and MTU, each tunnel's local end has a route to its peer's outer address, and the bench
has its tools. Each failure is one :class:`Finding` naming the fix in one line.

Library code: no pytest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ipsec_hil.lab.command import IP_ADDR, IP_VERSION, SWANCTL_STATS
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.parsers import ifconfig as ifconfig_parser
from ipsec_hil.lab.parsers import iperf3, kldstat, ping, route_get
from ipsec_hil.lab.topology import Topology

#: the bench's tools: (command that exits 0 when present, what installs it on Debian)
BENCH_TOOLS = (
    (iperf3.VERSION, "apt-get install iperf3"),
    (ping.VERSION, "apt-get install iputils-ping"),
    (IP_VERSION, "apt-get install iproute2"),
)
CHECK_TIMEOUT = 20.0


@dataclass(frozen=True)
class Finding:
    """One check on one host: passed or not, what was seen (printed when it failed), and
    the one-line fix."""

    host: str
    check: str
    ok: bool
    detail: str = ""
    fix: str = ""

    def text(self) -> str:
        if self.ok:
            return f"ok    {self.host}: {self.check}"
        return f"FAIL  {self.host}: {self.check}: {self.detail} -- fix: {self.fix}"


def _run(host: Any, script: str) -> Any:
    return host.run(script, timeout=CHECK_TIMEOUT)


def check_appliance(app: Any, name: str, topology: Topology) -> list[Finding]:
    """The checks of one appliance (stops after "reachable" fails: nothing else can run).

    An appliance reached with ``mgmt: {local: true}`` is the controller's own machine (the
    project's tests use such stand-ins): it has no kldstat or charon to check, so it gets
    one finding saying it was not checked, instead of failing every check."""
    h = topology.hosts[name]
    if h.mgmt.local:
        return [Finding(name, "not checked: reached locally (mgmt: local), not an appliance over SSH", True)]
    try:
        return _appliance_checks(app, name, topology)
    except LabError as exc:  # a command's output the parser refuses: the check says so, the run stops
        return [Finding(name, "appliance checks", False, f"{type(exc).__name__}: {str(exc)[:300]}",
                        f"on {name}: run the command named above by hand; the appliance is not what the topology says")]


def _appliance_checks(app: Any, name: str, topology: Topology) -> list[Finding]:
    h = topology.hosts[name]
    out: list[Finding] = []
    try:
        r = _run(app.host, kldstat.COMMAND)
    except LabError as exc:
        mgmt = h.mgmt
        return [Finding(name, "reachable over SSH with the pinned host key", False, str(exc)[:300],
                        f"check {name}'s mgmt address/port ({mgmt.address}:{mgmt.port}) and that its host key is "
                        f"in {topology.lab.known_hosts} (ssh-keyscan, after checking the fingerprint)")]
    out.append(Finding(name, "reachable over SSH with the pinned host key", True))
    names = {line.split()[-1] for line in r.stdout.splitlines()[1:] if line.split()}
    out.append(Finding(name, "ipsec.ko loaded", "ipsec.ko" in names, "not in kldstat",
                       f"on {name}: kldload ipsec, and ipsec_load=\"YES\" in /boot/loader.conf"))
    module_file = str(app.profile.module_file)
    module = module_file.rsplit("/", 1)[-1]
    out.append(Finding(name, f"driver {module} loaded", module in names, "not in kldstat",
                       f"on {name}: kldload {module_file}"))
    r = _run(app.host, SWANCTL_STATS)
    out.append(Finding(name, f"charon running ({SWANCTL_STATS})", r.status == 0,
                       (r.stderr or r.stdout).strip()[-200:], f"on {name}: service strongswan onestart"))
    r = _run(app.host, ifconfig_parser.COMMAND)
    ifaces = _ifconfig(r.stdout) if r.status == 0 else {}
    for pname, port in h.ports.items():
        ifname = port.ifname or pname
        found = ifaces.get(ifname)
        if found is None:
            out.append(Finding(name, f"port {ifname} present", False, "not in ifconfig",
                               f"on {name}: check the cabling/driver of {ifname}, or the topology's ifname for {pname}"))
            continue
        problems = [f"mtu {found.mtu}, expected {port.mtu}"] if found.mtu != port.mtu else []
        fixes = [ifconfig_parser.COMMAND(ifname, "mtu", port.mtu)] if found.mtu != port.mtu else []
        have = {a.address for a in found.inet} | {a.address for a in found.inet6}
        for fam, want in (("inet", port.ipv4), ("inet6", port.ipv6)):
            if want is not None and str(want.ip) not in have:
                problems.append(f"no {want}")
                fixes.append(ifconfig_parser.COMMAND(ifname, fam, str(want), *(["alias"] if fam == "inet6" else [])))
        out.append(Finding(name, f"port {ifname}: addresses and MTU {port.mtu}", not problems, "; ".join(problems),
                           f"on {name}: " + "; ".join(fixes)))
    return out


def _ifconfig(text: str) -> dict[str, Any]:
    return {i.name: i for i in ifconfig_parser.parse(text).interfaces}


def check_routes(apps: dict[str, Any], topology: Topology) -> list[Finding]:
    """Each tunnel's local end reaches its peer's outer addresses (``route -n get``).

    One command per (appliance, address): the virtual lab's 13 tunnels name 26 such pairs
    but only a few distinct ones, and each asked again cost an SSH round trip (issue 15:
    26 commands, 1.5 s of every run); every tunnel still gets its own finding."""
    out = []
    asked: dict[tuple[str, str], Any] = {}  # (appliance, route -n get arguments) -> RunResult or LabError
    for tname, t in topology.tunnels.items():
        local, remote = t.local.host, t.remote.host
        if local not in apps or topology.hosts[local].mgmt.local:
            continue
        rport = topology.hosts[remote].ports[t.remote.port]
        for want in (rport.ipv4, rport.ipv6):
            if want is None:
                continue
            fam = "-inet6 " if want.version == 6 else ""  # route add's spelling, for the fix
            key = (local, route_get.BY_FAMILY["ipv6" if want.version == 6 else "ipv4"](str(want.ip)))
            if key not in asked:
                try:
                    asked[key] = _run(apps[local].host, key[1])
                except LabError as exc:
                    asked[key] = exc
            r = asked[key]
            if isinstance(r, LabError):
                out.append(Finding(local, f"route to {want.ip} (tunnel {tname})", False, str(r)[:200],
                                   f"make {local} reachable first"))
                continue
            out.append(Finding(local, f"route to {want.ip} (tunnel {tname})", r.status == 0,
                               (r.stderr or r.stdout).strip()[-200:],
                               f"on {local}: route add {fam}{want.ip} <gateway on {t.local.port}>"))
    return out


def check_bench_tools(bench: Any, name: str) -> list[Finding]:
    """The programs the tests run on the bench."""
    out = []
    for cmd, fix in BENCH_TOOLS:
        r = _run(bench.host, f"{cmd} >/dev/null 2>&1")
        out.append(Finding(name, f"tool {cmd.split()[0]}", r.status == 0, f"`{cmd}` exited {r.status}",
                           f"on {name}: {fix}"))
    return out


def check_bench_ports(bench: Any, name: str, topology: Topology) -> list[Finding]:
    """The bench's addresses and MTUs (by address: the OS names its adapters)."""
    out = []
    r = _run(bench.host, IP_ADDR)
    try:
        links = json.loads(r.stdout) if r.status == 0 else []
    except json.JSONDecodeError as exc:
        links = []
        out.append(Finding(name, IP_ADDR, False, f"not JSON: {exc}", f"on {name}: apt-get install iproute2"))
    addrs = {a.get("local"): link for link in links for a in link.get("addr_info", [])}
    for pname, port in topology.hosts[name].ports.items():
        for want in (port.ipv4, port.ipv6):
            if want is None:
                continue
            link = addrs.get(str(want.ip))
            ok = link is not None and int(link.get("mtu", 0)) == port.mtu
            seen = "absent" if link is None else f"on {link.get('ifname')}, mtu {link.get('mtu')}"
            out.append(Finding(name, f"port {pname}: {want}, MTU {port.mtu}", ok, seen,
                               f"on {name}: ip addr add {want} dev <adapter of {pname}>; ip link set <it> mtu {port.mtu}"))
    return out


def preflight(topology: Topology, apps: dict[str, Any], bench: Any | None, *, bench_ports: bool = True) -> list[Finding]:
    """Every check of the lab, appliances first; the caller prints the failures.

    ``bench_ports=False`` leaves out the bench's addresses: a run's first phase does (a
    local bench that lacks a LAN address fails only the tests that use that LAN, which
    say so), ``--hil-preflight`` checks them."""
    out: list[Finding] = []
    for name in sorted(apps):
        out += check_appliance(apps[name], name, topology)
    unreachable = {f.host for f in out if f.check.startswith("reachable") and not f.ok}
    out += check_routes({n: a for n, a in apps.items() if n not in unreachable}, topology)
    if bench is not None:
        out += check_bench_tools(bench, bench.name)
        out += check_bench_ports(bench, bench.name, topology) if bench_ports else []
    return out
