"""`ping` / `ping6` output -> PingResult: FreeBSD 14 (and main), and Linux iputils.

Formats (sbin/ping of FreeBSD 14; iputils 20221126 measured on Debian 12):
- FreeBSD IPv4 `PING a (b): 56 data bytes`, replies `64 bytes from b: icmp_seq=0 ttl=64
  time=0.045 ms`, `round-trip min/avg/max/stddev`.
- FreeBSD 14 IPv6 `PING6(56=40+8+8 bytes) a --> b`, `hlim=`, `ping6 statistics`, `std-dev`;
  main's merged `PING(...)`/`stddev`.
- Linux `PING a (b) 56(84) bytes of data.` / `PING a(b) 56 data bytes`, `rtt min/avg/max/mdev`,
  stderr `ping: local error: message too long, mtu=1400` (IPv4) / `mtu: 1400` (IPv6).
Send errors: `ping: sendto|sendmsg: Message too long` (stderr, counted in emsgsize_count),
`ping6: wrote HOST N chars, ret=-1` (stdout), `Packet too big mtu = N` (-v) -> too_big_mtu.
The exit status is kept as given (FreeBSD 0/2/71, Linux 0/1/2). Statistics that are absent
are None, never 0; a loss percentage that contradicts transmitted/received is an error.

Names (sbin/ping/ping.c, ping6.c): the statistics title carries the host NAME ping resolved
(`PING web.geo.FreeBSD.org (147.28.184.45): ...` then `--- web.geo.FreeBSD.org ping
statistics ---`, from the FreeBSD Handbook). IPv4/Linux: the title must name the header's host
(or its address). FreeBSD IPv6 prints only addresses in its header and titles with the name
getaddrinfo gave (AI_CANONNAME) or the target as typed: any name is taken, an address must be
the target. The name is kept in `host`.
`-p PATTERN` makes fill() print `PATTERN: 0x<hex>` before the header (kept in `pattern`).
More replies than requests end the loss figure with `-- somebody's printing up packets!`
(ping.c) or `-- somebody's duplicating packets!` (ping6.c, and main's shared pr_summary).
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Optional

from ._base import fail, numbered_lines
from ._lines import LineTable, content_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("ping")  # its flags per program: ipsec_hil.lab.ping_argv
#: iputils' ping says its version (exit 0): preflight's bench tools
VERSION = Command("ping", "-V")

_F = r"[0-9]+(?:\.[0-9]+)?"
_STDOUT = LineTable(COMMAND, {
    # the header, after -p's fill pattern
    "pattern": r"PATTERN: 0x(?P<hex>(?:[0-9a-f]{2}){0,16})",
    "hdr_v6": r"PING6?\((?P<total>[0-9]+)=40\+8\+(?P<data>[0-9]+) bytes\) (?P<src>\S+) --> (?P<addr>\S+)",
    "hdr_v4": r"PING (?P<host>\S+) \((?P<addr>[^)\s]+)\)(?: from (?P<src>\S+))?: (?P<data>[0-9]+) data bytes",
    "hdr_linux": r"PING (?P<host>\S+?) ?\((?P<addr>[^)\s]+)\)(?: from (?P<src>[^\s:]+|\S+(?= ))(?: (?P<dev>[^\s:]+))? ?:)? "
                 r"(?:(?P<data>[0-9]+)\((?P<ip>[0-9]+)\) bytes of data\.|(?P<data6>[0-9]+) data bytes)",
    # the body, up to the statistics title
    "reply": r"(?P<bytes>[0-9]+) bytes from (?P<addr>[^\s,]+?):?,? icmp_seq=(?P<seq>[0-9]+) "
             r"(?:ttl|hlim)=(?P<ttl>[0-9]+)(?: time=(?P<time>[0-9]+(?:\.[0-9]+)?) ms)?(?P<dup> ?\(DUP!\))?",
    "wrote": r"ping6?: wrote (?P<host>\S+) (?P<len>[0-9]+) chars, ret=(?P<ret>-?[0-9]+)",
    "new_pmtu": r"new path MTU \((?P<mtu>[0-9]+)\) is notified",
    # ICMP error texts start upper-case ("Destination Host Unreachable", "Packet too big mtu = N")
    # or are "frag needed and DF set (MTU N)"; a garbled echo reply must not pass as one
    "icmp_err_linux": r"From (?P<addr>\S+)(?: \([^)]*\))? icmp_seq=[0-9]+ (?P<msg>.+)",
    "icmp_err_bsd": r"(?P<bytes>[0-9]+) bytes from (?P<addr>[0-9A-Fa-f:.%a-z]+?):? (?P<msg>(?:[A-Z]|frag ).*)",
    "title": r"--- (?P<name>\S+) ping6? statistics ---",
    # -v's dump of the packet an ICMP error quotes
    "dump": r"Vr .*|\s*[0-9a-f]{1,2}\s+[0-9a-f].*|\S+->\S+|ICMP6?: .*",
    # the statistics, by flavour, and the round-trip line
    "freebsd": r"(?P<tx>[0-9]+) packets transmitted, (?P<rx>[0-9]+) packets received, "
               r"(?:\+(?P<dup>[0-9]+) duplicates, )?"
               r"(?:(?P<loss>[0-9]+\.[0-9]+)% packet loss|-- somebody's (?:printing up|duplicating) packets!)"
               r"(?:, (?P<late>[0-9]+) packets out of wait time)?",
    "linux": r"(?P<tx>[0-9]+) packets transmitted, (?P<rx>[0-9]+) received(?:, \+(?P<dup>[0-9]+) duplicates)?"
             r"(?:, \+(?P<corrupt>[0-9]+) corrupted)?(?:, \+(?P<errors>[0-9]+) errors)?"
             r"(?:, (?P<loss>[0-9]+(?:\.[0-9]+)?)% packet loss)?(?:, time (?P<time>[0-9]+)ms)?",
    "rtt": rf"(?:round-trip|rtt) min/avg/max/(?:stddev|std-dev|mdev) = (?P<min>{_F})/(?P<avg>{_F})/(?P<max>{_F})"
           rf"/(?P<sd>{_F}) ms(?:, .+)?",
})
_HEADER_LINES = ("pattern", "hdr_v6", "hdr_v4", "hdr_linux")
_BODY_LINES = ("reply", "wrote", "new_pmtu", "icmp_err_linux", "icmp_err_bsd", "title")
_MTU_IN = re.compile(r"(?:MTU |mtu ?[=:] ?)(?P<mtu>[0-9]+)\)?")  # searched in an ICMP error's text
_STDERR = LineTable(COMMAND, {
    "emsgsize": r"ping6?: (?:sendto|sendmsg): Message too long",
    "send_failed": r"ping6?: (?:sendto|sendmsg): .+",
    "local_error": r"ping6?: local error: message too long, mtu[=:] ?(?P<mtu>[0-9]+)",
    "other": r"ping6?: .+",
})

@dataclass(frozen=True)
class PingResult:
    family: str  # ipv4 | ipv6
    flavour: str  # freebsd | linux
    target: str
    data_bytes: int
    status: int
    transmitted: Optional[int] = None  # None: no statistics printed
    received: Optional[int] = None
    duplicates: int = 0
    loss_pct: Optional[float] = None
    rtt_min: Optional[float] = None  # ms; None when not printed (nothing received / datalen < 8)
    rtt_avg: Optional[float] = None
    rtt_max: Optional[float] = None
    rtt_stddev: Optional[float] = None
    replies: int = 0  # reply lines seen (duplicates included)
    errors: tuple[str, ...] = ()  # distinct error texts (stderr and ICMP errors), first-seen order
    too_big_mtu: tuple[int, ...] = ()  # MTUs from ICMP too-big / frag-needed / PMTU notices
    local_error_mtu: tuple[int, ...] = ()  # Linux `local error: message too long, mtu=N`
    emsgsize_count: int = 0  # sends that failed with EMSGSIZE
    # sends the kernel refused, any errno (`ping: sendto: No route to host`, EMSGSIZE too): an
    # echo the kernel refused still counts as transmitted (ping.c), so transmitted - received
    # holds these (the hard-expiry test's accounting, tests_hil/test_rekey.py)
    send_failures: int = 0
    failed_writes: int = 0  # `ping6: wrote ... ret=-1` lines
    host: Optional[str] = None  # the name ping printed for the target (header or statistics title)
    pattern: Optional[str] = None  # `-p`: the fill pattern as hex (`PATTERN: 0x...`)


def _family(addr: str) -> str:
    return "ipv6" if ":" in addr else "ipv4"


def _unscoped(addr: str) -> str:
    return addr.split("%", 1)[0]


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(_unscoped(name))
    except ValueError:
        return False
    return True


def _title_host(r: dict, name: str, no: int, line: str) -> str:
    """The host name the statistics title gives, checked against the header."""
    target = r["target"]
    if r.get("host") is not None:  # IPv4 / Linux: the header named the host
        if name not in (r["host"], target) and not target.startswith(name):
            fail(COMMAND, no, line, f"statistics for {name}, header said {r['host']} ({target})")
        return r["host"]
    # FreeBSD IPv6: the header shows addresses only; the title shows the resolved name
    if _is_address(name) and _unscoped(name) != _unscoped(target):
        fail(COMMAND, no, line, f"statistics for {name}, header said {target}")
    return name


def parse(stdout: str, stderr: str = "", status: int = 0) -> PingResult:
    r: dict = dict(status=status, duplicates=0, replies=0, emsgsize_count=0, failed_writes=0, send_failures=0)
    errors: list[str] = []
    too_big: list[int] = []
    local_mtu: list[int] = []

    def error(text: str) -> None:
        if text not in errors:
            errors.append(text)

    for no, line in content_lines(stderr):
        kind, m = _STDERR.read(no, line, "stderr: unexpected line")
        if kind in ("emsgsize", "send_failed"):
            r["send_failures"] += 1
        if kind in ("emsgsize", "local_error"):
            r["emsgsize_count"] += 1
        if kind == "local_error":
            local_mtu.append(int(m["mtu"]))
        error(line.split(": ", 1)[1])

    state = "header"
    for no, line in numbered_lines(stdout):
        if state == "header":
            if not line.strip():
                continue
            kind, m = _STDOUT.read(no, line, "expected the PING header line", *_HEADER_LINES)
            if kind == "pattern":
                if "pattern" in r:
                    fail(COMMAND, no, line, "a second PATTERN line")
                r["pattern"] = m["hex"]
                continue
            if kind == "hdr_v6":
                if int(m["total"]) != 48 + int(m["data"]):
                    fail(COMMAND, no, line, "PING6 header arithmetic does not add up")
                r.update(flavour="freebsd", family="ipv6", target=m["addr"], data_bytes=int(m["data"]))
            elif kind == "hdr_v4":
                r.update(flavour="freebsd", family="ipv4", target=m["addr"], host=m["host"],
                         data_bytes=int(m["data"]))
            else:
                data = int(m["data"] or m["data6"])
                if m["ip"] is not None and int(m["ip"]) != data + 28:
                    fail(COMMAND, no, line, "header arithmetic does not add up")
                r.update(flavour="linux", family=_family(m["addr"]), target=m["addr"], host=m["host"],
                         data_bytes=data)
            state = "body"
            continue
        if state == "dump":
            if _STDOUT.match(line, "dump"):
                continue
            state = "body"
        if state == "body":
            if not line.strip():
                continue
            kind, m = _STDOUT.read(no, line, "unexpected line", *_BODY_LINES)
            if kind == "reply":
                r["replies"] += 1
                r["duplicates_seen"] = r.get("duplicates_seen", 0) + bool(m["dup"])
            elif kind == "wrote":
                r["failed_writes"] += 1
            elif kind == "new_pmtu":
                too_big.append(int(m["mtu"]))
            elif kind == "title":
                r["host"] = _title_host(r, m["name"], no, line)
                state = "stats"
            else:  # an ICMP error, which -v follows with a dump of the packet it quotes
                msg = m["msg"]
                error(msg)
                if "too big" in msg.lower() or "frag needed" in msg.lower():
                    mm = _MTU_IN.search(msg)
                    if not mm:
                        fail(COMMAND, no, line, "too-big error without an MTU")
                    too_big.append(int(mm["mtu"]))
                state = "dump"
            continue
        if state == "stats":
            m = _STDOUT.expect(r["flavour"], no, line, "expected the 'N packets transmitted, ...' line")
            tx, rx = int(m["tx"]), int(m["rx"])
            r.update(transmitted=tx, received=rx, duplicates=int(m["dup"] or 0))
            if m["loss"] is not None:
                loss = float(m["loss"])
                if tx and abs(loss - (tx - rx) * 100.0 / tx) > 0.1:
                    fail(COMMAND, no, line, "packet loss does not match transmitted/received")
                r["loss_pct"] = loss
            elif tx:
                if r["flavour"] == "linux" or rx <= tx:
                    fail(COMMAND, no, line, "packet loss figure missing")
            state = "rtt"
            continue
        if state == "rtt":
            if not line.strip():
                state = "end"
                continue
            m = _STDOUT.expect("rtt", no, line, "expected the round-trip line")
            mn, avg, mx, sd = (float(m[k]) for k in ("min", "avg", "max", "sd"))
            if not mn <= avg <= mx:
                fail(COMMAND, no, line, "round-trip min/avg/max out of order")
            r.update(rtt_min=mn, rtt_avg=avg, rtt_max=mx, rtt_stddev=sd)
            state = "end"
            continue
        if state == "end":
            if line.strip():
                fail(COMMAND, no, line, "unexpected line after the statistics")
    if state == "header":
        if not errors:
            fail(COMMAND, 0, stdout, "no PING header and no error message")
        return PingResult(family="unknown", flavour="unknown", target="", data_bytes=0, status=status,
                          errors=tuple(errors), pattern=r.get("pattern"))
    if state in ("body", "dump") and not errors:
        fail(COMMAND, 0, stdout.splitlines()[-1], "output ended before the statistics")
    if r.get("received") is not None and r["received"] == 0 and r.get("rtt_min") is not None:
        fail(COMMAND, 0, stdout.splitlines()[-1], "round-trip times with nothing received")
    dups_seen = r.pop("duplicates_seen", 0)
    if r.get("received") is not None and r["replies"] and r["replies"] - dups_seen != r["received"]:
        fail(COMMAND, 0, stdout.splitlines()[-1],
             f"{r['replies'] - dups_seen} reply lines but {r['received']} packets received")
    return PingResult(errors=tuple(errors), too_big_mtu=tuple(too_big), local_error_mtu=tuple(local_mtu), **r)
