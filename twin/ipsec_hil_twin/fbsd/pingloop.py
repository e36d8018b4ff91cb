"""FreeBSD's ping loop on a raw socket, for streams: the echoes paced as sbin/ping/ping.c
paces them, without iputils.

Why not iputils for a stream: at the intervals the tests stream at (10 ms, the rekey and
health tests' 500-900 echoes), iputils 20221126 either slips or spins. Without a preload it
waits in a blocking recvmsg() with SO_RCVTIMEO and sends about a jiffy late each time
(1.6x FreeBSD's duration at 10 ms); with ``-l 2`` it keeps the rate, but whenever nothing is
in flight and the next send is at most 1000/HZ ms away it busy-waits on sched_yield()
(ping/ping_common.c main_loop: "Otherwise, spin!"): measured here, 200 echoes at 10 ms
through the lab's SSH cost 0.50 machine CPU-s with iputils and 0.24 with this loop.

FreeBSD's loop (ping.c main) is simple enough to keep exactly: the first echo at once; then
pselect() until ``last + interval`` -- a reply arriving meanwhile is printed and the wait
goes on towards the same instant, so replies never shift the schedule; at the instant the
next echo is sent and ``last`` becomes now. After the last echo it waits 2 x the largest
round trip (whole seconds, at least 1) when any reply came, else ``-W`` (MAXWAIT, 10 s), and
it stops as soon as every echo is answered; ``-t`` ends the run whenever it comes. An echo
the kernel refuses counts as transmitted and is reported (pingout.Printer.send_failed).

The echo is ping.c's: identifier the pid's low 16 bits, sequence from 0, the first 8 data
bytes the send time (struct tv32: seconds and microseconds, network order), the rest
``i & 0xff`` for data byte i. Don't-fragment stays off (IP_PMTUDISC_DONT, as iputils
``-M dont``): only a stream without ``-D`` comes here (ipsec_hil_twin.fbsd.ping.own_loop).
"""
from __future__ import annotations

import errno
import functools
import os
import select
import socket
import struct
import sys
import time

from ipsec_hil_twin.fbsd.pingout import EX_OSERR, Printer

MAXWAIT_MS = 10_000
"""ping.c MAXWAIT (s) x 1000: the wait after the last echo when no reply came, without -W."""

IP_MTU_DISCOVER, IP_PMTUDISC_DONT = 10, 0  # <linux/in.h>
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DONT = 23, 0  # <linux/in6.h>
IPV6_RECVHOPLIMIT, IPV6_HOPLIMIT = 51, 52  # <linux/in6.h>

ECHO4, ECHOREPLY4 = 8, 0
ECHO6, ECHOREPLY6 = 128, 129

#: FreeBSD's pr_icmph words for the IPv4 errors ping prints; the code's text by (type, code).
ICMP4_ERRORS = {
    (3, 0): "Destination Net Unreachable", (3, 1): "Destination Host Unreachable",
    (3, 2): "Destination Protocol Unreachable", (3, 3): "Destination Port Unreachable",
    (3, 5): "Source Route Failed", (3, 13): "Communication prohibited by filter",
    (11, 0): "Time to live exceeded", (11, 1): "Frag reassembly time exceeded",
}


def icmp4_text(typ: int, code: int, pointer: int) -> str:
    """pr_icmph's words for an IPv4 error of ``typ``/``code`` (not "frag needed": its MTU)."""
    if (typ, code) in ICMP4_ERRORS:
        return ICMP4_ERRORS[(typ, code)]
    if typ == 3:
        return f"Dest Unreachable, Bad Code: {code}"
    if typ == 11:
        return f"Time exceeded, Bad Code: {code}"
    if typ == 12:
        return f"Parameter problem: pointer = 0x{pointer:02x}"
    return "Source Quench"


#: ping6.c pr_icmph's words for the ICMPv6 errors (printed with -v only).
ICMP6_ERRORS = {
    (1, 0): "No Route to Destination", (1, 1): "Destination Administratively Unreachable",
    (1, 2): "Destination Unreachable Beyond Scope", (1, 3): "Destination Host Unreachable", (1, 4): "Destination Port Unreachable",
    (3, 0): "Time to live exceeded", (3, 1): "Frag reassembly time exceeded",
}

#: An errno as FreeBSD's strerror words it (a missing route is EHOSTUNREACH there; Linux
#: says ENETUNREACH for it), where ping's message would otherwise be Linux's.
FREEBSD_STRERROR = {errno.ENETUNREACH: "No route to host", errno.EHOSTUNREACH: "No route to host",
                    errno.ENETDOWN: "Network is down", errno.EMSGSIZE: "Message too long",
                    errno.EADDRNOTAVAIL: "Can't assign requested address", errno.ENOBUFS: "No buffer space available",
                    errno.EPERM: "Operation not permitted", errno.EACCES: "Permission denied"}


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``. Not ipsec_hil_twin.engine.netio.inet_checksum:
    importing the engine's module costs an emulated command 32 ms (dataclasses, ctypes)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


@functools.lru_cache(maxsize=4)
def _pattern(size: int) -> bytes:
    """ping.c's data: byte i is ``i & 0xff`` (the first 8 then carry the send time)."""
    return bytes(i & 0xFF for i in range(size))


def filled(size: int, pattern: bytes) -> bytes:
    """ping.c fill(): with ``-p``, the data after the 8-byte timestamp repeats the pattern
    from its first byte (``datap = &outpack[ICMP_MINLEN + TIMEVAL_LEN]``); the first 8
    bytes keep the default fill until the timestamp overwrites them."""
    data = bytearray(_pattern(size))
    if pattern and size > 8:
        reps = (size - 8) // len(pattern) + 1
        data[8:] = (pattern * reps)[: size - 8]
    return bytes(data)


def echo(fam: int, ident: int, seq: int, size: int, now_ns: int, pattern: bytes = b"") -> bytes:
    """One echo request of ``size`` data bytes, stamped ``now_ns`` (monotonic) when it has
    room for the 8-byte timestamp. IPv6's checksum is the kernel's (raw ICMPv6 sockets)."""
    data = bytearray(filled(size, pattern) if pattern else _pattern(size))
    if size >= 8:
        data[:8] = struct.pack("!II", (now_ns // 1_000_000_000) & 0xFFFFFFFF, (now_ns // 1000) % 1_000_000)
    head = struct.pack("!BBHHH", ECHO4 if fam == 4 else ECHO6, 0, 0, ident, seq & 0xFFFF)
    if fam == 6:
        return head + bytes(data)
    return head[:2] + struct.pack("!H", checksum(head + data)) + head[4:] + bytes(data)


def rtt_ms(data: bytes, now_ns: int) -> float | None:
    """The round trip of a reply whose data starts with our timestamp; None without one."""
    if len(data) < 8:
        return None
    sec, usec = struct.unpack("!II", data[:8])
    sent = sec * 1_000_000_000 + usec * 1000
    now = (now_ns // 1_000_000_000 & 0xFFFFFFFF) * 1_000_000_000 + now_ns % 1_000_000_000
    return max(0.0, (now - sent) / 1e6)


class Stream:
    """One ping run: the socket, the counts, and what a received packet means."""

    def __init__(self, pr: Printer, fam: int, addr: str, size: int, src: str | None, ttl: int | None,
                 pattern: bytes = b"") -> None:
        self.pattern = pattern
        self.pr, self.fam, self.addr, self.size = pr, fam, addr, size
        self.ident = os.getpid() & 0xFFFF
        self.transmitted = 0
        self.tmax_ms = 0.0
        self.seen: set[int] = set()
        if fam == 4:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            self.sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DONT)
            if ttl is not None:
                self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        else:
            self.sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
            self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DONT)
            self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1)
            if ttl is not None:
                self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, ttl)
        if src:
            try:
                self.sock.bind((src, 0))
            except OSError:
                self.sock.close()
                raise
        self.sock.setblocking(False)

    def close(self) -> None:
        self.sock.close()

    def send(self) -> None:
        """pinger(): the next echo; a refused one is reported and still counted."""
        pkt = echo(self.fam, self.ident, self.transmitted, self.size, time.monotonic_ns(), self.pattern)
        try:
            self.sock.sendto(pkt, (self.addr, 0))
        except BlockingIOError:
            self.pr.send_failed(FREEBSD_STRERROR[errno.ENOBUFS])
        except OSError as e:
            self.pr.send_failed(FREEBSD_STRERROR.get(e.errno, e.strerror or str(e)))
        self.transmitted += 1

    def receive(self) -> None:
        """Every packet waiting on the socket: our replies printed, errors about our echoes
        printed as ping does, anything else (other pings' packets, our own requests on
        loopback) ignored."""
        while True:
            try:
                data, anc, _flags, frm = self.sock.recvmsg(65535, socket.CMSG_SPACE(4))
            except (BlockingIOError, InterruptedError):
                return
            now = time.monotonic_ns()
            if self.fam == 4:
                self._packet4(data, frm[0], now)
            else:
                hlim = next((struct.unpack("i", d[:4])[0] for lvl, typ, d in anc
                             if lvl == socket.IPPROTO_IPV6 and typ == IPV6_HOPLIMIT), 0)
                self._packet6(data, frm[0], hlim, now)

    def _reply(self, nbytes: int, src: str, seq: int, ttl: int, data: bytes, now: int) -> None:
        rtt = rtt_ms(data, now)
        if rtt is not None:
            self.tmax_ms = max(self.tmax_ms, rtt)
        dup = seq in self.seen
        self.seen.add(seq)
        self.pr.reply(nbytes, src, seq, ttl, None if rtt is None else float(f"{rtt:.3f}"), dup)

    def _echo_reply(self, icmp: bytes, reply_type: int, src: str, hops: int, now: int) -> bool:
        """An echo reply (``icmp`` from its type on): printed when it answers ours; True
        for any echo reply, so the caller looks no further."""
        if icmp[0] != reply_type:
            return False
        ident, seq = struct.unpack("!HH", icmp[4:8])
        if ident == self.ident:
            self._reply(len(icmp), src, seq, hops, icmp[8:], now)
        return True

    def _ours(self, inner: bytes, dst_ok: bool, echo_type: int) -> int | None:
        """The sequence of the echo an ICMP error quotes, when it is one of ours."""
        if not dst_ok or len(inner) < 8:
            return None
        typ, _code, _sum, ident, seq = struct.unpack("!BBHHH", inner[:8])
        return seq if typ == echo_type and ident == self.ident else None

    def _packet4(self, pkt: bytes, src: str, now: int) -> None:
        if len(pkt) < 20:
            return
        ihl, ttl = (pkt[0] & 0x0F) * 4, pkt[8]
        icmp = pkt[ihl:]
        if len(icmp) < 8:
            return
        typ, code = icmp[0], icmp[1]
        if self._echo_reply(icmp, ECHOREPLY4, src, ttl, now) or typ not in (3, 4, 11, 12):
            return
        quoted = icmp[8:]
        if len(quoted) < 20:
            return
        qhl = (quoted[0] & 0x0F) * 4
        dst_ok = quoted[9] == socket.IPPROTO_ICMP and socket.inet_ntoa(quoted[16:20]) == self.addr
        if self._ours(quoted[qhl:], dst_ok, ECHO4) is None:
            return
        if (typ, code) == (3, 4):
            self.pr.icmp_error(src, "", struct.unpack("!H", icmp[6:8])[0])
        else:
            self.pr.icmp_error(src, icmp4_text(typ, code, icmp[4]))

    def _packet6(self, icmp: bytes, src: str, hlim: int, now: int) -> None:
        if len(icmp) < 8:
            return
        typ, code = icmp[0], icmp[1]
        if self._echo_reply(icmp, ECHOREPLY6, src, hlim, now) or typ not in (1, 2, 3):
            return
        quoted = icmp[8:]
        if len(quoted) < 48:
            return
        dst_ok = quoted[6] == socket.IPPROTO_ICMPV6 and socket.inet_ntop(socket.AF_INET6, quoted[24:40]) == self.addr
        if self._ours(quoted[40:], dst_ok, ECHO6) is None:
            return
        if typ == 2:
            self.pr.icmp_error(src, "", struct.unpack("!I", icmp[4:8])[0])
        else:
            self.pr.icmp_error(src, ICMP6_ERRORS.get((typ, code), f"{'Destination Unreachable' if typ == 1 else 'Time exceeded'}, Bad Code: {code}"))


def run(pr: Printer, fam: int, addr: str, size: int, *, count: int | None, interval: float,
        timeout: float | None, wait_ms: int | None, src: str | None, ttl: int | None,
        pattern: bytes = b"") -> int:
    """The whole run (ping.c main's loop); returns the exit status after the summary, or
    ping.c's err() status when the socket cannot be had (EX_OSERR) or bound to -S (1)."""
    try:
        s = Stream(pr, fam, addr, size, src, ttl, pattern)
    except OSError as e:
        what, code = ("bind", 1) if src and e.errno in (errno.EADDRNOTAVAIL, errno.EINVAL) else ("socket", EX_OSERR)
        sys.stderr.write(f"{pr.prog}: {what}: {FREEBSD_STRERROR.get(e.errno, e.strerror or str(e))}\n")
        return code
    start = time.monotonic()
    end_at = start + timeout if timeout is not None else None
    try:
        s.send()
        last, wait, almost_done = time.monotonic(), interval, False
        while True:
            now = time.monotonic()
            if end_at is not None and now >= end_at:
                break  # -t: SIGALRM, finish()
            until = last + wait
            if end_at is not None:
                until = min(until, end_at)
            ready, _, _ = select.select([s.sock], [], [], max(0.0, until - now))
            if ready:
                s.receive()
                if count and pr.received >= count:
                    break
                continue
            if end_at is not None and time.monotonic() >= end_at:
                break
            if not count or s.transmitted < count:
                s.send()
            else:
                if almost_done:
                    break
                almost_done = True
                if pr.received:
                    wait = float(max(1, int(2 * s.tmax_ms / 1000)))
                else:
                    wait = (wait_ms if wait_ms is not None else MAXWAIT_MS) / 1000.0
            last = time.monotonic()
    except KeyboardInterrupt:
        pass  # SIGINT: finish() prints the statistics
    finally:
        s.close()
    return pr.summary(s.transmitted)
