"""The engine's anti-replay window and ESN against RFC 4303 (3.4.3, appendix A), no root.

The reference tables are written from the RFC's rules by hand (W = the window in
packets): a sequence number right of the edge is accepted and moves it; one at most
W - 1 behind it is accepted once; W or more behind, or seen before, is dropped.
"""
from __future__ import annotations

import pytest

from ipsec_hil_twin.engine.esp import ReplayWindow

WINDOWS = (32, 64, 1024)


def reference(w: int) -> list[tuple[int, bool]]:
    """The issue's sequence (2W, W+1, W, W+W/2, W+W/2 again) and the edge cases around it."""
    half = w + w // 2
    return [
        (2 * w, True),        # sets the right edge
        (w + 1, True),        # 2W - (W+1) = W-1 behind: the window's last slot
        (w, False),           # exactly W behind: just outside
        (half, True),
        (half, False),        # the duplicate
        (2 * w, False),       # duplicate of the edge itself
        (w + 1, False),       # duplicate at the last slot
        (w + 2, True),        # W-2 behind, unseen
        (0, False),           # never a valid number without ESN
        (2 * w + 1, True),    # moves the edge by one ...
        (w + 1, False),       # ... so W+1 is now W behind
        (w + 2, False),       # seen (and now W-1 behind)
        (4 * w, True),        # a jump of more than W clears the bitmap
        (3 * w, False),       # exactly W behind the new edge
        (3 * w + 1, True),
    ]


def run(win: ReplayWindow, seqs: list[int]) -> list[bool]:
    out = []
    for s in seqs:
        full = win.check(s)
        if full:
            win.update(full)  # the ICV verified
        out.append(bool(full))
    return out


@pytest.mark.parametrize("w", WINDOWS)
def test_window_matches_rfc4303_reference(w):
    table = reference(w)
    assert run(ReplayWindow(w), [s for s, _ in table]) == [ok for _, ok in table]


@pytest.mark.parametrize("w", WINDOWS)
def test_update_only_after_icv(w):
    """A frame whose ICV fails (check, no update) leaves the window as it was."""
    win = ReplayWindow(w)
    assert win.check(5) == 5
    assert win.top == 0 and win.check(5) == 5  # not recorded: the genuine frame still passes
    win.update(5)
    assert win.check(5) == 0


def test_window_rounds_up_to_whole_bytes_as_freebsd():
    """FreeBSD keeps the bitmap in bytes (setkey's replay= is (W + 7) / 8)."""
    win = ReplayWindow(33)
    assert win.size == 40
    run(win, [100])
    assert win.check(61) and not win.check(60)


@pytest.mark.parametrize("w", WINDOWS)
def test_fault_off_by_one_accepts_exactly_w_behind(w):
    win = ReplayWindow(w)
    win.reach = w + 1
    got = run(win, [2 * w, w + 1, w])
    assert got == [True, True, True]


@pytest.mark.parametrize("w", WINDOWS)
def test_fault_duplicates_accepted(w):
    win = ReplayWindow(w)
    win.dup_ok = True
    half = w + w // 2
    assert run(win, [2 * w, half, half]) == [True, True, True]


# ---------------------------------------------------------------- ESN (RFC 4303 A2)
B = 1 << 32


@pytest.mark.parametrize("w", WINDOWS)
def test_esn_inference_across_2_32(w):
    win = ReplayWindow(w, esn=True)
    # the low halves as they appear on the wire, and the full number RFC 4303 A2.1 infers
    steps = [(0x80000000, 0x80000000), (B - 2, B - 2), (B - 1, B - 1), (1, B + 1), (0, B),
             (2, B + 2)]
    for low, full in steps:
        assert win.check(low) == full, (hex(low), hex(full))
        win.update(full)
    assert win.top == B + 2
    # replays across the boundary: seen numbers on both sides are dropped
    for low in (B - 1, B - 2, 0, 1, 2):
        assert win.check(low & 0xFFFFFFFF) == 0
    # an unseen number just left of the boundary, inside the window, is still accepted
    assert win.check(B - 3) == B - 3
    # W - 1 behind the edge is the window's last slot (subspace 0) ...
    assert win.check((B + 3 - w) & 0xFFFFFFFF) == B + 3 - w
    # ... and exactly W behind is read as the NEXT subspace (A2.1 case B): its ICV, computed
    # with the true high half, then fails -- a replay that far back is an ICV drop with ESN
    assert win.check((B + 2 - w) & 0xFFFFFFFF) == B | ((B + 2 - w) & 0xFFFFFFFF)


def test_esn_case_b_reads_the_top_of_the_space_as_the_previous_subspace():
    """RFC 4303 A2.1 case B: with T in the first W numbers of a subspace, a low half in
    the last W numbers belongs to the subspace before (none exists before the first)."""
    win = ReplayWindow(32, esn=True)
    win.update(10)
    assert win.check(B - 5) == 0  # would be subspace -1
    win.update(B + 10)
    assert win.check((B - 5) & 0xFFFFFFFF) == B - 5  # subspace 0, 15 behind: inside the window


def test_esn_zero_low_half_is_valid_past_the_first_subspace():
    win = ReplayWindow(32, esn=True)
    assert win.check(0) == 0  # sequence number 0 is never sent
    win.update(B - 1)
    assert win.check(0) == B
