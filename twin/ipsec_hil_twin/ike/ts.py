"""Traffic selectors as swanctl.conf writes them, with strongSwan's narrowing.

Why: the responder picks a child by whether the initiator's selectors fit its own
(TS_UNACCEPTABLE otherwise), and installs the intersection.  A selector is an address
range plus protocol and port range: `198.51.100.0/26[tcp/5201]`, `dynamic`, `a..b`.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ipsec_hil_twin.errors import IkeError

PROTOS = {"tcp": 6, "udp": 17, "icmp": 1, "ipv6-icmp": 58, "icmp6": 58, "icmpv6": 58,
          "sctp": 132, "gre": 47, "esp": 50, "ah": 51}
PROTO_NAMES = {6: "tcp", 17: "udp", 1: "icmp", 58: "ipv6-icmp", 132: "sctp", 47: "gre",
               50: "esp", 51: "ah"}
PORTS = {"http": 80, "https": 443, "ssh": 22, "domain": 53, "iperf3": 5201}


class TSError(IkeError, ValueError):
    """A selector strongSwan would reject ("invalid value for: local_ts")."""


@dataclass(frozen=True)
class TS:
    """One selector: [start, end] addresses of one family, protocol (0 any), port range."""

    version: int
    start: int
    end: int
    proto: int = 0
    port_lo: int = 0
    port_hi: int = 65535

    def __str__(self) -> str:
        addr = _range_text(self.version, self.start, self.end)
        if self.proto == 0 and (self.port_lo, self.port_hi) == (0, 65535):
            return addr
        proto = PROTO_NAMES.get(self.proto, str(self.proto)) if self.proto else "0"
        if (self.port_lo, self.port_hi) == (0, 65535):
            return f"{addr}[{proto}]"
        port = str(self.port_lo) if self.port_lo == self.port_hi else f"{self.port_lo}-{self.port_hi}"
        return f"{addr}[{proto}/{port}]"

    def intersect(self, other: "TS") -> "TS | None":
        """The narrowed selector both sides accept, None if they do not overlap."""
        if self.version != other.version:
            return None
        start, end = max(self.start, other.start), min(self.end, other.end)
        if start > end:
            return None
        if self.proto and other.proto and self.proto != other.proto:
            return None
        proto = self.proto or other.proto
        lo, hi = max(self.port_lo, other.port_lo), min(self.port_hi, other.port_hi)
        if lo > hi:
            return None
        return TS(self.version, start, end, proto, lo, hi)


def _range_text(version: int, start: int, end: int) -> str:
    cls = ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address
    nets = list(ipaddress.summarize_address_range(cls(start), cls(end)))
    if len(nets) == 1:
        return str(nets[0])
    return f"{cls(start)}..{cls(end)}"


def _port(text: str) -> int:
    t = text.strip().lower()
    if t in PORTS:
        return PORTS[t]
    if not t.isdigit() or not 0 <= int(t) <= 65535:
        raise TSError(f"invalid port {text!r}")
    return int(t)


def parse_ts(text: str, dynamic: str | None = None) -> TS:
    """Parse one selector; `dynamic` becomes the given address (/32 or /128)."""
    t = text.strip()
    proto, lo, hi = 0, 0, 65535
    if "[" in t:
        if not t.endswith("]"):
            raise TSError(f"unterminated protocol/port in {text!r}")
        t, spec = t[:-1].split("[", 1)
        p, _, port = spec.partition("/")
        p = p.strip().lower()
        if p in ("", "%any", "any", "0"):
            proto = 0
        elif p in PROTOS:
            proto = PROTOS[p]
        elif p.isdigit() and int(p) < 256:
            proto = int(p)
        else:
            raise TSError(f"unknown protocol {p!r} in {text!r}")
        if port and port.strip().lower() not in ("%any", "any"):
            if "-" in port:
                a, b = port.split("-", 1)
                lo, hi = _port(a), _port(b)
            else:
                lo = hi = _port(port)
            if lo > hi:
                raise TSError(f"port range {port!r} is empty")
    t = t.strip()
    if t == "dynamic":
        if dynamic is None:
            return TS(0, 0, 0, proto, lo, hi)  # resolved later against the own address
        t = dynamic
    try:
        if ".." in t:
            a, b = (ipaddress.ip_address(x.strip()) for x in t.split("..", 1))
            if a.version != b.version or int(a) > int(b):
                raise TSError(f"invalid range {t!r}")
            return TS(a.version, int(a), int(b), proto, lo, hi)
        net = ipaddress.ip_network(t, strict=False)
    except ValueError as exc:
        raise TSError(f"invalid traffic selector {text!r}: {exc}") from None
    return TS(net.version, int(net.network_address), int(net.broadcast_address), proto, lo, hi)


def resolve_dynamic(ts: TS, address: str) -> TS:
    """Replace a `dynamic` placeholder (version 0) by the own outer address."""
    if ts.version:
        return ts
    a = ipaddress.ip_address(address)
    return TS(a.version, int(a), int(a), ts.proto, ts.port_lo, ts.port_hi)


def to_json(ts: TS) -> list:
    return [ts.version, ts.start, ts.end, ts.proto, ts.port_lo, ts.port_hi]


def from_json(v: list) -> TS:
    return TS(*(int(x) for x in v))


def narrow(mine: list[TS], theirs: list[TS]) -> list[TS]:
    """All pairwise intersections (strongSwan's narrowing), duplicates removed."""
    out: list[TS] = []
    for a in theirs:
        for b in mine:
            c = a.intersect(b)
            if c is not None and c not in out:
                out.append(c)
    return out
