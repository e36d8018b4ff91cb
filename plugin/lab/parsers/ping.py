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
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ._base import fail, numbered_lines

COMMAND = "ping"

_HDR_V4 = re.compile(r"PING (?P<host>\S+) \((?P<addr>[^)\s]+)\)(?: from (?P<src>\S+))?: (?P<data>[0-9]+) data bytes")
_HDR_V6 = re.compile(r"PING6?\((?P<total>[0-9]+)=40\+8\+(?P<data>[0-9]+) bytes\) (?P<src>\S+) --> (?P<addr>\S+)")
_HDR_LINUX = re.compile(
    r"PING (?P<host>\S+?) ?\((?P<addr>[^)\s]+)\)(?: from (?P<src>[^\s:]+|\S+(?= ))(?: (?P<dev>[^\s:]+))? ?:)? "
    r"(?:(?P<data>[0-9]+)\((?P<ip>[0-9]+)\) bytes of data\.|(?P<data6>[0-9]+) data bytes)"
)
_REPLY = re.compile(
    r"(?P<bytes>[0-9]+) bytes from (?P<addr>[^\s,]+?):?,? icmp_seq=(?P<seq>[0-9]+) "
    r"(?:ttl|hlim)=(?P<ttl>[0-9]+)(?: time=(?P<time>[0-9]+(?:\.[0-9]+)?) ms)?(?P<dup> ?\(DUP!\))?"
)
_STATS_TITLE = re.compile(r"--- (?P<addr>\S+) ping6? statistics ---")
_STATS_BSD = re.compile(
    r"(?P<tx>[0-9]+) packets transmitted, (?P<rx>[0-9]+) packets received, "
    r"(?:\+(?P<dup>[0-9]+) duplicates, )?(?:(?P<loss>[0-9]+\.[0-9]+)% packet loss|-- somebody's printing up packets!)"
    r"(?:, (?P<late>[0-9]+) packets out of wait time)?"
)
_STATS_LINUX = re.compile(
    r"(?P<tx>[0-9]+) packets transmitted, (?P<rx>[0-9]+) received(?:, \+(?P<dup>[0-9]+) duplicates)?"
    r"(?:, \+(?P<corrupt>[0-9]+) corrupted)?(?:, \+(?P<errors>[0-9]+) errors)?"
    r"(?:, (?P<loss>[0-9]+(?:\.[0-9]+)?)% packet loss)?(?:, time (?P<time>[0-9]+)ms)?"
)
_F = r"[0-9]+(?:\.[0-9]+)?"
_RTT = re.compile(
    rf"(?:round-trip|rtt) min/avg/max/(?:stddev|std-dev|mdev) = (?P<min>{_F})/(?P<avg>{_F})/(?P<max>{_F})/(?P<sd>{_F}) ms"
    r"(?:, .+)?"
)
_WROTE = re.compile(r"ping6?: wrote (?P<host>\S+) (?P<len>[0-9]+) chars, ret=(?P<ret>-?[0-9]+)")
# ICMP error texts start upper-case ("Destination Host Unreachable", "Packet too big mtu = N")
# or are "frag needed and DF set (MTU N)"; a garbled echo reply must not pass as one
_ICMP_ERR_BSD = re.compile(r"(?P<bytes>[0-9]+) bytes from (?P<addr>[0-9A-Fa-f:.%a-z]+?):? (?P<msg>(?:[A-Z]|frag ).*)")
_ICMP_ERR_LINUX = re.compile(r"From (?P<addr>\S+)(?: \([^)]*\))? icmp_seq=[0-9]+ (?P<msg>.+)")
_MTU_IN = re.compile(r"(?:MTU |mtu ?[=:] ?)(?P<mtu>[0-9]+)\)?")
_NEW_PMTU = re.compile(r"new path MTU \((?P<mtu>[0-9]+)\) is notified")
_DUMP = re.compile(r"Vr .*|\s*[0-9a-f]{1,2}\s+[0-9a-f].*|\S+->\S+|ICMP6?: .*")
_EMSGSIZE = re.compile(r"ping6?: (?:sendto|sendmsg): Message too long")
_LOCAL_ERR = re.compile(r"ping6?: local error: message too long, mtu[=:] ?(?P<mtu>[0-9]+)")
_STDERR = re.compile(r"ping6?: .+")


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
    failed_writes: int = 0  # `ping6: wrote ... ret=-1` lines


def _family(addr: str) -> str:
    return "ipv6" if ":" in addr else "ipv4"


def parse(stdout: str, stderr: str = "", status: int = 0) -> PingResult:
    r: dict = dict(status=status, duplicates=0, replies=0, emsgsize_count=0, failed_writes=0)
    errors: list[str] = []
    too_big: list[int] = []
    local_mtu: list[int] = []

    def error(text: str) -> None:
        if text not in errors:
            errors.append(text)

    for no, line in numbered_lines(stderr):
        if not line.strip():
            continue
        if _EMSGSIZE.fullmatch(line):
            r["emsgsize_count"] += 1
        elif m := _LOCAL_ERR.fullmatch(line):
            r["emsgsize_count"] += 1
            local_mtu.append(int(m["mtu"]))
        elif not _STDERR.fullmatch(line):
            fail(COMMAND, no, line, "stderr: unexpected line")
        error(line.split(": ", 1)[1])

    state = "header"
    for no, line in numbered_lines(stdout):
        if state == "header":
            if not line.strip():
                continue
            if m := _HDR_V6.fullmatch(line):
                if int(m["total"]) != 48 + int(m["data"]):
                    fail(COMMAND, no, line, "PING6 header arithmetic does not add up")
                r.update(flavour="freebsd", family="ipv6", target=m["addr"], data_bytes=int(m["data"]))
            elif m := _HDR_V4.fullmatch(line):
                r.update(flavour="freebsd", family="ipv4", target=m["addr"], data_bytes=int(m["data"]))
            elif m := _HDR_LINUX.fullmatch(line):
                data = int(m["data"] or m["data6"])
                if m["ip"] is not None and int(m["ip"]) != data + 28:
                    fail(COMMAND, no, line, "header arithmetic does not add up")
                r.update(flavour="linux", family=_family(m["addr"]), target=m["addr"], data_bytes=data)
            else:
                fail(COMMAND, no, line, "expected the PING header line")
            state = "body"
            continue
        if state == "dump":
            if _DUMP.fullmatch(line):
                continue
            state = "body"
        if state == "body":
            if not line.strip():
                continue
            if m := _REPLY.fullmatch(line):
                r["replies"] += 1
                r["duplicates_seen"] = r.get("duplicates_seen", 0) + bool(m["dup"])
                continue
            if m := _WROTE.fullmatch(line):
                r["failed_writes"] += 1
                continue
            if m := _NEW_PMTU.fullmatch(line):
                too_big.append(int(m["mtu"]))
                continue
            if m := (_ICMP_ERR_LINUX.fullmatch(line) or _ICMP_ERR_BSD.fullmatch(line)):
                msg = m["msg"]
                error(msg)
                if "too big" in msg.lower() or "frag needed" in msg.lower():
                    mm = _MTU_IN.search(msg)
                    if not mm:
                        fail(COMMAND, no, line, "too-big error without an MTU")
                    too_big.append(int(mm["mtu"]))
                state = "dump"
                continue
            if m := _STATS_TITLE.fullmatch(line):
                if m["addr"] != r["target"] and not r["target"].startswith(m["addr"]):
                    fail(COMMAND, no, line, f"statistics for {m['addr']}, header said {r['target']}")
                state = "stats"
                continue
            fail(COMMAND, no, line, "unexpected line")
        if state == "stats":
            m = (_STATS_BSD if r["flavour"] == "freebsd" else _STATS_LINUX).fullmatch(line)
            if not m:
                fail(COMMAND, no, line, "expected the 'N packets transmitted, ...' line")
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
            m = _RTT.fullmatch(line)
            if not m:
                fail(COMMAND, no, line, "expected the round-trip line")
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
                          errors=tuple(errors))
    if state in ("body", "dump") and not errors:
        fail(COMMAND, 0, stdout.splitlines()[-1], "output ended before the statistics")
    if r.get("received") is not None and r["received"] == 0 and r.get("rtt_min") is not None:
        fail(COMMAND, 0, stdout.splitlines()[-1], "round-trip times with nothing received")
    dups_seen = r.pop("duplicates_seen", 0)
    if r.get("received") is not None and r["replies"] and r["replies"] - dups_seen != r["received"]:
        fail(COMMAND, 0, stdout.splitlines()[-1],
             f"{r['replies'] - dups_seen} reply lines but {r['received']} packets received")
    return PingResult(errors=tuple(errors), too_big_mtu=tuple(too_big), local_error_mtu=tuple(local_mtu), **r)
