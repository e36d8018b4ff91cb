"""capture.packets reads pcaps with struct (issue 15: scapy took 3.4 s for an every-size
sweep's capture); it must say exactly what scapy's reading says, packet for packet, for
what tcpdump writes: Ethernet (and a VLAN tag), raw IP, Linux cooked, both byte orders,
nanosecond files, fragments of both families, extension headers, a snap length that cuts."""
from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import ICMP, IP, UDP, fragment
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, ICMPv6EchoRequest
from scapy.layers.ipsec import ESP
from scapy.layers.l2 import CookedLinux, Dot1Q, Ether

from ipsec_hil.lab.traffic.capture import _packets_scapy, _packets_struct, packets


def ip_packets():
    big = IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=1, dport=4500) / (b"x" * 3000)
    v6frag = IPv6(src="fd00::1", dst="fd00::2") / IPv6ExtHdrFragment(id=7, m=1, offset=0, nh=17) / UDP(dport=53) / b"a"
    v6frag2 = IPv6(src="fd00::1", dst="fd00::2") / IPv6ExtHdrFragment(id=7, m=0, offset=100, nh=17) / (b"b" * 20)
    return [
        IP(src="198.51.100.1", dst="203.0.113.9") / ESP(spi=0x1234, seq=1, data=b"z" * 100),
        IP(src="198.51.100.1", dst="203.0.113.9") / UDP(sport=4500, dport=4500) / (b"\0" * 4 + b"q" * 60),
        IP(src="198.51.100.1", dst="203.0.113.9") / ICMP() / b"ping",
        *fragment(big, fragsize=1000),
        IPv6(src="fd00:feed::a", dst="fd00:feed::b") / ESP(spi=0x99, seq=2, data=b"y" * 1400),
        IPv6(src="fd00:feed::a", dst="fd00:feed::b") / UDP(sport=5, dport=5555) / b"tag",
        IPv6(src="fd00::1", dst="fd00::2") / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / UDP(dport=9) / b"e",
        IPv6(src="fd00::1", dst="fd00::2") / ICMPv6EchoRequest(data=b"p" * 50),
        v6frag, v6frag2,
    ]


def pcap_of(frames, linktype, nano=False, endian="<", snaplen=65535) -> bytes:
    """A classic pcap as tcpdump writes it (written here, not by either reader under test)."""
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for i, f in enumerate(frames):
        raw = bytes(f)
        cut = raw[:snaplen]
        out.append(struct.pack(endian + "IIII", 1700000000 + i, 1000 * i, len(cut), len(raw)) + cut)
    return b"".join(out)


def link(kind, p):
    if kind == "ether":
        return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p
    if kind == "vlan":
        return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=8) / p
    if kind == "sll":
        return CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, proto=0x0800 if p.version == 4 else 0x86DD) / p
    return p


LINKTYPES = {"ether": 1, "vlan": 1, "sll": 113, "raw": 101}


@pytest.mark.parametrize("kind", sorted(LINKTYPES))
@pytest.mark.parametrize("nano,endian", [(False, "<"), (True, ">")])
def test_struct_reader_says_what_scapy_says(kind, nano, endian):
    data = pcap_of([link(kind, p) for p in ip_packets()], linktype=LINKTYPES[kind], nano=nano, endian=endian)
    fast = _packets_struct(data)
    assert fast is not None, "the struct reader declined a pcap tcpdump writes"
    assert fast == _packets_scapy(data)
    assert len(fast) == len(ip_packets())


def test_cut_by_the_snap_length():
    data = pcap_of([link("ether", p) for p in ip_packets()], linktype=1, snaplen=96)
    fast = _packets_struct(data)
    slow = _packets_scapy(data)
    assert [(p.src, p.dst, p.proto, p.length, p.fragment) for p in fast] == \
           [(p.src, p.dst, p.proto, p.length, p.fragment) for p in slow]
    assert all(len(p.raw) <= 96 - 14 for p in fast)
    assert fast[0].length == len(bytes(ip_packets()[0]))  # the IP header's length, not the captured one


def test_other_formats_go_to_scapy():
    pcapng = b"\x0a\x0d\x0d\x0a" + b"\0" * 40
    assert _packets_struct(pcapng) is None
    null_link = pcap_of([link("raw", ip_packets()[0])], linktype=101)
    assert _packets_struct(null_link[:20] + struct.pack("<I", 228) + null_link[24:]) is None  # a link type it does not know
    data = pcap_of([link("ether", p) for p in ip_packets()], linktype=1)
    assert packets(data) == _packets_scapy(data)
