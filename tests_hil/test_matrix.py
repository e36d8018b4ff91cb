"""The matrix: outer {IPv4, IPv6} x inner {IPv4, IPv6} x {GCM, CBC}.

The 001 page: "five 1,300-byte IPv6 pings from the 3300 were answered in each run" (here
the size is the path's limit, from ipsec_hil.lab.expectations.esp_math), and
one stream each way "at the gigabit link's rate" with every combination.
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.measuring.measure import expect_at_least

pytestmark = [pytest.mark.page("001")]


@pytest.mark.tunnels(children="one")
def test_five_pings_answered(tunnel, record, meter):
    """Five pings of the largest size the path carries, peer to appliance through the tunnel, all answered."""
    peer, cfg = tunnel.remote, tunnel.config
    # The page's 1,300-byte pings were below its path's limit; here the size is that limit
    # itself (the peer's own packet and the reply both skip the kernel's gate), so the
    # echo is as large as the tunnel carries on whatever path the topology has.
    largest = esp_math.max_inner(cfg.cipher, cfg.outer, tunnel.path_mtu)
    data = esp_math.ping_data_for_inner(largest, cfg.inner)
    with meter(tunnel.local, peer, title="five pings") as m:
        r = peer.ping(tunnel.inner_address("local"), size=data, count=5, source=tunnel.inner_address("remote"))
    record.figure(f"{data}-byte pings answered (inner {largest}, path MTU {tunnel.path_mtu})",
                  f"{r.received} of {r.transmitted}")
    assert r.transmitted == 5 and r.received == 5, (
        f"{peer.name} -> {tunnel.local.name}: {r.received} of {r.transmitted} {data}-byte pings answered "
        f"(inner {largest}, the path's limit for {cfg.cipher} over {cfg.outer}; errors {r.errors})")
    expect_at_least(m.ledger.value(tunnel.decrypted_refs("local")), 5,
                    "the appliance decrypted every echo", ledger=m.ledger)
    expect_at_least(m.ledger.value(tunnel.encrypted_refs("local")), 5,
                    "the appliance encrypted every reply", ledger=m.ledger)
    tunnel.expect_offload_carried(m.ledger, "five pings")


@pytest.mark.throughput
@pytest.mark.tunnels(children="one")
@pytest.mark.parametrize("direction", ["encrypting", "decrypting"])
def test_one_stream_each_way(tunnel, record, stream, traffic_seconds, direction):
    """One stream each way between the two appliances at or above the floor for the path."""
    local, remote = tunnel.local, tunnel.remote
    floor = tunnel.floor(via_bench=False)
    res = stream(local, remote, tunnel.inner_address("remote"), traffic_seconds(10),
                 reverse=direction == "decrypting", bind=tunnel.inner_address("local"),
                 label=f"{local.name} {direction}")
    mbit = res.received_bps / 1e6
    record.figure("floor", round(floor.mbit, 1), "Mbit/s")
    expect_at_least(mbit, floor.mbit, f"one stream, {local.name} {direction} ({floor})", unit="Mbit/s")
