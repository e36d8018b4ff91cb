"""The whole machine's CPU seconds so far, from /proc/stat: the one reader of it.

Why one: the engine benchmark (ipsec_hil_twin.bench: how busy the cores were during a stream) and
tools/cpu-profile (the busy total a profile's records are set against) both need it. Busy
is every field of the first line but idle and iowait, over the first eight: guest and
guest_nice (fields 9-10) are already counted in user and nice (proc(5)), so summing them
again would count a guest's time twice. Standard library only: tools/cpu-profile runs
with any python3.
"""
from __future__ import annotations

import os
from pathlib import Path

STAT = Path("/proc/stat")


def parse_cpu_line(line: str, ticks_per_s: int) -> tuple[float, float]:
    """(busy, total) seconds from the ``cpu`` line of /proc/stat."""
    fields = [int(x) for x in line.split()[1:9]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / ticks_per_s, sum(fields) / ticks_per_s


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of every core since boot."""
    return parse_cpu_line(STAT.read_text().split("\n", 1)[0], os.sysconf("SC_CLK_TCK"))
