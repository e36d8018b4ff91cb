"""The matrix: outer {IPv4, IPv6} x inner {IPv4, IPv6} x {GCM, CBC}.

The 001 page: "five 1,300-byte IPv6 pings from the 3300 were answered in each run", and
one stream each way "at the gigabit link's rate" with every combination.
"""

from __future__ import annotations

import pytest

from plugin.lab.expect import throughput_floor
from plugin.lab.measure import expect_at_least

pytestmark = [pytest.mark.page("001")]

PING_DATA = 1300  # the page's ping size (bytes of data)


@pytest.mark.tunnels(children="one")
def test_five_pings_answered(tunnel, record):
    """Five 1,300-byte pings from the peer to the appliance through the tunnel, all answered."""
    peer = tunnel.remote
    r = peer.ping(tunnel.inner_address("local"), size=PING_DATA, count=5, source=tunnel.inner_address("remote"))
    record.figure(f"{PING_DATA}-byte pings answered", f"{r.received} of {r.transmitted}")
    assert r.transmitted == 5 and r.received == 5, (
        f"{peer.name} -> {tunnel.local.name}: {r.received} of {r.transmitted} {PING_DATA}-byte pings answered "
        f"(errors {r.errors})")


@pytest.mark.throughput
@pytest.mark.tunnels(children="one")
@pytest.mark.parametrize("direction", ["encrypting", "decrypting"])
def test_one_stream_each_way(tunnel, record, stream, traffic_seconds, direction):
    """One stream each way between the two appliances at or above the floor for the path."""
    local, remote = tunnel.local, tunnel.remote
    floor = throughput_floor(tunnel.lab.topology, tunnel.case.tunnel, tunnel.config, via_bench=False)
    res = stream(local, remote, tunnel.inner_address("remote"), traffic_seconds(10),
                 reverse=direction == "decrypting", bind=tunnel.inner_address("local"),
                 label=f"{local.name} {direction}")
    mbit = res.received_bps / 1e6
    record.figure("floor", round(floor.mbit, 1), "Mbit/s")
    expect_at_least(mbit, floor.mbit, f"one stream, {local.name} {direction} ({floor})", unit="Mbit/s")
