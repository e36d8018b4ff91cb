"""NDR and PDR of the tunnel, as the benchmarking methodology defines throughput (issue 14).

UDP datagrams of one size offered from the bench through the tunnel to the far end
(ipsec_hil.lab.traffic.udp_load: iperf3 -u, its receiver's loss count), fed to the MLRsearch-style
search (ipsec_hil.lab.decision.search): per goal the bounds the final-duration trials proved
and every trial it needed, on the page and as a plot. Then round-trip latency at 10/50/90
% of the PDR's lower bound (ipsec_hil.lab.decision.latency). One configuration per model by
default (outer and inner IPv4, AES-GCM, one child). Goals from the options
(``--ndr-loss``, ``--pdr-loss``, ``--search-width``, ``--search-trial-seconds``).

The search range: up to 1.1 x the slowest link on the path (the topology's rates), down
to 2 % of it. The test fails only when the search cannot prove a lower bound for a goal
(the tunnel forwards nothing loss-free at 2 % of its link) -- the figures themselves are
measurements, not floors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ipsec_hil.lab.decision.latency import latency_profile
from ipsec_hil.lab.decision.plot import plot_latency, plot_search
from ipsec_hil.lab.decision.search import search
from ipsec_hil.lab.traffic.udp_load import RTT_LOAD_SECONDS, rtt_probe, udp_trial

pytestmark = [pytest.mark.throughput, pytest.mark.forwarded]

DATAGRAM = 1200  # bytes of UDP payload: below every configuration's inner limit at MTU 1500


def _trials_table(result) -> str:
    rows = [f"{'#':>3} {'role':<9} {'phase':>5} {'offered Mbit/s':>14} {'sent':>8} {'received':>8} {'loss %':>7} {'s':>5}"]
    for t in result.trials:
        r = t.result
        rows.append(f"{t.index:>3} {t.role:<9} {t.phase:>5} {t.load:>14.2f} {r.sent:>8} {r.received:>8} "
                    f"{100 * r.loss_ratio:>7.3f} {r.duration:>5.2f}")
    return "\n".join(rows)


@pytest.mark.tunnels(outer="ipv4", inner="ipv4", cipher="aes-gcm-16", children="one")
def test_ndr_pdr(tunnel, record, bench_route, search_settings, pytestconfig):
    """NDR and PDR bounds with their trials, and latency at fractions of the PDR."""
    bench = tunnel.bench
    target, src = tunnel.inner_address("remote"), tunnel.bench_inner_address("local")
    assert src, f"the bench has no {tunnel.config.inner} address on {tunnel.local.name}'s LAN"
    bench_route(tunnel.inner_prefix("remote"), tunnel.inner_address("local"))
    link = tunnel.floor(via_bench=True).link_mbit
    s = search_settings
    result = search(udp_trial(bench, tunnel.remote, target, size=DATAGRAM, bind=src), max_rate=1.1 * link,
                    min_rate=0.02 * link, goals=s.goals, final_duration=s.final_duration,
                    initial_duration=s.initial_duration)
    record.traffic_seconds += sum(t.result.duration for t in result.trials)  # every trial's load is traffic asked
    plots = Path(pytestconfig.rootpath) / "reports" / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    safe = "".join(ch if ch.isalnum() else "_" for ch in tunnel.name)
    record.table(f"NDR/PDR search, {DATAGRAM}-byte datagrams, {result.trial_count} trials", _trials_table(result))
    search_png = plots / f"ndr-pdr-{safe}.png"
    plot_search(result, search_png, unit="Mbit/s")
    record.plot(search_png)
    for g in result.goals:
        name = g.goal.name
        if g.lower_bound is not None:
            record.figure(name, round(g.lower_bound, 1), "Mbit/s")
        record.figure(f"{name} bounds (loss <= {100 * g.goal.loss_ratio:g} %)",
                      f"[{g.lower_bound if g.lower_bound is None else round(g.lower_bound, 1)}, "
                      f"{g.upper_bound if g.upper_bound is None else round(g.upper_bound, 1)}] Mbit/s, width "
                      f"{'-' if g.relative_width is None else f'{100 * g.relative_width:.1f} %'}, proved at "
                      f"{g.proved_at:g} s trials")
    missing = [g.goal.name for g in result.goals if g.lower_bound is None]
    assert not missing, f"{', '.join(missing)}: no load down to {0.02 * link:.1f} Mbit/s met the goal loss ratio"
    pdr = result.goal("PDR").lower_bound
    summaries = latency_profile(rtt_probe(bench, tunnel.remote, target, size=DATAGRAM, bind=src), pdr,
                                s.latency_fractions)
    record.traffic_seconds += RTT_LOAD_SECONDS * len(summaries)  # each probe's load is traffic asked
    for lat in summaries:
        record.figure(f"round trip at {100 * lat.fraction:g} % of PDR ({lat.offered:.1f} Mbit/s)",
                      f"min {1000 * lat.min:.2f} / median {1000 * lat.median:.2f} / p99 {1000 * lat.p99:.2f} ms, "
                      f"{lat.lost} of {lat.probes} lost")
    latency_png = plots / f"latency-{safe}.png"
    plot_latency(summaries, latency_png)
    record.plot(latency_png)
