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
import sys
from collections.abc import Iterator
from typing import Any

from .sizes import ICMPV6_PLD_MAXLEN, NATT_PORT

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IPPROTO_ESP = 50
SO_ATTACH_FILTER = 26
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DONT = 0
IP_PMTUDISC_DO = 2
IP_PKTINFO = 8  # linux/in.h (Python's socket module lacks it)
IPV6_MTU_DISCOVER = 23
IPV6_PMTUDISC_DONT = 0
IPV6_DONTFRAG = 62
IP_RECVERR = 11  # linux/in.h
IPV6_RECVERR = 25  # linux/in6.h
SO_MEMINFO = 55  # asm-generic/socket.h: the socket's sk_meminfo, SK_MEMINFO_VARS u32s
SK_MEMINFO_DROPS = 8  # linux/sock_diag.h: the index of sk_drops (frames the socket had no room for)
SK_MEMINFO_VARS = 9
BUF = 32 * 1024 * 1024  # > a TCP window of ESP frames: a burst never overflows


def open_tun(name: str = "esp0") -> int:
    """Create TUN `name` (IFF_TUN|IFF_NO_PI); the device lives while the fd is open."""
    fd = os.open("/dev/net/tun", os.O_RDWR)
    ifr = struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI)
    fcntl.ioctl(fd, TUNSETIFF, ifr)
    return fd


def _sysctl(path: str, value: str) -> None:
    try:
        with open(os.path.join("/proc/sys", path), "w") as fh:
            fh.write(value)
    except OSError as exc:
        print(f"engine: sysctl {path}: {exc}", file=sys.stderr)


#: esp0's ring. The port's queue is the engine's model (pacer.PortQueue); the ring only
#: absorbs the engine's own stalls on a busy machine, so it never drops a load the model
#: admits. Why not Linux's default 1,000 (issue 52): a TUN whose ring is full drops and
#: tells the sender nothing (no ENOBUFS, no back-pressure), so a stall of 0.25 s lost a
#: run of consecutive sizes of a 4,000-packets-a-second every-size sweep (a CI run beside
#: busy loops: 2543-2551; an earlier one 2852-2859). 4,000 hold a second of that sweep and
#: half a second of line rate; the drops that remain are counted (datapath.EspRingDrops).
RING_PACKETS = 4000


def port_queue_bytes(queue_bytes: list[int | None]) -> int | None:
    """The queue the engine's port model holds: the smallest stated egress queue of the
    ports it paces to (None when none is stated: no model)."""
    stated = [q for q in queue_bytes if q]
    return min(stated) if stated else None


def open_tun_up(name: str = "esp0") -> int:
    """:func:`open_tun`, then the device as a datapath needs it: up, MTU 65000 (the
    routes carry the ESP limits), txqueuelen :data:`RING_PACKETS`, no IPv6
    link-local (no MLD/RS noise) and no reverse-path filter (decrypted packets arrive from
    a source routed elsewhere). One home for the engine (ipsec_hil_twin.engine.__main__)
    and its floor (ipsec_hil_twin.engine.floor)."""
    from pyroute2 import IPRoute

    tun = open_tun(name)
    _sysctl(f"net/ipv6/conf/{name}/addr_gen_mode", "1")
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=name)[0]
        ipr.link("set", index=idx, mtu=65000, txqlen=RING_PACKETS, state="up")
    _sysctl(f"net/ipv4/conf/{name}/rp_filter", "0")
    _sysctl("net/ipv4/conf/all/rp_filter", "0")
    return tun


def _bufs(s: socket.socket, rcv: int, snd: int) -> None:
    for opt, val, fallback in ((SO_RCVBUFFORCE, rcv, socket.SO_RCVBUF), (SO_SNDBUFFORCE, snd, socket.SO_SNDBUF)):
        try:
            s.setsockopt(socket.SOL_SOCKET, opt, val)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, fallback, val)


def rx_socket(family: int, ifname: str | None = None) -> socket.socket:
    """Receive every ESP packet addressed to this namespace (family AF_INET/AF_INET6) that
    arrives on port ``ifname`` (SO_BINDTODEVICE; None: on any), so that a frame the socket
    had no room for is one port's missed frame (:func:`socket_drops`)."""
    s = socket.socket(family, socket.SOCK_RAW, IPPROTO_ESP)
    _bufs(s, BUF, 1 << 16)
    if ifname is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
    return s


_drop_all = (ctypes.c_ubyte * 8)(*struct.pack("HBBI", 0x06, 0, 0, 0))  # BPF "ret #0"


def _attach_drop_all(s: socket.socket) -> None:
    prog = struct.pack("HL", 1, ctypes.addressof(_drop_all))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, prog)


def tx_socket(src: str, proto: int = IPPROTO_ESP) -> socket.socket:
    """A send-only ESP socket bound to the SA's outer source; outer may be fragmented.
    proto IPPROTO_UDP: for NAT-T, the caller writes the UDP header (udp_encap_header).

    With IP_RECVERR / IPV6_RECVERR: a frame the port's qdisc drops (the shaped link's
    queue full) fails its sendto with ENOBUFS, so the engine counts it as the driver's
    transmit drop. Without it Linux reports success for a frame it dropped (raw_sendmsg:
    ``if (err == -ENOBUFS && !recverr) err = 0``) and the frame vanished counted as sent,
    nowhere as lost (issue 52). The option also makes an ICMP error about an earlier frame
    fail the next sendto once (the socket's pending error): :func:`send_frame` sends again."""
    family = socket.AF_INET6 if ":" in src else socket.AF_INET
    s = socket.socket(family, socket.SOCK_RAW, proto)
    _attach_drop_all(s)
    _bufs(s, 4096, BUF)
    if family == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DONT)
        s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        s.bind((src, 0))
    else:
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DONT)
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_DONTFRAG, 0)
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
        s.bind((src, 0, 0, 0))
    return s


#: errnos of a sendto that failed for the frame itself: the qdisc's drop (ENOBUFS), a full
#: socket buffer (EAGAIN), a frame too large (EMSGSIZE). Any other is the socket's pending
#: error from an ICMP message about an EARLIER frame (IP_RECVERR): this frame was not sent
#: and is sent again once.
FRAME_ERRNOS = (105, 11, 90)


def send_frame(sock: socket.socket, frame: bytes, addr: tuple) -> None:
    """sendto, once more when the first failure was an earlier frame's ICMP error
    (:data:`FRAME_ERRNOS`); an OSError that remains is this frame's own loss."""
    try:
        sock.sendto(frame, addr)
    except OSError as exc:
        if exc.errno in FRAME_ERRNOS:
            raise
        sock.sendto(frame, addr)


def socket_drops(s: socket.socket) -> int:
    """The frames ``s`` had no room for since it was opened (SO_MEMINFO's sk_drops)."""
    raw = s.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 4 * SK_MEMINFO_VARS)
    return struct.unpack_from("I", raw, 4 * SK_MEMINFO_DROPS)[0]


def udp_encap_header(esp_len: int) -> bytes:
    """RFC 3948 2.1 as FreeBSD's udp_ipsec_output() writes it: ports 4500 both ways (the
    lab has no NAT to rewrite them), length, checksum 0 ("SHOULD be transmitted as zero")."""
    return struct.pack("!HHHH", NATT_PORT, NATT_PORT, 8 + esp_len, 0)


def udp_encap_rx_socket(ifname: str | None = None) -> socket.socket:
    """UDP 4500 of the namespace (IKE stays on 500 in the twin, so the engine owns 4500):
    each datagram is an ESP packet unless it starts with the non-ESP marker (4 zero
    bytes, IKE) or is a 1-byte NAT keepalive; IP_PKTINFO tells which address it came to.
    ``ifname``: only what arrives on that port (one socket a port may bind 4500 each)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _bufs(s, BUF, 1 << 16)
    s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    if ifname is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
    s.bind(("0.0.0.0", NATT_PORT))
    return s


def sealed_in_udp(seal: Any) -> Any:
    """A sealer whose ESP packet rides in a UDP 4500 datagram (udp_ipsec_output's step);
    the raw IPPROTO_UDP socket (tx_socket) adds only the outer IP header."""
    def seal_in_udp(pkt: bytes, nh: int, seq: int, *fault_args: bool) -> bytes:
        esp = seal(pkt, nh, seq, *fault_args)  # fault_args: esp.seal's pad_extra, swap_nonce
        return udp_encap_header(len(esp)) + esp
    return seal_in_udp


def natt_datagrams(s: socket.socket, buf: bytearray, mv: memoryview, most: int) -> Iterator[tuple[bytes, bytes]]:
    """(ESP packet, destination address) of up to `most` waiting UDP 4500 datagrams.
    The non-ESP marker (IKE) and 1-byte NAT keepalives are skipped (udp_ipsec_input);
    IP_PKTINFO's ipi_addr is the destination of the datagram's IP header."""
    for _i in range(most):
        try:
            n, ancdata, _fl, _addr = s.recvmsg_into([buf], socket.CMSG_SPACE(12))
        except BlockingIOError:
            return
        if n < 8 or buf[:4] == b"\0\0\0\0":
            continue
        dst = b""
        for lvl, typ, data in ancdata:
            if lvl == socket.IPPROTO_IP and typ == IP_PKTINFO:
                dst = bytes(data[8:12])
        yield bytes(mv[:n]), dst


def set_outer_df(s: socket.socket, on: bool) -> None:
    """DF on the outer IPv4 header of what `s` sends next (sizes.outer_df decides it)."""
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO if on else IP_PMTUDISC_DONT)


class OuterDf:
    """Which outer IPv4 sockets send with DF now (`on`): net.inet.ipsec.dfbit decides per
    packet (sizes.outer_df), the socket option changes with a syscall only when it must."""

    def __init__(self) -> None:
        self.on: dict[socket.socket, bool] = {}  # the sockets whose DF is set

    def set(self, sock: socket.socket, on: bool) -> None:
        if self.on.get(sock, False) == on:
            return
        set_outer_df(sock, on)
        if on:
            self.on[sock] = True
        else:
            self.on.pop(sock, None)


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
    body = struct.pack("!BBHI", 2, 0, 0, mtu) + pkt[:ICMPV6_PLD_MAXLEN]
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
