"""Traffic selectors as swanctl writes them: `198.51.100.64/26[tcp/5201]`.

Why: the 002 page's six children differ only by TCP port, so outbound SA selection
must honour `[proto/port]`, not only the prefix.
"""
from __future__ import annotations

import ipaddress
import re
import struct
from dataclasses import dataclass
from collections.abc import Iterable
from typing import Any

_PROTOS = {"tcp": 6, "udp": 17, "icmp": 1, "ipv6-icmp": 58, "icmp6": 58, "icmpv6": 58,
           "sctp": 132, "gre": 47, "any": None, "%any": None}
_TS_RE = re.compile(r"^\s*([^\[\]\s]+)\s*(?:\[([^\]]*)\])?\s*$")

Net = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Selector:
    """One traffic selector: a prefix with optional protocol and port range."""

    net: Net
    proto: int | None = None
    port_lo: int = 0
    port_hi: int = 65535

    @property
    def family(self) -> str:
        return "ipv4" if self.net.version == 4 else "ipv6"

    def __str__(self) -> str:
        if self.proto is None and (self.port_lo, self.port_hi) == (0, 65535):
            return str(self.net)
        proto = {v: k for k, v in _PROTOS.items() if v}.get(self.proto, str(self.proto or "any"))
        if (self.port_lo, self.port_hi) == (0, 65535):
            return f"{self.net}[{proto}]"
        port = str(self.port_lo) if self.port_lo == self.port_hi else f"{self.port_lo}-{self.port_hi}"
        return f"{self.net}[{proto}/{port}]"


def parse_selector(text: str, field: str = "selector") -> Selector:
    """Parse `prefix[proto/port]`; raise ValueError naming the field and the text."""
    m = _TS_RE.match(text or "")
    if not m:
        raise ValueError(f"{field}: expected 'prefix[proto/port]', found {text!r}")
    try:
        net = ipaddress.ip_network(m.group(1), strict=False)
    except ValueError:
        raise ValueError(f"{field}: expected an address prefix, found {m.group(1)!r}") from None
    proto: int | None = None
    lo, hi = 0, 65535
    if m.group(2):
        proto_s, _, port_s = m.group(2).partition("/")
        proto_s = proto_s.strip().lower()
        if proto_s in _PROTOS:
            proto = _PROTOS[proto_s]
        elif proto_s.isdigit() and int(proto_s) < 256:
            proto = int(proto_s)
        elif proto_s:
            raise ValueError(f"{field}: unknown protocol {proto_s!r} in {text!r}")
        port_s = port_s.strip()
        if port_s and port_s not in ("%any", "any"):
            a, _, b = port_s.partition("-")
            if not a.isdigit() or (b and not b.isdigit()):
                raise ValueError(f"{field}: expected a port or port range, found {port_s!r}")
            lo, hi = int(a), int(b or a)
            if not 0 <= lo <= hi <= 65535:
                raise ValueError(f"{field}: port range {port_s!r} outside 0..65535")
    return Selector(net, proto, lo, hi)


def matches(sel: Selector, addr: ipaddress.IPv4Address | ipaddress.IPv6Address,
            proto: int, port: int | None) -> bool:
    """Does a packet's (address, protocol, port on this side) fall inside `sel`?"""
    if addr.version != sel.net.version or addr not in sel.net:
        return False
    if sel.proto is not None and sel.proto != proto:
        return False
    if (sel.port_lo, sel.port_hi) != (0, 65535):
        if port is None or not sel.port_lo <= port <= sel.port_hi:
            return False
    return True


# --- matching packets against selectors (the SPD lookup of the datapath loops)


def flow(pkt: bytes) -> tuple[int, bytes, bytes, int, int, int] | None:
    """(version, src, dst, proto, sport, dport) of an inner packet, None if not IP."""
    v = pkt[0] >> 4
    if v == 4:
        ihl = (pkt[0] & 15) * 4
        proto = pkt[9]
        if proto in (6, 17) and len(pkt) >= ihl + 4 and not (pkt[6] & 0x1F or pkt[7]):
            sp, dp = struct.unpack_from("!HH", pkt, ihl)
        else:
            sp = dp = -1
        return 4, pkt[12:16], pkt[16:20], proto, sp, dp
    if v == 6 and len(pkt) >= 40:
        proto = pkt[6]
        if proto in (6, 17) and len(pkt) >= 44:
            sp, dp = struct.unpack_from("!HH", pkt, 40)
        else:
            sp = dp = -1
        return 6, pkt[8:24], pkt[24:40], proto, sp, dp
    return None


ADDR4, ADDR6 = slice(12, 20), slice(8, 40)
"""Source and destination address, as one slice of an IPv4 / IPv6 header: `addr_key`,
and the receive loop's own lookup of a packet whose version it already knows."""
DST4, DST6 = slice(16, 20), slice(24, 40)
"""The destination address alone: the receive loop's "for the appliance itself?"."""


def addr_key(pkt: bytes) -> bytes | None:
    """The cache key of a packet whose policy depends on its addresses alone (every
    selector it can meet is a prefix with no protocol or port: `addresses_only`): the
    source and destination as they stand in the header, one slice.  None if not IP."""
    v = pkt[0] >> 4
    if v == 4:
        return pkt[ADDR4]
    if v == 6 and len(pkt) >= 40:
        return pkt[ADDR6]
    return None


def addresses_only(sels: Iterable[Selector]) -> bool:
    """True when no selector names a protocol or a port range, so that the addresses
    decide every match and `addr_key` may stand for `fast_key` (the usual tunnel:
    subnet to subnet; a child with `[tcp/80]` keeps the longer key)."""
    return all(s.proto is None and s.port_lo == 0 and s.port_hi == 65535 for s in sels)


def fast_key(pkt: bytes) -> bytes | None:
    """A cheap cache key with the same information as flow() (None: use _flow)."""
    b0 = pkt[0]
    if b0 == 0x45:
        if pkt[6] & 0x3F or pkt[7]:
            return None  # a non-first fragment: no ports
        return pkt[9:10] + (pkt[12:24] if pkt[9] in (6, 17) else pkt[12:20])
    if b0 >> 4 == 6 and len(pkt) >= 44:
        return pkt[6:7] + (pkt[8:44] if pkt[6] in (6, 17) else pkt[8:40])
    return None


def specificity(sel: Selector) -> int:
    """More specific (longer prefix, a protocol, ports) is larger."""
    return (sel.net.prefixlen * 4 + (64 if sel.proto is not None else 0)
            + (32 if (sel.port_lo, sel.port_hi) != (0, 65535) else 0))


def policy_pairs(order: list[Any]) -> list[tuple[Any, Selector, Selector]]:
    """Every (SA, local selector, remote selector) pair, most specific first -- as
    strongSwan's policy priorities order the SPD; stable, so of two equal SAs (a
    rekey) the older one is used until it is deleted."""
    pairs = []
    for osa in order:
        for ls in osa.local:
            for rs in osa.remote:
                if ls.net.version == rs.net.version:
                    pairs.append((-(specificity(ls) + specificity(rs)), bool(getattr(osa, "dead", False)),
                                  len(pairs), osa, ls, rs))
    # a live SA before a hard-expired one under the same selectors: the policy's SA lookup
    # (key_allocsa_policy) finds the live one
    pairs.sort(key=lambda p: (p[0], p[1], p[2]))
    return [(p[3], p[4], p[5]) for p in pairs]


def sel_match(sels: list[Selector], addr, proto: int, port: int) -> bool:
    for s in sels:
        if addr.version != s.net.version or addr not in s.net:
            continue
        if s.proto is not None and s.proto != proto:
            continue
        if (s.port_lo, s.port_hi) != (0, 65535) and not (port >= 0 and s.port_lo <= port <= s.port_hi):
            continue
        return True
    return False
