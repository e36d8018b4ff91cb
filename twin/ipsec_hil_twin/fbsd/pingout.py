"""What FreeBSD 14's ping prints for one run, whoever sends the echoes.

Why a module of its own: the emulated ping has two senders -- the real iputils ping, whose
lines ipsec_hil_twin.fbsd.ping rewrites, and ipsec_hil_twin.fbsd.pingloop, FreeBSD's loop on a raw socket for
streams -- and the appliance must print the same lines, counts and exit status from both.
The formats are sbin/ping/ping.c and ping6.c's (pr_pack, pr_icmph, the summary); the
golden files under tests/golden/ping hold real samples.
"""
from __future__ import annotations

import math
import sys
import threading

EX_OSERR = 71


class Printer:
    """The replies, errors and summary of one ping run, counted as they are printed.

    ``size`` is the data bytes after the ICMP header (what an ICMP error line counts on);
    ``quiet`` (-q) drops the per-echo lines, ``verbose`` (-v) lets ping6 print the ICMPv6
    errors it would otherwise keep to itself."""

    def __init__(self, prog: str, fam: int, hostname: str, addr: str, size: int,
                 quiet: bool = False, verbose: bool = False, kame6: bool = True) -> None:
        self.prog, self.fam, self.hostname, self.addr, self.size = prog, fam, hostname, addr, size
        # FreeBSD 14's ping6.c names its summary `ping6 statistics` / `std-dev`; 15's merged
        # ping says `ping statistics` / `stddev` for both families (ipsec_hil_twin.fbsd.osrel)
        self.kame6 = kame6 and fam == 6
        self.quiet, self.verbose = quiet, verbose
        self.received = 0
        self.dups = 0
        self.rtts: list[float] = []
        self.send_failures = 0
        self._lock = threading.Lock()  # the iputils path reports send failures from its stderr thread

    def reply(self, nbytes: int, src: str, seq: int, ttl: int, rtt_ms: float | None, dup: bool) -> None:
        """One echo reply: ``seq`` as FreeBSD numbers it (from 0), ``ttl`` the IPv4 TTL or
        the IPv6 hop limit, ``rtt_ms`` None when the data is too short for a timestamp."""
        if dup:
            self.dups += 1
        else:
            self.received += 1
            if rtt_ms is not None:
                self.rtts.append(rtt_ms)
        if self.quiet:
            return
        tpart = f" time={rtt_ms:.3f} ms" if rtt_ms is not None else ""
        if self.fam == 4:
            line = f"{nbytes} bytes from {src}: icmp_seq={seq} ttl={ttl}{tpart}{' (DUP!)' if dup else ''}\n"
        else:
            line = f"{nbytes} bytes from {src}, icmp_seq={seq} hlim={ttl}{tpart}{'(DUP!)' if dup else ''}\n"
        sys.stdout.write(line)
        sys.stdout.flush()

    def icmp_error(self, src: str, what: str, mtu: int | None = None) -> None:
        """An ICMP error about one of our echoes: ping prints it (pr_icmph), ping6 only
        with -v. ``mtu``: a "fragmentation needed" / "packet too big" error's MTU."""
        if self.fam == 4 and not self.quiet:
            text = f"frag needed and DF set (MTU {mtu})" if mtu is not None else what
            sys.stdout.write(f"{28 + 8 + self.size} bytes from {src}: {text}\n")
        elif self.fam == 6 and self.verbose:
            text = f"Packet too big mtu = {mtu}" if mtu is not None else what
            sys.stdout.write(f"{48 + 8 + self.size} bytes from {src}: {text}\n")
        else:
            return
        sys.stdout.flush()

    def send_failed(self, reason: str) -> None:
        """One echo the kernel refused (sendto/sendmsg's errno as text): ping warns on
        stderr; ping6 also prints its "wrote" line. The echo still counts as transmitted."""
        with self._lock:
            self.send_failures += 1
        if self.fam == 6:
            sys.stderr.write(f"{self.prog}: sendmsg: {reason}\n")
            sys.stderr.flush()
            # FreeBSD 15's ping6.c pinger prints the literal "ping: wrote %s" and the host name
            who, host = (self.prog, self.addr) if self.kame6 else ("ping", self.hostname)
            sys.stdout.write(f"{who}: wrote {host} {8 + self.size} chars, ret=-1\n")
            sys.stdout.flush()
        else:
            sys.stderr.write(f"{self.prog}: sendto: {reason}\n")
            sys.stderr.flush()

    def summary(self, transmitted: int) -> int:
        """The statistics block; returns ping's exit status: 0 with any reply, 2 without,
        and ping6's EX_OSERR when every send failed."""
        out = sys.stdout
        stats_name = "ping6 statistics" if self.kame6 else "ping statistics"
        out.write(f"\n--- {self.hostname} {stats_name} ---\n")
        loss = ((transmitted - self.received) * 100.0 / transmitted) if transmitted else 0.0
        dup_s = f"+{self.dups} duplicates, " if self.dups else ""
        out.write(f"{transmitted} packets transmitted, {self.received} packets received, {dup_s}"
                  f"{loss:.1f}% packet loss\n")
        if self.received and self.rtts and self.size >= 8:
            avg = sum(self.rtts) / len(self.rtts)
            var = sum(x * x for x in self.rtts) / len(self.rtts) - avg * avg
            sd = math.sqrt(var) if var > 0 else 0.0
            label = "std-dev" if self.kame6 else "stddev"
            out.write(f"round-trip min/avg/max/{label} = {min(self.rtts):.3f}/{avg:.3f}/{max(self.rtts):.3f}/"
                      f"{sd:.3f} ms\n")
        out.flush()
        if self.received:
            return 0
        if self.fam == 6 and transmitted and self.send_failures >= transmitted:
            return EX_OSERR
        return 2
