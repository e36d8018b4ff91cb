"""Traffic selectors as swanctl writes them: `198.51.100.64/26[tcp/5201]`.

Why: the 002 page's six children differ only by TCP port, so outbound SA selection
must honour `[proto/port]`, not only the prefix.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

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
