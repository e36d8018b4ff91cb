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

from ipsec_hil.lab.cases import ANY
from ipsec_hil.lab.inject.counted import assert_drops_counted, deltas
from ipsec_hil.lab.inject.reasons import drop_counter


#: why RFC 4303 drops a frame: a duplicate of a number inside the window, or a number
#: behind the window ("old"). Without ESN both are replays (3.4.3). With ESN an old
#: number's high half is inferred as the NEXT subspace (appendix A2.1: Seql < Tl - W + 1),
#: so its ICV check fails: dropped as an authentication failure, not as a replay.
DUP, OLD = "duplicate", "old"


def rfc4303_sequence(w: int) -> list[tuple[int, str | None]]:
    """(offset from the edge, why dropped -- None: delivered) written from RFC 4303 3.4.3 by
    hand; the right edge moves with each delivered frame above it."""
    half = w + w // 2
    return [(2 * w, None), (w + 1, None), (w, OLD), (half, None), (half, DUP), (2 * w, DUP),
            (w + 2, None), (2 * w + 1, None), (w + 1, OLD), (w + 2, DUP), (4 * w, None),
            (3 * w, OLD), (3 * w + 1, None)]


def reason(why: str, esn: bool) -> str:
    """The drop counter's reason (ipsec_hil.lab.inject.reasons) for a frame RFC 4303 drops."""
    return "auth" if why == OLD and esn else "replay"


@pytest.mark.tunnels(children="one", esn=ANY, replay_window=ANY)
def test_replay_window(tunnel, wire, record):
    """Replay window: RFC 4303's drops dropped and counted once, the rest delivered once."""
    app = wire.appliance
    w = wire.window()
    planned = tunnel.replay_window or app.profile.replay_window
    assert w == planned, (
        f"{app.name}: the inbound association's window is {w} packets (setkey -D), "
        + (f"the tunnel asks for replay_window = {planned}" if tunnel.replay_window
           else f"the profile says {planned}"))
    table = rfc4303_sequence(w)
    c = wire.crafter()
    edge = wire.right_edge()
    frames = c.frames(wire.inner, [edge + off for off, _ in table])
    offloaded = tunnel.offloaded(wire.under)
    counters = {r: drop_counter(app.profile, offloaded, r) for r in ("replay", "auth")}
    with deltas(app) as d:
        got = wire.send(c, frames, edge + 4 * w + 2)
        record.traffic_seconds += got.paced_seconds  # the paced frames are traffic asked
    tag = f"W={w}{' ESN' if tunnel.esn else ''}"
    for (off, _), f in zip(table, frames):
        record.figure(f"{tag}: edge+{off} delivered", got.times(f))
    wrong = [(off, got.times(f), int(why is None)) for (off, why), f in zip(table, frames)
             if got.times(f) != int(why is None)]
    assert not wrong, f"{app.name}: (edge + offset, delivered, RFC 4303 says) differ: {wrong}"
    want = {r: sum(1 for _, why in table if why and reason(why, tunnel.esn) == r) for r in counters}
    assert_drops_counted(record, app, d, counters, want)
