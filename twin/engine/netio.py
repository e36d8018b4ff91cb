"""TUN creation and raw ESP / ICMP sockets (Linux).

Why raw sockets without IP_HDRINCL: the kernel builds the outer header and fragments
only when the engine lets it (see datapath: the PMTU gate decides); transmit sockets
get a drop-all BPF filter so they never queue copies of incoming ESP.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IPPROTO_ESP = 50
SO_ATTACH_FILTER = 26
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DONT = 0
IPV6_MTU_DISCOVER = 23
IPV6_PMTUDISC_DONT = 0
IPV6_DONTFRAG = 62
BUF = 32 * 1024 * 1024  # > a TCP window of ESP frames: a burst never overflows


def open_tun(name: str = "esp0") -> int:
    """Create TUN `name` (IFF_TUN|IFF_NO_PI); the device lives while the fd is open."""
    fd = os.open("/dev/net/tun", os.O_RDWR)
    ifr = struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI)
    fcntl.ioctl(fd, TUNSETIFF, ifr)
    return fd


def _bufs(s: socket.socket, rcv: int, snd: int) -> None:
    for opt, val, fallback in ((SO_RCVBUFFORCE, rcv, socket.SO_RCVBUF), (SO_SNDBUFFORCE, snd, socket.SO_SNDBUF)):
        try:
            s.setsockopt(socket.SOL_SOCKET, opt, val)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, fallback, val)


def rx_socket(family: int) -> socket.socket:
    """Receive every ESP packet addressed to this namespace (family AF_INET/AF_INET6)."""
    s = socket.socket(family, socket.SOCK_RAW, IPPROTO_ESP)
    _bufs(s, BUF, 1 << 16)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
    return s


_drop_all = (ctypes.c_ubyte * 8)(*struct.pack("HBBI", 0x06, 0, 0, 0))  # BPF "ret #0"


def _attach_drop_all(s: socket.socket) -> None:
    prog = struct.pack("HL", 1, ctypes.addressof(_drop_all))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, prog)


def tx_socket(src: str) -> socket.socket:
    """A send-only ESP socket bound to the SA's outer source; outer may be fragmented."""
    family = socket.AF_INET6 if ":" in src else socket.AF_INET
    s = socket.socket(family, socket.SOCK_RAW, IPPROTO_ESP)
    _attach_drop_all(s)
    _bufs(s, 4096, BUF)
    if family == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DONT)
        s.bind((src, 0))
    else:
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DONT)
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_DONTFRAG, 0)
        s.bind((src, 0, 0, 0))
    return s


def icmp_sockets() -> tuple[socket.socket, socket.socket]:
    """Raw ICMP (v4) and ICMPv6 sockets for the PMTU gate's answers (send only)."""
    s4 = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    for s in (s4, s6):
        _attach_drop_all(s)
    return s4, s6


def inet_checksum(data: bytes) -> int:
    if len(data) & 1:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def send_ptb6(s6: socket.socket, pkt: bytes, mtu: int) -> None:
    """ICMPv6 Packet Too Big (RFC 4443 3.2) to the packet's source; the kernel picks our
    source address and fills the checksum."""
    body = struct.pack("!BBHI", 2, 0, 0, mtu) + pkt[:1280 - 48]
    src = socket.inet_ntop(socket.AF_INET6, pkt[8:24])
    s6.sendto(body, (src, 0, 0, 0))


def send_frag_needed(s4: socket.socket, pkt: bytes, mtu: int) -> None:
    """ICMP destination unreachable / fragmentation needed (RFC 1191) to the source."""
    ihl = (pkt[0] & 15) * 4
    quoted = pkt[:ihl + 8]
    hdr = struct.pack("!BBHHH", 3, 4, 0, 0, mtu & 0xFFFF)
    csum = inet_checksum(hdr + quoted)
    body = struct.pack("!BBHHH", 3, 4, csum, 0, mtu & 0xFFFF) + quoted
    s4.sendto(body, (socket.inet_ntop(socket.AF_INET, pkt[12:16]), 0))
