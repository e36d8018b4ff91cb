"""Routes that steer inner traffic into esp0, in two tables (pyroute2, own namespace).

Why two tables: FreeBSD treats the appliance's own packets and forwarded packets
differently (ipsec_output.c: `if (!forwarding) return 0`).  Locally originated packets
(ip rule `iif lo`) use the OWN table, whose route MTU is the exact ESP limit
max_inner(cipher, outer, path_mtu): the kernel itself answers EMSGSIZE to a too-big
DF/DONTFRAG packet and TCP's MSS adapts.  Everything else uses the FWD table with the
outer path MTU, so forwarded packets reach the engine, which applies FreeBSD's gate.
IPv6 inner prefixes get routes only once a FreeBSD-style `route -6 add` covered them
(the 000 page's "ping6: No route to host"); IPv4 inner prefixes come with the SA.
"""
from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

OWN_TABLE = 201
FWD_TABLE = 202
RULE_PREF_OWN = 1000
RULE_PREF_FWD = 1001


@dataclass(frozen=True)
class RouteSpec:
    table: int
    dst: str  # prefix
    mtu: int
    prefsrc: str | None = None


class Routes:
    """Owns the two tables and the two rules per family in the current namespace."""

    def __init__(self, ifname: str = "esp0") -> None:
        self.ipr = IPRoute()
        idx = self.ipr.link_lookup(ifname=ifname)
        if not idx:
            raise RuntimeError(f"interface {ifname} not found")
        self.oif = idx[0]
        self.installed: dict[tuple[int, str], RouteSpec] = {}

    def _rules(self, add: bool) -> None:
        """The two policy rules per family (own packets from lo, forwarded ones): any old
        copy removed first (absent is fine: a fresh namespace has none), then added."""
        for fam in (socket.AF_INET, socket.AF_INET6):
            for pref, table, kw in ((RULE_PREF_OWN, OWN_TABLE, {"iifname": "lo"}),
                                    (RULE_PREF_FWD, FWD_TABLE, {})):
                try:
                    self.ipr.rule("del", family=fam, priority=pref, table=table, **kw)
                except NetlinkError as exc:
                    if exc.code != errno.ENOENT:
                        raise
                if add:
                    self.ipr.rule("add", family=fam, priority=pref, table=table, **kw)

    def setup_rules(self) -> None:
        self._rules(add=True)

    def teardown(self) -> None:
        for (table, dst) in list(self.installed):
            self._del(table, dst)
        self._rules(add=False)
        self.ipr.close()

    def _del(self, table: int, dst: str) -> None:
        net = ipaddress.ip_network(dst)
        fam = socket.AF_INET if net.version == 4 else socket.AF_INET6
        try:
            self.ipr.route("del", family=fam, dst=dst, table=table, oif=self.oif)
        except Exception:
            pass
        self.installed.pop((table, dst), None)

    def sync(self, desired: list[RouteSpec]) -> None:
        """Make the installed esp0 routes exactly `desired` (replace changed ones)."""
        want = {(r.table, r.dst): r for r in desired}
        for key in list(self.installed):
            if key not in want:
                self._del(*key)
        for key, r in want.items():
            if self.installed.get(key) == r:
                continue
            net = ipaddress.ip_network(r.dst)
            fam = socket.AF_INET if net.version == 4 else socket.AF_INET6
            kw = {}
            if r.prefsrc:
                kw["prefsrc"] = r.prefsrc
            self.ipr.route("replace", family=fam, dst=r.dst, table=r.table, oif=self.oif,
                           metrics={"mtu": r.mtu}, **kw)
            self.installed[key] = r
