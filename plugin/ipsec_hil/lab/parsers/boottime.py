"""`sysctl -n kern.boottime` -> Boottime: when the kernel booted, to see reboots nobody asked for.

Source: sbin/sysctl/sysctl.c:S_timeval(), which prints `{ sec = %jd, usec = %ld } ` and
then ctime(3) of the seconds without its newline, e.g.
`{ sec = 1700000000, usec = 123 } Tue Nov 14 22:13:20 2023`. The date is local time on
the appliance and kept only as text; comparisons use (sec, usec).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ._base import fail
from ._lines import content_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("sysctl", "-n", "kern.boottime")
_LINE = re.compile(r"\{ sec = (?P<sec>[0-9]+), usec = (?P<usec>[0-9]+) \} (?P<date>.*)")
_CTIME = re.compile(r"(Sun|Mon|Tue|Wed|Thu|Fri|Sat) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                    r"[ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}")


@dataclass(frozen=True)
class Boottime:
    sec: int
    usec: int
    date: str  # ctime(3) text, appliance local time

    @property
    def instant(self) -> tuple[int, int]:
        """(sec, usec): two snapshots of the same boot have equal instants."""
        return self.sec, self.usec


def parse(text: str) -> Boottime:
    rows = list(content_lines(text))
    if not rows:
        fail(COMMAND, 0, text, "empty output (kern.boottime always has a value)")
    if len(rows) > 1:
        fail(COMMAND, *rows[1], "more than one line: expected only kern.boottime's value")
    no, line = rows[0]
    m = _LINE.fullmatch(line.strip())
    if m is None:
        fail(COMMAND, no, line, "expected '{ sec = N, usec = N } <ctime date>'")
    if int(m["usec"]) >= 1_000_000:
        fail(COMMAND, no, line, f"usec {m['usec']} is not below 1000000")
    if not _CTIME.fullmatch(m["date"]):
        fail(COMMAND, no, line, f"date {m['date']!r} is not in ctime(3) form 'Www Mmm dd hh:mm:ss yyyy'")
    return Boottime(sec=int(m["sec"]), usec=int(m["usec"]), date=m["date"])
