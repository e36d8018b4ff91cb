"""Every inner size, inbound: each delivered exactly once, its ESP of the formula's length.

Issue 12, invariant 4 (the inbound half): one process on the injection point sends one
frame of every inner size from the smallest tagged packet to the exact ESP limit of the
path, and the far LAN counts them.  A driver that mishandles one padding length loses one
size in sixteen (CBC) -- this test names the sizes.
"""
from __future__ import annotations

import pytest

from plugin.lab import esp_math
from plugin.lab.inject import min_inner

from ._wire import wire  # noqa: F401  (fixture)



@pytest.mark.tunnels(children="one")
def test_every_size(tunnel, wire, record):
    """Every inner size from the smallest to the ESP limit delivered exactly once."""
    cfg = tunnel.config
    top = esp_math.max_inner(cfg.cipher, cfg.outer, tunnel.path_mtu)
    sizes = range(min_inner(cfg.inner), top + 1)
    c = wire.crafter()
    edge = wire.right_edge()
    frames = c.sweep(wire.inner, sizes, edge)
    for f in frames:
        assert f.esp_len + esp_math.IP_HEADER[cfg.outer] == esp_math.outer_packet_len(cfg.cipher, cfg.outer, f.inner_len)
    got = wire.send(c, frames, edge + len(frames))
    lost = [f.inner_len for f in got.lost()]
    twice = [f.inner_len for f in got.duplicated()]
    record.figure("inner sizes swept", f"{sizes.start}..{sizes.stop - 1} ({len(sizes)})")
    record.figure("sizes lost", len(lost))
    record.figure("sweep seconds (one process)", round(got.seconds, 2), "s")
    assert not lost and not twice, f"sizes lost: {lost[:40]}; delivered twice: {twice[:40]}"
    wrong = [(f.inner_len, got.inner_len(f, cfg.inner)) for f in frames if got.inner_len(f, cfg.inner) != f.inner_len]
    assert not wrong, f"delivered inner lengths differ from those sent: {wrong[:20]}"
