"""The SPD as part of a tunnel's state: the policies a bring-up must find, and none after.

Why: a child that both ends list INSTALLED (:mod:`verify`) has SAs; traffic only reaches
them through the kernel's security policies, which charon installs beside the SAs
(strongSwan's kernel-pfkey: one ``out`` and one ``in`` policy per child, ``ipsec
esp/tunnel/SRC-DST/unique:REQID``, FreeBSD's ``setkey -DP`` prints them with
lib/libipsec/pfkey_dump.c). An SPD without a child's outbound policy sends its traffic
in the clear or nowhere, and a policy left after a teardown captures the next run's
traffic: on hardware it also holds an engine slot. So bring-up checks the policies of
every child on both ends, and teardown checks that none of the tunnel's are left.

Pure functions over the parsers' ``SpdDump`` (parsers.setkey_spd) and ``SaList``
(parsers.swanctl_list_sas): the provisioner reads, this module judges. A policy is matched
by its reqid (the child's, as the same end's ``swanctl --list-sas`` prints it), so the
check does not depend on how ports were put in the selectors; the selector networks, the
direction, the action and the tunnel request are then checked against the plan.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Iterable

#: the levels strongSwan's kernel-pfkey installs (``unique`` with a reqid; ``require`` is
#: what a policy without reqid shows): both mean "only through an SA"
IPSEC_LEVELS = ("unique", "require")


@dataclass(frozen=True)
class EndPolicies:
    """What one end's SPD must hold for a tunnel: networks and outer addresses of that end."""

    end: str  # the appliance's name, for messages
    own_net: str  # this end's inner network, e.g. "198.51.100.0/26"
    peer_net: str  # the peer's inner network
    own_outer: str  # this end's outer address (the ESP header's)
    peer_outer: str

    def expected(self, direction: str) -> tuple[str, str, str, str]:
        """(src net, dst net, tunnel src, tunnel dst) of the ``direction`` policy."""
        if direction == "out":
            return self.own_net, self.peer_net, self.own_outer, self.peer_outer
        return self.peer_net, self.own_net, self.peer_outer, self.own_outer


def _net(address: str | None, prefixlen: int | None) -> str | None:
    if address is None or prefixlen is None:
        return None
    return str(ipaddress.ip_network(f"{address.split('%', 1)[0]}/{prefixlen}", strict=False))


def _same_ip(a: str | None, b: str) -> bool:
    if a is None:
        return False
    return ipaddress.ip_address(a.split("%", 1)[0]) == ipaddress.ip_address(b)


def describe(p: Any) -> str:
    """One policy in setkey's words, short (for messages)."""
    req = p.requests[0] if p.requests else None
    tail = (f" {req.protocol}/{req.mode}/{req.tunnel_src}-{req.tunnel_dst}/{req.level}"
            f"{'' if req.reqid is None else ':' + str(req.reqid)}") if req else ""
    return f"{p.src_selector} -> {p.dst_selector} {p.upper} {p.direction} {p.action}{tail}"


def policy_problem(p: Any, want: EndPolicies, direction: str) -> str | None:
    """Why policy ``p`` is not the ``direction`` policy of ``want`` (None when it is)."""
    src, dst, tsrc, tdst = want.expected(direction)
    why = []
    if p.action != "ipsec":
        why.append(f"action {p.action}, not ipsec")
    if _net(p.src, p.src_prefixlen) != src or _net(p.dst, p.dst_prefixlen) != dst:
        why.append(f"selectors {p.src_selector} -> {p.dst_selector}, expected {src} -> {dst}")
    req = p.requests[0] if p.requests else None
    if req is None:
        why.append("no ipsec request")
    else:
        if (req.protocol, req.mode) != ("esp", "tunnel"):
            why.append(f"request {req.protocol}/{req.mode}, expected esp/tunnel")
        if not (_same_ip(req.tunnel_src, tsrc) and _same_ip(req.tunnel_dst, tdst)):
            why.append(f"tunnel {req.tunnel_src}-{req.tunnel_dst}, expected {tsrc}-{tdst}")
        if req.level not in IPSEC_LEVELS:
            why.append(f"level {req.level}, expected one of {'/'.join(IPSEC_LEVELS)}")
    return "; ".join(why) or None


def child_reqids(sas: Any, conn: str, children: Iterable[str]) -> dict[str, int]:
    """child -> reqid of each planned child one end lists INSTALLED inside IKE_SA ``conn``."""
    wanted = set(children)
    return {c.name: c.reqid for ike, c in sas.children()
            if ike.name == conn and c.name in wanted and c.state == "INSTALLED"}


def missing(dump: Any, want: EndPolicies, reqids: dict[str, int]) -> list[str]:
    """What the SPD of one end lacks for its children (empty when every child has its ``in``
    and ``out`` policy, as planned). ``reqids``: :func:`child_reqids` of the same end."""
    out = []
    for child, reqid in sorted(reqids.items()):
        mine = dump.by_reqid(reqid)
        for direction in ("out", "in"):
            found = [p for p in mine if p.direction == direction]
            if not found:
                out.append(f"{want.end}: no {direction} policy for {child} (reqid {reqid})")
                continue
            bad = [w for p in found if (w := policy_problem(p, want, direction))]
            if len(bad) == len(found):
                out.append(f"{want.end}: the {direction} policy of {child} (reqid {reqid}) is wrong: {bad[0]}")
    return out


def leftovers(dump: Any, want: EndPolicies) -> list[str]:
    """Policies of the tunnel one end still holds after a teardown: an ipsec policy between
    the tunnel's outer addresses whose selectors are the tunnel's inner networks."""
    left = []
    for p in dump.policies:
        req = p.requests[0] if p.requests else None
        if req is None or p.action != "ipsec":
            continue
        for direction in ("out", "in"):
            src, dst, tsrc, tdst = want.expected(direction)
            if (_same_ip(req.tunnel_src, tsrc) and _same_ip(req.tunnel_dst, tdst)
                    and _net(p.src, p.src_prefixlen) == src and _net(p.dst, p.dst_prefixlen) == dst):
                left.append(f"{want.end}: {describe(p)}")
                break
    return left
