"""Route probe: add, delete or list the bench's temporary routes with pyroute2.

The forwarded tests need the bench PC to send into the tunnel through an appliance: a
host route to the far side's address via the appliance's LAN address (the 000 page's
"temporary address in the appliance's LAN /64 and a route to the peer's /64 through the
appliance"). The route is made with pyroute2 where the bench is -- on a real bench PC over
SSH, in the virtual lab's bench namespace -- so one probe serves both.

    python -m ipsec_hil.lab.probes.route --action add --dst 198.51.100.65/32 --gateway 198.51.100.1
    python -m ipsec_hil.lab.probes.route --action del --dst 198.51.100.65/32
    python -m ipsec_hil.lab.probes.route --action get --dst 198.51.100.65

Output: {"action", "dst", "gateway", "ifname", "existed"} (add/del) or the route found (get).
``add`` of a route that already exists with the same gateway is reported as
``existed: true`` and changes nothing, so a caller only removes what it added.
"""

from __future__ import annotations

import ipaddress
from typing import Sequence

from ipsec_hil.lab.probes import ProbeUsage, parser, run


def parse_args(argv: Sequence[str]):
    p = parser("route", "add/delete/get a bench route with pyroute2")
    p.add_argument("--action", required=True, choices=("add", "del", "get"))
    p.add_argument("--dst", required=True)
    p.add_argument("--gateway")
    a = p.parse_args(list(argv))
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


def _family(version: int) -> int:
    import socket

    return socket.AF_INET if version == 4 else socket.AF_INET6


def _lookup(ipr, dst: str, family: int) -> dict | None:
    """The route the kernel would use for ``dst``, or None when it has none (the kernel
    answers ENETUNREACH/EHOSTUNREACH as a NetlinkError; any other error is raised)."""
    import errno

    from pyroute2.netlink.exceptions import NetlinkError

    try:
        routes = ipr.route("get", dst=dst, family=family)
    except NetlinkError as e:
        if e.code in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return None
        raise
    if not routes:
        return None
    r = routes[0]
    oif = r.get_attr("RTA_OIF")
    links = ipr.get_links(oif) if oif else []
    return {
        "dst": dst,
        "gateway": r.get_attr("RTA_GATEWAY"),
        "ifname": links[0].get_attr("IFLA_IFNAME") if links else None,
        "prefsrc": r.get_attr("RTA_PREFSRC"),
    }


def main(argv: Sequence[str]) -> dict:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    a, net = parse_args(argv)
    fam = _family(net.version)
    with IPRoute() as ipr:
        if a.action == "get":
            found = _lookup(ipr, str(net), fam)
            return {"action": "get", "dst": str(net), "found": found is not None, **(found or {})}
        dst, plen = str(net.network_address), net.prefixlen
        # The main table's configured routes only: IPv6 keeps cloned cache entries
        # (RTM_F_CLONED, e.g. after a Packet Too Big) that are not routes anyone added.
        existing = [
            r for r in ipr.get_routes(family=fam, table=254)
            if r.get("dst_len") == plen and r.get_attr("RTA_DST") == dst
            and not (r.get("flags", 0) & 0x200) and r.get_attr("RTA_TABLE", 254) == 254
        ]
        if a.action == "add":
            if existing:
                gw = existing[0].get_attr("RTA_GATEWAY")
                if gw != str(ipaddress.ip_address(a.gateway)):
                    raise RuntimeError(f"a route to {net} via {gw} exists already; not replacing it")
                return {"action": "add", "dst": str(net), "gateway": gw, "existed": True}
            try:
                ipr.route("add", dst=dst, dst_len=plen, gateway=a.gateway, family=fam)
            except NetlinkError as e:
                raise RuntimeError(f"route add {net} via {a.gateway}: {e}") from None
            found = _lookup(ipr, dst, fam) or {}
            return {"action": "add", "dst": str(net), "gateway": a.gateway, "ifname": found.get("ifname"),
                    "existed": False}
        if not existing:
            return {"action": "del", "dst": str(net), "existed": False}
        ipr.route("del", dst=dst, dst_len=plen, family=fam, gateway=existing[0].get_attr("RTA_GATEWAY"))
        return {"action": "del", "dst": str(net), "existed": True}


if __name__ == "__main__":
    raise SystemExit(run(main))
