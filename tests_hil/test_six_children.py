"""Six children at once (the 002 page): 6 of 6 up, six streams at once, each tunnel carries.

"six iperf3 streams from the PC's adapter on F1 at once, for 30 seconds, one to each port -
encrypted by the 136's engine and decrypted by the 3300's"; "frames the 136's host handed
its engine 2,358,711, frames the 3300's engine decrypted from it 2,358,288" -- equal within
the topology's tolerance on a congested link.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.measuring.measure import expect_at_least
from ipsec_hil.lab.timeshare import STREAM, TRAFFIC, spent
from ipsec_hil.lab.traffic.bench import iperf_run

pytestmark = [pytest.mark.page("002"), pytest.mark.forwarded]


@pytest.mark.throughput
@pytest.mark.tunnels(children="many")
def test_six_streams_each_tunnel_carries(tunnel, record, meter, bench_route, traffic_seconds):
    """Six streams at once, one per child's TCP port: each carries, the total holds the floor."""
    npu, peer, bench = tunnel.local, tunnel.remote, tunnel.bench
    target, src = tunnel.inner_address("remote"), tunnel.bench_inner_address("local")
    assert src, f"the bench has no {tunnel.config.inner} address on {npu.name}'s LAN"
    bench_route(tunnel.inner_prefix("remote"), tunnel.inner_address("local"))
    ports = [c.port for c in tunnel.children]
    seconds = traffic_seconds(30)
    before = {c.name: c for c in _children(peer, tunnel)}
    record.traffic_seconds += seconds  # six streams at once: their seconds count once
    with meter(npu, peer, title="six streams at once") as m:
        # the streams run in helper threads; this thread's wait for them is the traffic
        # asked, the rest of it their start and stop (ipsec_hil.lab.timeshare)
        with spent(STREAM), spent(TRAFFIC, cap=seconds), ThreadPoolExecutor(len(ports)) as pool:
            futures = {p: pool.submit(iperf_run, bench, peer, target, seconds=seconds, port=p, bind=src) for p in ports}
            results = {p: f.result() for p, f in futures.items()}
    errors = {p: r.error for p, r in results.items() if not r.ok}
    if errors:
        raise LabError(f"iperf3 failed on port(s): {errors}")
    rates = {p: r.received_bps / 1e6 for p, r in results.items()}
    total = sum(rates.values())
    record.figure("each tunnel, Mbit/s", " ".join(f"{rates[p]:.0f}" for p in ports))
    record.figure("all six together", round(total, 1), "Mbit/s")
    after = {c.name: c for c in _children(peer, tunnel)}
    for child in tunnel.children:
        moved = (after[child.name].packets_in or 0) - (before[child.name].packets_in or 0)
        assert moved > 0 and rates[child.port] > 0, (
            f"child {child.name} (TCP port {child.port}) carried nothing: {moved} packets in on {peer.name}, "
            f"{rates[child.port]:.1f} Mbit/s")
    floor = tunnel.floor(via_bench=True)
    expect_at_least(total, floor.mbit, f"six streams together ({floor})", unit="Mbit/s", ledger=m.ledger)
    least = sum(tunnel.least_stream_packets(r) for r in results.values())
    record.figure("packets the six streams must have made (at least)", least)
    tunnel.expect_conserved(m.ledger, "frames the 136 handed its engine = frames the peer decrypted", sender="local",
                            at_least=least)
    tunnel.expect_offload_carried(m.ledger, "six streams at once")
    record.figure("hw offl doors checked (FreeBSD 15)", tunnel.expect_offload_door(
        m.ledger, "six streams at once", sender="local", at_least=least))


def _children(app, tunnel):
    return [c for ike in app.list_sas().ike_sas if ike.name == tunnel.conn for c in ike.children]
