"""The anti-replay window, from the wire: exactly what RFC 4303's algorithm drops is dropped.

Issue 12, invariant 1. With W the inbound association's window (`setkey -D` prints
replay= in bytes, W = 8 x replay), the suite injects after the tunnel's own traffic set the
right edge E: E+2W, E+W+1, E+W, E+W+W/2, E+W+W/2 again, and the edges just inside and just
outside the window.  Dropped frames are counted once each by the replay counter the
profile names (the kernel's for a kernel-run association); the others reach the far LAN
exactly once.
"""
from __future__ import annotations

import pytest

from plugin.lab.inject.reasons import drop_counter

from ._wire import deltas, moved, wire  # noqa: F401  (fixture)



def rfc4303_sequence(w: int) -> list[tuple[int, bool]]:
    """(offset from the edge, delivered?) written from RFC 4303 3.4.3 by hand."""
    half = w + w // 2
    return [(2 * w, True), (w + 1, True), (w, False), (half, True), (half, False), (2 * w, False),
            (w + 2, True), (2 * w + 1, True), (w + 1, False), (w + 2, False), (4 * w, True),
            (3 * w, False), (3 * w + 1, True)]


@pytest.mark.tunnels(children="one")
def test_replay_window(tunnel, wire, record):
    """Replay window: RFC 4303's drops dropped and counted once, the rest delivered once."""
    app = wire.appliance
    w = wire.window()
    assert w == app.profile.replay_window, (
        f"{app.name}: the inbound association's window is {w} packets (setkey -D), the profile says "
        f"{app.profile.replay_window}")
    table = rfc4303_sequence(w)
    c = wire.crafter()
    edge = wire.right_edge()
    frames = c.frames(wire.inner, [edge + off for off, _ in table])
    where = drop_counter(app.profile, tunnel.offloaded(wire.under), "replay")
    with deltas(app) as d:
        got = wire.send(c, frames, edge + 4 * w + 2)
    for (off, _), f in zip(table, frames):
        record.figure(f"W={w}: edge+{off} delivered", got.times(f))
    wrong = [(off, got.times(f), int(ok)) for (off, ok), f in zip(table, frames) if got.times(f) != int(ok)]
    assert not wrong, f"{app.name}: (edge + offset, delivered, RFC 4303 says) differ: {wrong}"
    drops = sum(1 for _, ok in table if not ok)
    record.figure(f"{where[1]} moved (expected {drops})", moved(d, where))
    assert moved(d, where) == drops, f"{app.name}: {where[1]} moved {moved(d, where)}, expected {drops}; deltas {d}"
