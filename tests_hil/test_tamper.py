"""Tampered and malformed ESP toward the appliance: dropped, counted once for its reason.

Issue 12, invariant 2. One flipped bit in the ICV, one in the ciphertext, an unknown SPI, a
truncated frame and (CBC) a wrong pad length are crafted by the suite for the association
`setkey -D` shows and sent from the tunnel's injection point; the far LAN sees none of them,
the counter the profile names for each reason moves exactly once, and genuine frames before
and after are delivered.
"""
from __future__ import annotations

import pytest

from ipsec_hil.lab.inject.counted import deltas, moved
from ipsec_hil.lab.inject.reasons import VARIANT_REASON, drop_counter


@pytest.mark.tunnels(children="one")
def test_tampered_frames_dropped(tunnel, wire, record):
    """Tampered and malformed frames: none delivered, each counted once by its reason's counter."""
    cfg = tunnel.config
    variants = [v for v in VARIANT_REASON if v != "bad_pad_length" or cfg.cipher == "aes-cbc-hmac-sha256"]
    app = wire.appliance
    offloaded = tunnel.offloaded(wire.under)
    c = wire.crafter()
    base = wire.right_edge()
    frames = [c.frame(wire.inner, 0, base, 100)]  # the tunnel's traffic before ...
    frames += [c.frame(wire.inner, k + 1, base + k + 1, 101, v) for k, v in enumerate(variants)]
    frames.append(c.frame(wire.inner, 99, base + 50, 100))  # ... and after
    with deltas(app) as d:
        got = wire.send(c, frames, base + 51)
        record.traffic_seconds += got.paced_seconds  # the paced frames are traffic asked
    for f in frames:
        record.figure(f"delivered: {f.variant or 'genuine'} (seq base+{f.seq - base})", got.times(f))
    assert got.times(frames[0]) == 1 and got.times(frames[-1]) == 1, \
        f"genuine frames around the tampered ones were not delivered once: {got.counts}"
    wrongly = [f.variant for f in frames[1:-1] if got.times(f)]
    assert not wrongly, f"{app.name} delivered tampered frames: {wrongly}"
    want: dict[tuple[str, str], int] = {}
    for v in variants:
        where = drop_counter(app.profile, offloaded, VARIANT_REASON[v])
        want[where] = want.get(where, 0) + 1
    for where, n in want.items():
        record.figure(f"{where[0]} {where[1]} moved", moved(d, where))
        assert moved(d, where) == n, (
            f"{app.name}: {where[0]} counter {where[1]} moved {moved(d, where)}, expected {n} "
            f"(one per frame dropped for its reason; all deltas: {d})")
