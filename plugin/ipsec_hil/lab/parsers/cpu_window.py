"""`sysctl kern.clockrate hw.ncpu kern.cp_time ENCRYPTED... DECRYPTED...` -> CpuWindowRead:
one end of the CPU figure's window (issue 54), one command.

Why one command: the CPU figure divides the kernel's CPU time by the data frames the
engine carried, and both ends of the window must be read at the same instant -- two
commands (the ticks, then the counters, as before issue 54) put an SSH round trip of
traffic between them. sysctl(8) prints every name asked, in the order asked, as ``name:
value`` lines (sbin/sysctl/sysctl.c show_var); kern.clockrate, hw.ncpu and kern.cp_time are
read as :mod:`cputime` reads them (stathz, the CPU count, the CPUSTATES ticks), the engine's
packet counters (the profile's ``encrypted`` and ``decrypted`` roles' OIDs) as ints.

Golden files: tests/golden/cpu_window (the twin's capture and hand-written mutations).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import cputime, sysctl
from ._base import ParseError, fail, numbered_lines

COMMAND = cputime.COMMAND
"""The line's fixed part (``sysctl kern.clockrate hw.ncpu kern.cp_time``); :func:`command` adds
the counters' OIDs (ipsec_hil.lab.command: a Command called with more arguments)."""


def command(encrypted: Sequence[str], decrypted: Sequence[str]) -> str:
    """The command line for these counters' OIDs."""
    return COMMAND(*encrypted, *decrypted)


@dataclass(frozen=True)
class CpuWindowRead:
    """The kernel's ticks and the engine's packets so far, read at one instant."""

    times: cputime.CpuTimes
    encrypted: int  # packets the engine sealed (the sum of the encrypted role's counters)
    decrypted: int  # packets it opened


def parse(text: str, encrypted: Sequence[str] = (), decrypted: Sequence[str] = ()) -> CpuWindowRead:
    """The read of :func:`command`'s stdout; ParseError naming the line otherwise (a
    counter missing, printed twice, not a count >= 0, an unexpected name)."""
    counters = (*encrypted, *decrypted)
    try:
        values = sysctl.parse(text, mode="name", names=(*cputime.NAMES, *counters))
    except ParseError as exc:
        raise ParseError(COMMAND, exc.line_no, exc.line, exc.why) from None
    lines = {line.partition(": ")[0]: (no, line) for no, line in numbered_lines(text)}
    extra = [n for n in values if n not in cputime.NAMES and n not in counters]
    if extra:
        fail(COMMAND, *lines[extra[0]], f"unexpected name {extra[0]!r}: expected only "
             f"{', '.join((*cputime.NAMES, *counters))}")
    for name in counters:
        v = values[name]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            fail(COMMAND, *lines[name], f"expected a packet count >= 0 for {name}, found {v!r}")
    try:
        times = cputime.parse("".join(lines[n][1] + "\n" for n in cputime.NAMES))
    except ParseError as exc:
        no, line = lines[exc.line.partition(": ")[0]] if exc.line.partition(": ")[0] in lines else (exc.line_no, exc.line)
        raise ParseError(COMMAND, no, line, exc.why) from None
    return CpuWindowRead(times, sum(values[n] for n in encrypted), sum(values[n] for n in decrypted))
