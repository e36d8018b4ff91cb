"""The inner packets of injected frames: packed by hand for speed (issue 15), byte for byte
what scapy builds (``IP(ttl=64)/UDP/payload``, ``IPv6(hlim=64)``), checksums included --
a wrong UDP checksum would make the far LAN's kernel drop every frame."""
from __future__ import annotations

import struct

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6

from ipsec_hil.lab.inject.craft import MAGIC, Inner, min_inner


@pytest.mark.parametrize("family,src,dst", [("ipv4", "198.51.100.7", "203.0.113.10"),
                                            ("ipv6", "fd00:feed:b::1", "fd00:beef:a::10")])
@pytest.mark.parametrize("extra", [0, 1, 2, 59, 960, 1385, 8911])
def test_inner_packet_is_scapys(family, src, dst, extra):
    inner = Inner(family, src, dst, port=5555, token=b"\x01\xfe\x80\x7f")
    size = min_inner(family) + extra
    payload = MAGIC + inner.token + struct.pack("!I", 123456) + bytes(extra)
    ip = IP(src=src, dst=dst, ttl=64) if family == "ipv4" else IPv6(src=src, dst=dst, hlim=64)
    want = raw(ip / UDP(sport=5555, dport=5555) / payload)
    got = inner.packet(123456, size)
    assert len(got) == size
    assert got == want


def test_checksum_never_zero_on_the_wire():
    """UDP sends a computed 0 as 0xFFFF (0 means "no checksum", forbidden over IPv6)."""
    for index in range(4096):
        pkt = Inner("ipv6", "fd00::1", "fd00::2", token=b"\x00\x00\x00\x00").packet(index, 68)
        assert pkt[46:48] != b"\x00\x00"
