"""dmesg.added_since: what the kernel logged since a snapshot, also when the ring buffer wrapped."""
from __future__ import annotations

import pytest

from ipsec_hil.lab.parsers.dmesg import DmesgLines, added_since


def _lines(*lines: str) -> DmesgLines:
    return DmesgLines(tuple(lines))


def test_appended_lines() -> None:
    diff = added_since(_lines("a", "b", "c"), _lines("a", "b", "c", "d", "e"), anchor_lines=2)
    assert diff.added == ("d", "e") and diff.anchored


def test_nothing_added() -> None:
    assert added_since(_lines("a", "b"), _lines("a", "b")).added == ()


def test_ring_wrapped_but_the_anchor_survived() -> None:
    """The start of the old buffer was overwritten: a prefix comparison would see all as new."""
    before = _lines(*[f"boot {i}" for i in range(10)])
    after = _lines("boot 7", "boot 8", "boot 9", "new 1", "new 2")
    diff = added_since(before, after, anchor_lines=3)
    assert diff.added == ("new 1", "new 2") and diff.anchored


def test_anchor_gone_means_everything_is_new_and_says_so() -> None:
    diff = added_since(_lines("old 1", "old 2"), _lines("x", "y"), anchor_lines=2)
    assert diff.added == ("x", "y") and not diff.anchored


def test_repeated_anchor_prefers_the_place_where_more_history_agrees() -> None:
    before = _lines("start", "tick", "tick")
    after = _lines("start", "tick", "tick", "tick", "tick", "new")
    diff = added_since(before, after, anchor_lines=2)
    assert diff.added == ("tick", "tick", "new")


def test_ambiguous_repeats_report_more_rather_than_hide_one() -> None:
    """Only repeats survive in the new buffer: the earliest match wins (more lines reported)."""
    diff = added_since(_lines("tick", "tick"), _lines("tick", "tick", "tick", "panic: x"), anchor_lines=2)
    assert diff.added == ("tick", "panic: x")


def test_empty_baseline_and_bad_anchor() -> None:
    assert added_since(_lines(), _lines("a")).added == ("a",)
    with pytest.raises(ValueError, match="anchor_lines"):
        added_since(_lines("a"), _lines("a"), anchor_lines=0)
