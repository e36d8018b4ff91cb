"""UDP 4500 for the daemon once an IKE_SA has floated: IKE datagrams behind the non-ESP
marker (RFC 3948 2.2), sent and received on the port the ESP in UDP shares.

Why raw sockets: on FreeBSD charon owns the UDP 4500 socket and the kernel's
``udp_ipsec_input`` takes the ESP datagrams out of it (``UDP_ENCAP_ESPINUDP``), leaving
the ones that start with four zero bytes to charon. In the twin the engine is the kernel
and already owns UDP 4500 on every port (``engine.netio.udp_encap_rx_socket``, bound to
each device, so Linux gives it every datagram to 4500 before a wildcard socket of ours).
The engine skips what carries the marker, as FreeBSD's kernel hands it on; here a raw
IPPROTO_UDP socket receives a copy of every UDP datagram the namespace receives, and a
classic BPF filter in the kernel keeps only those to port 4500 that start with the marker,
so ESP-in-UDP traffic at line rate never reaches the daemon. Sending builds the UDP header
itself (source port 4500, as charon's socket would) and lets the kernel add the IP header;
``IP_PKTINFO``/``IPV6_PKTINFO`` pick the source address the SA is on.

strongSwan's behaviour (libcharon/network/socket.h, kernel_netlink/socket-default): a
datagram sent on port 4500 carries the marker, one received there without it is ESP.
"""
from __future__ import annotations

import asyncio
import ctypes
import socket
import struct
from typing import Callable

from .model import NATT_PORT
MARKER = b"\x00\x00\x00\x00"
"""The non-ESP marker: an SPI of zero, which no ESP packet has (RFC 3948 2.2)."""

SO_ATTACH_FILTER = 26
IP_PKTINFO = 8
IPV6_RECVPKTINFO, IPV6_PKTINFO, IPV6_CHECKSUM = 49, 50, 7

# classic BPF opcodes (linux/filter.h)
_LDX_MSH_B, _LD_H_ABS, _LD_W_ABS, _LD_H_IND, _LD_W_IND = 0xB1, 0x28, 0x20, 0x48, 0x40
_JEQ_K, _RET_K = 0x15, 0x06


def _program(v4: bool) -> list[tuple[int, int, int, int]]:
    """Accept a datagram to UDP 4500 whose payload starts with the marker, drop the rest.
    An IPv4 raw socket sees the IP header (its length in the low nibble of byte 0); an
    IPv6 one starts at the UDP header."""
    if v4:
        return [(_LDX_MSH_B, 0, 0, 0),            # x = 4 * (ip[0] & 15)
                (_LD_H_IND, 0, 0, 2),             # udp destination port
                (_JEQ_K, 0, 3, NATT_PORT),
                (_LD_W_IND, 0, 0, 8),             # the first payload word
                (_JEQ_K, 0, 1, 0),
                (_RET_K, 0, 0, 0xFFFF),
                (_RET_K, 0, 0, 0)]
    return [(_LD_H_ABS, 0, 0, 2),
            (_JEQ_K, 0, 3, NATT_PORT),
            (_LD_W_ABS, 0, 0, 8),
            (_JEQ_K, 0, 1, 0),
            (_RET_K, 0, 0, 0xFFFF),
            (_RET_K, 0, 0, 0)]


def _attach(sock: socket.socket, prog: list[tuple[int, int, int, int]]) -> None:
    code = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(code)
    fprog = struct.pack("HL", len(prog), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def _drain(sock: socket.socket) -> None:
    """Empty what arrived before the filter was attached (any UDP datagram then)."""
    sock.setblocking(False)
    while True:
        try:
            sock.recv(65535)
        except BlockingIOError:
            return


class NattSender:
    """What ``Endpoint.transport`` offers the roles (``sendto``, ``get_extra_info``,
    ``is_closing``), for UDP 4500: the marker and the UDP header are added here."""

    def __init__(self, v4: socket.socket | None, v6: socket.socket | None) -> None:
        self.socks = {socket.AF_INET: v4, socket.AF_INET6: v6}
        self.closed = False

    def sendto(self, data: bytes, addr, local: str = "") -> None:
        host, port = addr[0].split("%")[0], int(addr[1])
        fam = socket.AF_INET6 if ":" in host and not host.startswith("::ffff:") else socket.AF_INET
        if host.startswith("::ffff:"):
            host = host[7:]
        sock = self.socks[fam]
        if sock is None or self.closed:
            return
        payload = MARKER + data
        header = struct.pack("!HHHH", NATT_PORT, port, 8 + len(payload), 0)  # IPv4: checksum 0 allowed
        anc = []
        if local:
            if fam == socket.AF_INET:
                anc = [(socket.IPPROTO_IP, IP_PKTINFO,
                        struct.pack("I4s4s", 0, socket.inet_aton(local), b"\0" * 4))]
            else:
                anc = [(socket.IPPROTO_IPV6, IPV6_PKTINFO, socket.inet_pton(socket.AF_INET6, local) + b"\0" * 4)]
        try:
            sock.sendmsg([header, payload], anc, 0, (host, 0))
        except OSError:
            pass  # a lost datagram: the retransmits decide, as for UDP 500

    def get_extra_info(self, name: str, default=None):
        return ("", NATT_PORT) if name == "sockname" else default

    def is_closing(self) -> bool:
        return self.closed


def open_natt(on_datagram: Callable[[bytes, tuple[str, int], str], None],
              loop: asyncio.AbstractEventLoop) -> tuple[NattSender, list[socket.socket]]:
    """The namespace's UDP 4500 for IKE: a sender and the receiving sockets, registered on
    ``loop``. ``on_datagram(data without the marker, (source, source port), local address)``."""
    socks: dict[int, socket.socket | None] = {}
    for fam in (socket.AF_INET, socket.AF_INET6):
        try:
            s = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_UDP)
        except OSError:
            socks[fam] = None
            continue
        _attach(s, _program(fam == socket.AF_INET))
        _drain(s)
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, IPV6_CHECKSUM, 6)  # the kernel sums the UDP header
            s.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)
        loop.add_reader(s.fileno(), _reader(s, fam, on_datagram))
        socks[fam] = s
    opened = [s for s in socks.values() if s is not None]
    return NattSender(socks[socket.AF_INET], socks[socket.AF_INET6]), opened


def _reader(s: socket.socket, fam: int, on_datagram) -> Callable[[], None]:
    def read() -> None:
        for _ in range(64):
            try:
                data, anc, _fl, addr = s.recvmsg(65535, socket.CMSG_SPACE(20))
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if fam == socket.AF_INET:
                ihl = (data[0] & 15) * 4
                local = socket.inet_ntoa(data[16:20])
                udp = data[ihl:]
            else:
                local = ""
                for lvl, typ, cd in anc:
                    if lvl == socket.IPPROTO_IPV6 and typ == IPV6_PKTINFO:
                        local = socket.inet_ntop(socket.AF_INET6, cd[:16])
                udp = data
            if len(udp) < 12 or udp[8:12] != MARKER:
                continue
            sport = int.from_bytes(udp[0:2], "big")
            on_datagram(bytes(udp[12:]), (addr[0], sport), local)
    return read
