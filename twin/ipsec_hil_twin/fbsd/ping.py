"""ping(8) / ping6 of FreeBSD 14, driving the REAL Linux ping (iputils) in the namespace;
a stream runs FreeBSD's own loop on a raw socket instead (ipsec_hil_twin.fbsd.pingloop, own_loop).

Why real: the emulated appliance's own packets must meet the real kernel state of the
namespace (routes, MTUs, the path MTU the engine's Packet Too Big taught the kernel).
Don't-fragment is set only when asked (`-D`: IP_HDRINCL with DF for IPv4, IPV6_DONTFRAG
for IPv6; fault `own_too_big_fragmented` ignores it); without it the source fragments,
as FreeBSD's does (ping6 even fragments at 1,280 by default, IPV6_USE_MIN_MTU).  A -D
packet larger than the own route's MTU gets EMSGSIZE.  ping6 sends through a raw socket
whose send buffer is 8,192 bytes unless `-b` is given (see `sockbuf_check`).  The header
and statistics name the host as FreeBSD does: the resolved canonical name, or the
target as typed.  iputils' output is
rewritten line by line into FreeBSD 14's format (IPv6: the KAME-style `PING6(...)`,
`hlim=`, `ping6 statistics`, `std-dev`; an appliance on FreeBSD 15 prints `PING(...)`,
`ping statistics`, `stddev`: ipsec_hil_twin.fbsd.osrel); statistics are recomputed from the
replies. `-p PATTERN` prints fill()'s `PATTERN: 0x..` line and fills the payload as ping.c.
Exit codes: 0 any reply; 2 none; IPv6 71 when every send failed.
"""
from __future__ import annotations

import ipaddress
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd import nd6, osrel, pingloop
from ipsec_hil_twin.fbsd.pingout import Printer

LINUX_PING = next((p for p in ("/usr/bin/ping", "/bin/ping") if os.path.exists(p)), "/bin/ping")
"""The real iputils ping, by absolute path: PATH starts with DIR/bin, where `ping` is us."""

EX_USAGE = 64
EX_NOHOST = 68
RIPV6SNDQ = 8192
"""sys/netinet6/in6_proto.c: rip6_sendspace, the raw IPv6 socket's default send buffer."""

REPLY_RE = re.compile(
    r"^(?P<bytes>\d+) bytes from (?P<src>.+?): icmp_seq=(?P<seq>\d+) ttl=(?P<ttl>\d+)"
    r"(?: time=(?P<time>[\d.]+) ms)?(?P<rest>.*)$")
FROM_RE = re.compile(r"^From (?P<src>\S+) icmp_seq=(?P<seq>\d+) (?P<what>.*)$")
TX_RE = re.compile(r"^(?P<tx>\d+) packets transmitted")


class Opts:
    def __init__(self) -> None:
        self.count: int | None = None
        self.size: int | None = None
        self.src: str | None = None
        self.timeout: float | None = None
        self.wait_ms: int | None = None
        self.interval: float = 1.0
        self.ttl: int | None = None
        self.quiet = False
        self.verbose = False
        self.family: int | None = None
        self.target: str | None = None
        self.dont_fragment = False
        self.sockbuf: int | None = None
        self.pattern: str | None = None  # -p, as typed (checked and read by fill_pattern)
        self.kame6 = True  # FreeBSD 14's ping6 texts (PING6(, ping6 statistics); 15: osrel


def usage(prog: str) -> int:
    sys.stderr.write(
        f"usage: {prog} [-4AaDdfHnoQqRrv] [-C pcp] [-c count] [-G sweepmaxsize]\n"
        "\t    [-g sweepminsize] [-h sweepincrsize] [-i wait] [-l preload]\n"
        "\t    [-M mask | time] [-m ttl] [-P policy] [-p pattern] [-S src_addr]\n"
        "\t    [-s packetsize] [-t timeout] [-W waittime] [-z tos] IPv4-host\n"
        f"       {prog} [-6AaDdEfHNnOoquvYyZ] [-b bufsiz] [-c count] [-e gateway]\n"
        "\t    [-I interface] [-i wait] [-k addrtype] [-l preload] [-m hoplimit]\n"
        "\t    [-P policy] [-p pattern] [-S sourceaddr] [-s packetsize] [-t timeout]\n"
        "\t    [-W waittime] [-z tclass] [IPv6-hops ...] IPv6-host\n")
    return EX_USAGE


WITH_ARG = set("cisStWmIbCeGghlMPpz")


def parse(prog: str, argv: list[str]) -> Opts | int:
    o = Opts()
    if prog == "ping6":
        o.family = 6
    args = list(argv)
    rest: list[str] = []
    while args:
        a = args.pop(0)
        if a == "--":
            rest += args
            break
        if not a.startswith("-") or a == "-":
            rest.append(a)
            continue
        j = 1
        while j < len(a):
            ch = a[j]
            if ch in WITH_ARG:
                val = a[j + 1:] or (args.pop(0) if args else None)
                if val is None:
                    sys.stderr.write(f"{prog}: option requires an argument -- {ch}\n")
                    return usage(prog)
                try:
                    if ch == "c":
                        o.count = int(val)
                        if o.count <= 0:
                            sys.stderr.write(f"{prog}: invalid count of packets to transmit: `{val}'\n")
                            return EX_USAGE
                    elif ch == "s":
                        o.size = int(val)
                    elif ch == "S":
                        o.src = val
                    elif ch == "t":
                        o.timeout = float(val)
                    elif ch == "W":
                        o.wait_ms = int(val)
                    elif ch == "i":
                        o.interval = float(val)
                    elif ch == "m":
                        o.ttl = int(val)
                    elif ch == "b":
                        o.sockbuf = int(val)
                    elif ch == "p":
                        o.pattern = val
                except ValueError:
                    sys.stderr.write(f"{prog}: invalid argument `{val}' for -{ch}\n")
                    return EX_USAGE
                break
            if ch == "q":
                o.quiet = True
            elif ch == "v":
                o.verbose = True
            elif ch == "6":
                o.family = 6
            elif ch == "4":
                o.family = 4
            elif ch == "D":
                o.dont_fragment = True
            elif ch in "nAaHdfoQRruNOEYyZ":
                pass
            else:
                sys.stderr.write(f"{prog}: illegal option -- {ch}\n")
                return usage(prog)
            j += 1
    if len(rest) != 1:
        return usage(prog)
    o.target = rest[0]
    return o


def fill_pattern(text: str) -> bytes | None:
    """ping.c / ping6.c fill(): every character must be a hex digit (else None: errx), then
    sscanf's sixteen ``%2x`` read up to 16 bytes, two digits each, an odd last digit alone
    (`abc` -> ab 0c); digits past the 32nd are ignored."""
    if any(ch not in "0123456789abcdefABCDEF" for ch in text):
        return None
    return bytes(int(text[i:i + 2], 16) for i in range(0, min(len(text), 32), 2))


def iputils_pattern(pattern: bytes) -> str:
    """The -p to give iputils so the payload from byte 16 on is FreeBSD's: iputils fills
    from data byte 0 (its 16-byte timeval then covers bytes 0-15), FreeBSD from byte 8
    (after its 8-byte tv32); rotating the pattern by 8 puts both in the same phase. Bytes
    8-15 stay iputils' timestamp."""
    shift = (-8) % len(pattern)
    return (pattern[shift:] + pattern[:shift]).hex()


def resolve(prog: str, o: Opts) -> tuple[int, str, str] | int:
    """(family, address, host name) of the target.

    The name is what FreeBSD prints in the header and the statistics: getaddrinfo's
    canonical name (AI_CANONNAME) when the target is a name, else the target as typed
    (sbin/ping/ping.c and ping6.c: `hostname = res->ai_canonname` or `target`).
    """
    assert o.target is not None
    try:
        ip = ipaddress.ip_address(o.target.split("%")[0])
        fam = ip.version
        if o.family == 6 and fam == 4:
            sys.stderr.write(f"{prog}: IPv6 requested but IPv4 target address provided\n")
            return 1
        if o.family == 4 and fam == 6:
            sys.stderr.write(f"{prog}: IPv4 requested but IPv6 target address provided\n")
            return 1
        return fam, str(ip), o.target
    except ValueError:
        pass
    af = socket.AF_INET6 if o.family == 6 else socket.AF_INET if o.family == 4 else socket.AF_UNSPEC
    try:
        info = socket.getaddrinfo(o.target, None, af, socket.SOCK_RAW, 0, socket.AI_CANONNAME)
    except socket.gaierror:
        sys.stderr.write(f"{prog}: cannot resolve {o.target}: Unknown host\n")
        return EX_NOHOST
    addr = info[0][4][0]
    return (6 if info[0][0] == socket.AF_INET6 else 4), addr, (info[0][3] or o.target)


def sockbuf_check(prog: str, size: int, o: Opts) -> bool:
    """ping6's send-buffer rule; True when every send will fail with EMSGSIZE.

    sbin/ping/ping6.c main: with `-b N` it warns when datalen > N and sets SO_SNDBUF to N;
    without it it warns when datalen > 8 * 1024 and keeps the raw socket's default
    (RIPV6SNDQ, 8,192).  The warning does not stop it: sosend() then refuses every
    echo request longer than the buffer (8 + datalen bytes) with EMSGSIZE.
    """
    limit = o.sockbuf if o.sockbuf else RIPV6SNDQ
    if size > (o.sockbuf if o.sockbuf else 8 * 1024):
        sys.stderr.write(f"{prog}: you need -b to increase socket buffer size\n")
        sys.stderr.flush()
    return 8 + size > limit


def source_for(fam: int, dst: str, src: str | None) -> str | None:
    if src:
        return src
    s = socket.socket(socket.AF_INET6 if fam == 6 else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((dst, 9))
        return s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()


def main_for(prog: str, argv: list[str]) -> int:
    o = parse(prog, argv)
    if isinstance(o, int):
        return o
    r = resolve(prog, o)
    if isinstance(r, int):
        return r
    fam, addr, hostname = r
    if fam == 6:
        prog = "ping6" if prog == "ping6" else "ping"
    size = o.size if o.size is not None else (8 if fam == 6 else 56)
    if fam == 4 and size > 65535 - 20 - 8:
        sys.stderr.write(f"{prog}: packet size too large: {size} > {65535 - 20 - 8}\n")
        return EX_USAGE
    if fam == 6 and size <= 0:
        sys.stderr.write(f"{prog}: illegal datalen value -- {size}\n")
        return 1
    if fam == 6 and size > 131072 - 40 - 8:
        sys.stderr.write(f"{prog}: datalen value too large, maximum is {131072 - 40 - 8}\n")
        return 1
    pattern = b""
    if o.pattern is not None:
        got = fill_pattern(o.pattern)
        if got is None:
            sys.stderr.write(f"{prog}: patterns must be specified as hex digits\n")
            return EX_USAGE if fam == 4 else 1  # ping.c errx(EX_USAGE), ping6.c errx(1)
        pattern = got
    too_big_for_buffer = fam == 6 and sockbuf_check(prog, size, o)
    hd = c.host_dir()
    o.kame6 = osrel.of_host(c.host_info(hd)).kame_ping6
    fragment = not o.dont_fragment or "own_too_big_fragmented" in c.active_faults(hd)
    cmd = linux_argv(fam, size, fragment, o, addr)
    if pattern:
        cmd[-1:-1] = ["-p", iputils_pattern(pattern)]
    out = sys.stdout
    if o.pattern is not None and not o.quiet:
        out.write(f"PATTERN: 0x{pattern.hex()}\n")  # fill() runs before the header is printed
    if fam == 4:
        frm = f" from {o.src}" if o.src else ""
        out.write(f"PING {hostname} ({addr}){frm}: {size} data bytes\n")
    else:
        src = source_for(6, addr, o.src) or "::"
        name = "PING6" if o.kame6 else "PING"
        out.write(f"{name}({40 + 8 + size}={40}+8+{size} bytes) {src} --> {addr}\n")
    out.flush()
    if too_big_for_buffer:
        return every_send_fails(prog, hostname, addr, size, o, "Message too long")
    if fam == 6:
        port = ifdisabled_egress(hd, addr)
        if port is not None:
            return every_send_fails(prog, hostname, addr, size, o, "Network is down")
    if own_loop(o):
        pr = Printer(prog, fam, hostname, addr, size, quiet=o.quiet, verbose=o.verbose, kame6=o.kame6)
        return pingloop.run(pr, fam, addr, size, count=o.count, interval=o.interval, timeout=o.timeout,
                            wait_ms=o.wait_ms, src=o.src, ttl=o.ttl, pattern=pattern)
    return run_ping(prog, fam, hostname, addr, size, o, cmd)


STREAM_COUNT = 20
"""From this many echoes a ping is a stream, whose rate the tests divide by (lost / rate)."""
IPUTILS_SLIPS_FROM = 0.01
"""iputils' MININTERVAL (10 ms): from this interval on it waits with SO_RCVTIMEO and slips."""


def is_stream(o: Opts) -> bool:
    """At least STREAM_COUNT echoes (or no count) at an interval from IPUTILS_SLIPS_FROM up
    to 1 s: where iputils either slips or busy-waits (ipsec_hil_twin.fbsd.pingloop says how much)."""
    return IPUTILS_SLIPS_FROM <= o.interval < 1.0 and (o.count is None or o.count >= STREAM_COUNT)


def own_loop(o: Opts) -> bool:
    """Does this ping run FreeBSD's loop itself (ipsec_hil_twin.fbsd.pingloop) instead of iputils?

    A stream does. Not with ``-D``: don't-fragment and its EMSGSIZE / fault
    ``own_too_big_fragmented`` stay on the path their tests pin (iputils ``-M do``)."""
    return is_stream(o) and not o.dont_fragment


def linux_argv(fam: int, size: int, fragment: bool, o: Opts, addr: str) -> list[str]:
    """The iputils command line for FreeBSD's ``ping`` options ``o``.

    Pacing: FreeBSD's ping sends each echo ``-i`` after the previous one (sbin/ping/ping.c:
    pselect until last + intvl). iputils 20221126 keeps that schedule below 10 ms, but from
    10 ms on it waits in a blocking recvmsg() with SO_RCVTIMEO and slips about a jiffy per
    echo: measured on loopback, 200 echoes at -i 0.01 took 3.26 s (16.3 ms each), at 0.02
    24 ms each, at 0.009 exactly 9 ms. A stream there (the health test's 500 echoes at
    0.01, the rekey tests' 900) then ran 1.6x as long as FreeBSD's, and a test's blocked
    time (lost / offered rate) under-counted by as much. With a preload of 2, iputils'
    token bucket lets it catch up (same loopback: 10.2 ms per echo at 0.01, 20.06 at
    0.02), but busy-waits between echoes; so streams run ipsec_hil_twin.fbsd.pingloop instead
    (own_loop), and only a -D stream still comes here with the preload. A few -D probes
    keep FreeBSD's one-at-a-time start.
    """
    cmd = [LINUX_PING, "-n", f"-{fam}", "-s", str(size), "-M", "dont" if fragment else "do",
           "-i", f"{o.interval:g}"]
    if o.count is not None:
        cmd += ["-c", str(o.count)]
    if is_stream(o):
        cmd += ["-l", "2"]
    if o.wait_ms is not None:
        cmd += ["-W", f"{max(o.wait_ms, 1) / 1000.0:g}"]
    # FreeBSD's -t is a hard stop after N s (summary printed as on SIGINT); iputils' -w
    # would instead keep sending past -c until enough replies came: run_ping times it.
    if o.src:
        cmd += ["-I", o.src]
    if o.ttl is not None:
        cmd += ["-t", str(o.ttl)]
    cmd.append(addr)
    return cmd


def ifdisabled_egress(hd, addr: str) -> str | None:
    """The port an IPv6 packet to `addr` would leave by, if that port is ifdisabled.

    Into the engine's TUN (esp0) the packet leaves by the association's port: the port
    holding the outbound SA's source address (the offload path hands the inner packet
    to it as a plain IPv6 frame; FreeBSD's nd6_resolve then answers ENETDOWN).
    """
    dev = nd6.egress_ifname(addr)
    if dev is None:
        return None
    if dev == "esp0":
        try:
            sas = c.engine(hd, {"op": "list_sas"}).get("sas") or []
        except c.EngineError:
            return None
        target = ipaddress.ip_address(addr)
        src = None
        for sa in sas:
            if sa.get("direction") != "out":
                continue
            for ts in sa.get("remote_ts") or []:
                try:
                    if target in ipaddress.ip_network(ts.split("[")[0], strict=False):
                        src = sa.get("src")
                except ValueError:
                    continue
        if src is None:
            return None
        dev = None
        for p in c.host_info(hd).get("ports") or []:
            addrs = [a.split("/")[0] for a in (p.get("addresses") or [p.get("ipv4"), p.get("ipv6")]) if a]
            if src in addrs:
                dev = p.get("ifname") or p.get("name")
        if dev is None:
            return None
    try:
        link = next((l for l in nd6.links() if l.get("ifname") == dev), None)
    except RuntimeError:
        return None
    if link is not None and nd6.ifdisabled(hd, link):
        return dev
    return None


def every_send_fails(prog: str, hostname: str, addr: str, size: int, o: Opts, reason: str) -> int:
    """Every ping6 send fails (ENETDOWN, EMSGSIZE), as FreeBSD's ping6 reports it; exit 71."""
    pr = Printer(prog, 6, hostname, addr, size, quiet=o.quiet, verbose=o.verbose, kame6=o.kame6)
    n = o.count or 1
    for i in range(n):
        if i:
            time.sleep(o.interval)
        pr.send_failed(reason)
    return pr.summary(n)


def run_ping(prog: str, fam: int, hostname: str, addr: str, size: int, o: Opts, cmd: list[str]) -> int:
    """Run iputils' ``cmd`` and print its run as FreeBSD's ping (ipsec_hil_twin.fbsd.pingout)."""
    pr = Printer(prog, fam, hostname, addr, size, quiet=o.quiet, verbose=o.verbose, kame6=o.kame6)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    connect_error: list[str] = []

    def handle_err(line: str) -> None:
        low = line.lower()
        if "message too long" in low:
            pr.send_failed("Message too long")
        elif "connect:" in low or "sendmsg:" in low or "sendto:" in low:
            if "unreachable" in low or "no route" in low:
                connect_error.append("No route to host")
            elif "network is down" in low:
                connect_error.append("Network is down")
            else:
                connect_error.append(line.split(":", 2)[-1].strip())
        elif low.startswith("ping: ") and ("warning" in low or "do you want" in low):
            pass
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            handle_err(line.rstrip("\n"))

    te = threading.Thread(target=read_err, daemon=True)
    te.start()
    timer = None
    if o.timeout is not None:
        timer = threading.Timer(o.timeout, lambda: proc.poll() is None and proc.send_signal(signal.SIGINT))
        timer.daemon = True
        timer.start()
    transmitted: int | None = None
    assert proc.stdout is not None
    header_seen = False
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            if not header_seen and line.startswith("PING "):
                header_seen = True
                t0 = time.monotonic()  # iputils prints its header right before the first send
                continue
            m = REPLY_RE.match(line)
            if m:
                seq = int(m.group("seq")) - 1
                tms = m.group("time")
                rtt = float(tms) if tms is not None else None
                if rtt is None and size >= 8:
                    # iputils needs 16 bytes for its timestamp; FreeBSD needs 8: time it here.
                    rtt = max(0.0, (time.monotonic() - (t0 + seq * o.interval)) * 1000)
                    rtt = float(f"{rtt:.3f}")
                pr.reply(int(m.group("bytes")), m.group("src"), seq, int(m.group("ttl")), rtt,
                         "DUP!" in m.group("rest"))
                continue
            m = FROM_RE.match(line)
            if m:
                mm = re.search(r"mtu = (\d+)", m.group("what"))
                pr.icmp_error(m.group("src"), m.group("what"), int(mm.group(1)) if mm else None)
                continue
            m = TX_RE.match(line)
            if m:
                transmitted = int(m.group("tx"))
    except KeyboardInterrupt:
        proc.terminate()
    proc.wait()
    if timer is not None:
        timer.cancel()
    te.join(2)
    if connect_error:
        # iputils gives up at connect(); FreeBSD keeps trying and reports each send.
        n = o.count or 1
        for _ in range(n):
            pr.send_failed(connect_error[0])
        transmitted = n
    if transmitted is None:
        transmitted = pr.received + pr.send_failures
    return pr.summary(transmitted)


def main(argv: list[str]) -> int:
    return main_for(os.environ.get("TWIN_PING_ARGV0") or "ping", argv)


if __name__ == "__main__":
    c.run_main(main)
