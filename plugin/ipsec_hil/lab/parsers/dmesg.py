"""`dmesg` (sbin/dmesg) -> DmesgLines, and `added_since` for what the kernel logged since a snapshot.

Source: sbin/dmesg/dmesg.c:main(). Without -a, dmesg drops the `<pri>` syslog tags and
passes every line through strvisx(VIS_NOSLASH|VIS_CSTYLE), so a control character (other
than tab) or a `<N>` prefix means the capture is not plain `dmesg`: a ParseError, never
a silently different text. Empty output is an empty buffer (possible right after
`dmesg -c`), not an error.

Why the diff matches on the last lines of the snapshot: the message buffer is a ring
(kern.msgbufsize); between two snapshots its start is overwritten, so "the old text is a
prefix of the new one" does not hold. The last N lines of the old snapshot are searched
in the new one; what follows them was added. If they are gone (the ring wrapped past
them, or a reboot), every line of the new buffer counts as added and `anchored` is False.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ._base import fail, numbered_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("dmesg")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_PRIORITY = re.compile(r"<[0-9]+>")


@dataclass(frozen=True)
class DmesgLines:
    lines: tuple[str, ...]


@dataclass(frozen=True)
class DmesgDiff:
    """Lines logged after the snapshot; anchored=False: the snapshot's tail was not found."""

    added: tuple[str, ...]
    anchored: bool


def parse(text: str) -> DmesgLines:
    lines: list[str] = []
    for no, line in numbered_lines(text):
        if _CONTROL.search(line):
            fail(COMMAND, no, line, "control character in dmesg output (dmesg prints them with vis(3))")
        if _PRIORITY.match(line):
            fail(COMMAND, no, line, "syslog priority prefix: that is `dmesg -a` output, not `dmesg`")
        lines.append(line)
    while lines and not lines[-1].strip():
        lines.pop()
    return DmesgLines(tuple(lines))


def added_since(before: DmesgLines, after: DmesgLines, anchor_lines: int = 20) -> DmesgDiff:
    """The lines of AFTER that were logged after BEFORE was taken (see the module docstring).

    Several places where the anchor matches (a repeated message): the one whose preceding
    lines agree with BEFORE the furthest back wins; on a tie the earliest, so that an
    ambiguous buffer reports more lines as new rather than hide one.
    """
    if anchor_lines < 1:
        raise ValueError(f"anchor_lines must be at least 1, got {anchor_lines}")
    old, new = before.lines, after.lines
    if not old:
        return DmesgDiff(added=new, anchored=True)
    anchor = old[-anchor_lines:]
    n = len(anchor)
    best_end, best_agree = -1, -1
    for end in range(n, len(new) + 1):
        if new[end - n:end] != anchor:
            continue
        agree = n
        while agree < len(old) and agree < end and new[end - agree - 1] == old[-agree - 1]:
            agree += 1
        if agree > best_agree:
            best_end, best_agree = end, agree
    if best_end < 0:
        return DmesgDiff(added=new, anchored=False)
    return DmesgDiff(added=new[best_end:], anchored=True)
