"""Route probe: add, delete or look up the bench's temporary routes with iproute2's ``ip``.

The forwarded tests need the bench PC to send into the tunnel through an appliance: a
host route to the far side's address via the appliance's LAN address (the 000 page's
"temporary address in the appliance's LAN /64 and a route to the peer's /64 through the
appliance"). The route is made with ``ip`` where the bench is -- on a real bench PC over
SSH, in the virtual lab's bench namespace -- so one probe serves both; its JSON answers are
read by ipsec_hil.lab.parsers.ip_route.

    python -m ipsec_hil.lab.probes.route --action add --dst 198.51.100.65/32 --gateway 198.51.100.1
    python -m ipsec_hil.lab.probes.route --action del --dst 198.51.100.65/32
    python -m ipsec_hil.lab.probes.route --action get --dst 198.51.100.65

Output: {"action", "dst", "gateway", "ifname", "existed"} (add/del) or the route found (get).
``add`` of a route that already exists with the same gateway is reported as
``existed: true`` and changes nothing, so a caller only removes what it added.

``--proto N`` (add, del): the route carries routing protocol N (``ip route ... proto N``)
and ``del`` removes only a route that carries it. The suite marks its own routes so
(ipsec_hil.lab.traffic.bench_routes.SUITE_PROTO): the undo it journals before adding one
(``ip route del ... proto N``) can never remove an operator's route to the same network,
whatever step a run died at.
"""

from __future__ import annotations

import ipaddress
from typing import Sequence

from ipsec_hil.lab.command import IP_ROUTE, Command
from ipsec_hil.lab.probes import ProbeUsage, parser, run


def parse_args(argv: Sequence[str]):
    p = parser("route", "add/delete/get a bench route with iproute2's ip")
    p.add_argument("--action", required=True, choices=("add", "del", "get"))
    p.add_argument("--dst", required=True)
    p.add_argument("--gateway")
    p.add_argument("--proto", type=int, default=None,
                   help="routing protocol number the route carries (add) or must carry (del)")
    a = p.parse_args(list(argv))
    if a.proto is not None and not 0 < a.proto < 256:
        raise ProbeUsage(f"--proto {a.proto}: expected 1..255")
    try:
        net = ipaddress.ip_network(a.dst, strict=False) if a.action != "get" else ipaddress.ip_address(a.dst)
    except ValueError:
        raise ProbeUsage(f"--dst: not an address or network: {a.dst!r}") from None
    if a.action == "add" and not a.gateway:
        raise ProbeUsage("add needs --gateway")
    if a.gateway:
        try:
            gw = ipaddress.ip_address(a.gateway)
        except ValueError:
            raise ProbeUsage(f"--gateway: not an address: {a.gateway!r}") from None
        if gw.version != net.version:
            raise ProbeUsage(f"--gateway {gw} is not of the family of --dst {a.dst}")
    return a, net


IP_CANDIDATES = ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip")
"""Where iproute2's ``ip`` lives on a Linux bench (Debian: /usr/sbin/ip, /sbin/ip by the
merged /usr); the PATH of a non-login SSH session may lack the sbin directories."""


def _ip_binary() -> str:
    import os
    import shutil

    found = shutil.which("ip") or next((c for c in IP_CANDIDATES if os.access(c, os.X_OK)), None)
    if found is None:
        raise RuntimeError(f"iproute2's ip not found (PATH, {', '.join(IP_CANDIDATES)})")
    return found


def _ip(cmd: Command) -> tuple[str, str, int]:
    """``cmd`` (an ``ip`` Command: parsers.ip_route.BY_FAMILY, command.IP_ROUTE) run with the
    ``ip`` found (:func:`_ip_binary`): (stdout, stderr, status)."""
    import subprocess

    r = subprocess.run([_ip_binary(), *cmd.argv[1:]], capture_output=True, text=True, timeout=30)
    return r.stdout, r.stderr, r.returncode


def _family(version: int) -> str:
    return "ipv4" if version == 4 else "ipv6"


def _lookup(dst: str, version: int) -> dict | None:
    """The route the kernel would use for ``dst`` (``ip -j route get``), or None when it
    has none (unreachable); any other failure is raised (ParseError naming ip's answer)."""
    from ipsec_hil.lab.parsers import ip_route

    found = ip_route.parse(*_ip(ip_route.BY_FAMILY[_family(version)]("get", dst)))
    if found.unreachable or not found.routes:
        return None
    r = found.routes[0]
    return {"dst": dst, "gateway": r.gateway, "ifname": r.dev, "prefsrc": r.prefsrc}


def _configured(net, version: int, proto: int | None = None) -> list:
    """The main table's routes to exactly ``net`` (``ip -j route show table main``: the
    configured routes only -- IPv6's cloned exceptions, e.g. after a Packet Too Big, are
    in the cache, not listed here); with ``proto``, only those carrying it."""
    from ipsec_hil.lab.parsers import ip_route

    shown = ip_route.parse(*_ip(ip_route.BY_FAMILY[_family(version)]("show", "table", "main")))
    return [r for r in shown.routes if r.dst == str(net) and (proto is None or r.protocol == str(proto))]


def _proto(proto: int | None) -> list[str]:
    return [] if proto is None else ["proto", str(proto)]


def main(argv: Sequence[str]) -> dict:
    """Why iproute2's ``ip`` and not pyroute2 (which the virtual lab uses): importing pyroute2
    costs this short-lived process 0.2 s of CPU, its whole run; the own tests run it ~300
    times (a bench route added and removed per forwarded test; issue 39)."""
    a, net = parse_args(argv)
    if a.action == "get":
        found = _lookup(str(net), net.version)
        return {"action": "get", "dst": str(net), "found": found is not None, **(found or {})}
    existing = _configured(net, net.version, a.proto if a.action == "del" else None)
    if a.action == "add":
        if existing:
            gw = existing[0].gateway
            if gw is None or ipaddress.ip_address(gw) != ipaddress.ip_address(a.gateway):
                raise RuntimeError(f"a route to {net} via {gw} exists already; not replacing it")
            return {"action": "add", "dst": str(net), "gateway": gw, "existed": True}
        _out, err, status = _ip(IP_ROUTE[_family(net.version)]("add", str(net), "via", a.gateway, *_proto(a.proto)))
        if status != 0:
            raise RuntimeError(f"route add {net} via {a.gateway}: {err.strip() or f'ip exit {status}'}")
        found = _lookup(str(net.network_address), net.version) or {}
        return {"action": "add", "dst": str(net), "gateway": a.gateway, "ifname": found.get("ifname"),
                "existed": False}
    if not existing:
        return {"action": "del", "dst": str(net), "existed": False}
    via = ["via", existing[0].gateway] if existing[0].gateway else []
    _out, err, status = _ip(IP_ROUTE[_family(net.version)]("del", str(net), *via, *_proto(a.proto)))
    if status != 0:
        raise RuntimeError(f"route del {net}: {err.strip() or f'ip exit {status}'}")
    return {"action": "del", "dst": str(net), "existed": True}


if __name__ == "__main__":
    raise SystemExit(run(main))
