"""NDR and PDR of the tunnel, as the benchmarking methodology defines throughput (issues 14, 41).

UDP datagrams of one size offered from the bench through the tunnel to the far end
(ipsec_hil.lab.traffic.udp_load: iperf3 -u, its receiver's loss count, and the load that
left the bench measured by iperf3's sender and the bench port's tx counters), fed to the
MLRsearch-style search (ipsec_hil.lab.decision.search): per goal the bounds the
final-duration trials proved and every trial it needed, on the page and as a plot. Then
round-trip latency at 10/50/90 % of the PDR's lower bound (ipsec_hil.lab.decision.latency).
One configuration per model by default (outer and inner IPv4, AES-GCM, one child). Goals
from the options (``--ndr-loss``, ``--pdr-loss``, ``--search-width``,
``--search-trial-seconds``, ``--search-margin``).

The search range comes from the path (ipsec_hil.lab.decision.bottleneck): up to the
bottleneck's line rate in UDP payload (the slowest link, ESP's framing on the outer link)
plus 10 %, down to 2 % of it; final trials at least long enough that the bottleneck's
stated queue (``queue_kib``) hides no more than the goal width of an overload (the twin's
shaper and its engine's ring hold that queue, not more). A trial the bench could not offer
is no result (more than 2 % short is measured again; 3 short attempts at a load are the
bench's limit, ipsec_hil.lab.decision.search): a goal met up to the bench's limit is
reported "at least X, not bracketed: the bench's limit", on the first screen too.

The test fails when the search cannot prove a lower bound for a goal (the tunnel forwards
nothing loss-free at 2 % of its link), and on physics: NDR <= PDR <= the bottleneck's line
rate (with the PDR's loss and the queue's hidden share), the figures in the message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ipsec_hil.lab.decision.bottleneck import path_bottleneck, physical_limit_problems, search_plan
from ipsec_hil.lab.decision.latency import latency_profile
from ipsec_hil.lab.decision.plot import plot_latency, plot_search
from ipsec_hil.lab.decision.search import search
from ipsec_hil.lab.traffic.udp_load import RTT_LOAD_SECONDS, rtt_probe, udp_trial

pytestmark = [pytest.mark.throughput, pytest.mark.forwarded]

DATAGRAM = 1200  # bytes of UDP payload: below every configuration's inner limit at MTU 1500


def _trials_table(result) -> str:
    rows = ["drain: how long the receiver still counted after the sender's last datagram (a standing queue)",
            f"{'#':>3} {'role':<9} {'phase':>5} {'asked Mbit/s':>12} {'left Mbit/s':>11} {'sent':>8} "
            f"{'port tx':>8} {'received':>8} {'loss %':>7} {'s':>5} {'drain ms':>8}"]
    for t in result.trials:
        r = t.result
        left = "-" if r.achieved is None else f"{r.achieved:.2f}"
        tx = "-" if r.port_tx is None else str(r.port_tx)
        short = "  the bench could not offer it" if t.bench_short else ""
        drain = "-" if r.drain is None else f"{1000 * r.drain:.1f}"
        rows.append(f"{t.index:>3} {t.role:<9} {t.phase:>5} {t.load:>12.2f} {left:>11} {r.sent:>8} {tx:>8} "
                    f"{r.received:>8} {100 * r.loss_ratio:>7.3f} {r.duration:>5.2f} {drain:>8}{short}")
    return "\n".join(rows)


def _bench_port(tunnel) -> str | None:
    """The bench's interface the load leaves by (its tx counters), when the topology says."""
    end = tunnel.topology.tunnel(tunnel.name).local
    peer = tunnel.topology.peer_of(end.host, end.lan)
    if peer is None:
        return None
    return tunnel.topology.port(*peer).ifname or peer[1]


@pytest.mark.tunnels(outer="ipv4", inner="ipv4", cipher="aes-gcm-16", children="one")
def test_ndr_pdr(tunnel, record, bench_route, search_settings, pytestconfig):
    """NDR and PDR bounds with their trials, under the path's bottleneck; latency at fractions of the PDR."""
    bench = tunnel.bench
    target, src = tunnel.inner_address("remote"), tunnel.bench_inner_address("local")
    assert src, f"the bench has no {tunnel.config.inner} address on {tunnel.local.name}'s LAN"
    bench_route(tunnel.inner_prefix("remote"), tunnel.inner_address("local"))
    s = search_settings
    plan = search_plan(path_bottleneck(tunnel.topology, tunnel.name, tunnel.config, DATAGRAM), width=s.width,
                       trial_seconds=s.final_duration, margin=s.ceiling_margin)
    record.table("NDR/PDR search plan, from the topology's path", "\n".join(plan.lines()))
    trial = udp_trial(bench, tunnel.remote, target, size=DATAGRAM, bind=src, port_ifname=_bench_port(tunnel))
    result = search(trial, max_rate=plan.max_rate, min_rate=plan.min_rate, goals=s.goals,
                    final_duration=plan.final_duration, initial_duration=plan.final_duration / 4)
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
        if g.lower_bound is not None and g.bracketed:
            record.figure(name, round(g.lower_bound, 1), "Mbit/s")
        elif g.lower_bound is not None:  # in words, first screen included; no rate for a baseline to gate on
            record.figure(name, g.verdict("Mbit/s"))
        record.figure(f"{name} bounds (loss <= {100 * g.goal.loss_ratio:g} %)",
                      f"[{g.lower_bound if g.lower_bound is None else round(g.lower_bound, 1)}, "
                      f"{g.upper_bound if g.upper_bound is None else round(g.upper_bound, 1)}] Mbit/s, width "
                      f"{'-' if g.relative_width is None else f'{100 * g.relative_width:.1f} %'}, proved at "
                      f"{g.proved_at:g} s trials{f' ({g.note})' if g.note else ''}")
    missing = [g.goal.name for g in result.goals if g.lower_bound is None]
    assert not missing, f"{', '.join(missing)}: no load down to {plan.min_rate:.1f} Mbit/s met the goal loss ratio"
    impossible = physical_limit_problems(result, plan)
    assert not impossible, "; ".join(impossible)
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
