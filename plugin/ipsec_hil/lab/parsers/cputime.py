"""`sysctl kern.clockrate hw.ncpu kern.cp_time` -> CpuTimes: the appliance's CPU time so far.

Why this reading (issue 41): at the gigabit link's rate a slower driver still fills the
link and differs only in the CPU it burns per packet, which no rate figure can see. The
kernel keeps that time for every CPU in statclock ticks: ``kern.cp_time`` is the
CPUSTATES array summed over the CPUs (sys/kern/kern_clock.c sysctl_kern_cp_time; order
CP_USER, CP_NICE, CP_SYS, CP_INTR, CP_IDLE, sys/sys/resource.h), printed by sysctl(8) as
its longs separated by one space; ``kern.clockrate`` is struct clockinfo, printed by
sbin/sysctl/sysctl.c:S_clockinfo() as ``{ hz = %d, tick = %d, profhz = %d, stathz = %d }``:
its stathz turns ticks into seconds. ``hw.ncpu`` says how many CPUs the ticks are summed
over (an idle figure reads against ncpu x seconds).

One command, three names, so one snapshot of all three: two snapshots give the busy CPU
seconds between them (:meth:`CpuTimes.busy_seconds_since`). A statclock tick is 1/stathz
of one CPU (7.9 ms at FreeBSD amd64's usual 127 Hz): a figure over a trial is good to
about one tick per CPU-state field; the caller states trial lengths against that.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import sysctl
from ._base import ParseError, fail, numbered_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("sysctl", "kern.clockrate", "hw.ncpu", "kern.cp_time")
NAMES = ("kern.clockrate", "hw.ncpu", "kern.cp_time")
CP_STATES = ("user", "nice", "sys", "intr", "idle")
BUSY_STATES = CP_STATES[:4]
_CLOCKINFO = re.compile(r"\{ hz = (?P<hz>[0-9]+), tick = (?P<tick>[0-9]+), "
                        r"profhz = (?P<profhz>[0-9]+), stathz = (?P<stathz>[0-9]+) \}")


@dataclass(frozen=True)
class CpuTimes:
    """One snapshot: the clock that counts, how many CPUs, and the ticks per CPU state."""

    hz: int
    stathz: int
    ncpu: int
    user: int
    nice: int
    sys: int
    intr: int
    idle: int

    @property
    def busy(self) -> int:
        """Ticks some CPU spent not idle: user + nice + sys + intr."""
        return sum(getattr(self, s) for s in BUSY_STATES)

    def busy_seconds_since(self, earlier: CpuTimes) -> float:
        """CPU seconds (summed over the CPUs) spent busy between ``earlier`` and this snapshot."""
        return self.seconds_since(earlier, BUSY_STATES)

    def seconds_since(self, earlier: CpuTimes, states: tuple[str, ...]) -> float:
        """CPU seconds (summed over the CPUs) spent in ``states`` between ``earlier`` and
        this snapshot. A counter that went backwards (a reboot in between) or a changed
        clock or CPU count is a ValueError naming it: such a figure would be invented."""
        if (earlier.stathz, earlier.ncpu) != (self.stathz, self.ncpu):
            raise ValueError(f"kern.clockrate/hw.ncpu changed between the snapshots: stathz {earlier.stathz} -> "
                             f"{self.stathz}, ncpu {earlier.ncpu} -> {self.ncpu}")
        for state in CP_STATES:
            if getattr(self, state) < getattr(earlier, state):
                raise ValueError(f"kern.cp_time {state} went backwards ({getattr(earlier, state)} -> "
                                 f"{getattr(self, state)}): the appliance rebooted between the snapshots")
        unknown = [s for s in states if s not in CP_STATES]
        if unknown:
            raise ValueError(f"unknown CPU state(s) {unknown}: kern.cp_time has {', '.join(CP_STATES)}")
        return sum(getattr(self, s) - getattr(earlier, s) for s in states) / self.stathz


def parse(text: str) -> CpuTimes:
    """The three values of ``sysctl kern.clockrate hw.ncpu kern.cp_time`` (``name: value``
    lines, any order); ParseError naming the line otherwise."""
    try:
        values = sysctl.parse(text, mode="name", names=NAMES)
    except ParseError as exc:  # the same fault, named as this command's
        raise ParseError(COMMAND, exc.line_no, exc.line, exc.why) from None
    lines = dict((line.partition(": ")[0], (no, line)) for no, line in numbered_lines(text))
    extra = [n for n in values if n not in NAMES]
    if extra:
        fail(COMMAND, *lines[extra[0]], f"unexpected name {extra[0]!r}: expected only {', '.join(NAMES)}")
    clock = _CLOCKINFO.fullmatch(str(values["kern.clockrate"]))
    if clock is None:
        fail(COMMAND, *lines["kern.clockrate"], "expected '{ hz = N, tick = N, profhz = N, stathz = N }'")
    ncpu = values["hw.ncpu"]
    if not isinstance(ncpu, int) or ncpu < 1:
        fail(COMMAND, *lines["hw.ncpu"], "expected a CPU count >= 1")
    ticks = values["kern.cp_time"]
    if not (isinstance(ticks, tuple) and len(ticks) == len(CP_STATES) and all(t >= 0 for t in ticks)):
        fail(COMMAND, *lines["kern.cp_time"],
             f"expected {len(CP_STATES)} tick counts >= 0 ({' '.join(CP_STATES)})")
    if int(clock["stathz"]) < 1:
        fail(COMMAND, *lines["kern.clockrate"], "stathz 0: ticks cannot be turned into seconds")
    return CpuTimes(int(clock["hz"]), int(clock["stathz"]), ncpu, *ticks)
