"""The path's bottleneck in the search's unit, the trial length against its queue, and the
twin's shaper holding the queue the topology states (issue 41)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ipsec_hil.lab.decision.bottleneck import path_bottleneck
from ipsec_hil.lab.decision.errors import DecisionError
from ipsec_hil.lab.errors import TopologyError
from ipsec_hil.lab.expectations.hardware import REGISTRY
from ipsec_hil.lab.topology import TunnelConfig, load_topology, parse_topology

VIRTUAL = Path(__file__).resolve().parents[2] / "topologies" / "virtual.yaml"
GCM44 = TunnelConfig("ipv4", "ipv4", "aes-gcm-16")


def test_the_npu_path_is_limited_by_the_esp_link_not_the_benchs():
    """1,200-byte datagrams: the bench link carries 1,242-byte frames (96.6 Mbit/s of payload
    at 100), the gigabit link ESP's 1,298 (92.4): the second is the bottleneck."""
    b = path_bottleneck(load_topology(VIRTUAL, models=REGISTRY), "npu", GCM44, 1200)
    bench, esp = b.hops
    assert (bench.sender, esp.sender) == ("bench.c_f1", "xgs136.port8")
    assert bench.payload_mbit == pytest.approx(100 * 1200 / 1242)
    assert esp.frame_bytes == 20 + 8 + 8 + 1232 + 16 + 14  # outer IP, ESP, IV, inner+trailer padded, ICV, Ethernet
    assert b.slowest is esp and b.payload_mbit == pytest.approx(92.45, abs=0.01)


def test_trial_length_against_the_queue():
    """128 KiB at 100 Mbit/s is 10.5 ms: 1 s trials hide at most 1.05 %, a 2 % goal width
    needs 0.52 s, and the PDR's physical limit allows its loss and the hidden share."""
    b = path_bottleneck(load_topology(VIRTUAL, models=REGISTRY), "npu", GCM44, 1200)
    assert b.slowest.queue_bytes == 128 * 1024
    assert b.hidden_ratio(1.0) == pytest.approx(0.0105, abs=1e-4)
    assert b.min_trial_seconds(0.02) == pytest.approx(0.524, abs=1e-3)
    assert b.limit(1.0, 0.005) == pytest.approx(92.45 / 0.995 * 1.0105, rel=1e-3)
    with pytest.raises(DecisionError, match="trial_seconds: expected seconds > 0"):
        b.hidden_ratio(0)


def _with(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


def test_queue_is_stated_per_link_and_overridden_per_port():
    text = VIRTUAL.read_text()
    text = _with(text, "{a: xgs136.port8, b: peer3300.port8, rate_mbit: 100, queue_kib: 128}",
                 "{a: xgs136.port8, b: peer3300.port8, rate_mbit: 100, queue_kib: 768}")
    text = _with(text, 'port8:  {ipv4: 203.0.113.130/26, ipv6: "2001:db8:2::2/64", mtu: 9000, rate_mbit: 100}',
                 'port8: {ipv4: 203.0.113.130/26, ipv6: "2001:db8:2::2/64", mtu: 9000, rate_mbit: 100, queue_kib: 32}')
    topo = parse_topology(text, "lab.yaml", models=REGISTRY)
    assert topo.queue_bytes("xgs136", "port8") == 768 * 1024  # the link's
    assert topo.queue_bytes("peer3300", "port8") == 32 * 1024  # the port's own
    assert topo.queue_bytes("bench", "c_f1") == 128 * 1024  # its link's, as virtual.yaml states it
    assert path_bottleneck(topo, "npu", GCM44, 1200).hidden_ratio(1.0) == pytest.approx(6 * 0.0105, abs=1e-3)


def test_a_bad_queue_names_the_file_line_and_field():
    text = _with(VIRTUAL.read_text(), "{a: xgs136.f1, b: bench.c_f1, rate_mbit: 100, queue_kib: 128}",
                 "{a: xgs136.f1, b: bench.c_f1, rate_mbit: 100, queue_kib: -1}")
    with pytest.raises(TopologyError, match=r"lab.yaml:\d+.*queue_kib"):
        parse_topology(text, "lab.yaml", models=REGISTRY)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
def test_the_twins_shaper_holds_the_stated_queue_bucket_and_queue_together():
    """Both ends of a shaped wire: tbf's bucket plus its queue equal the port's stated bytes."""
    from ipsec_hil_twin.machinery import netns as tn
    from ipsec_hil_twin.lifecycle.lab import _free_prefix

    prefix = _free_prefix()
    spec = tn.NetworkSpec(prefix, [tn.HostSpec("a", "appliance"), tn.HostSpec("b", "bench")], [
        tn.LinkSpec(tn.PortSpec("a", "p", mtu=1500, queue_bytes=768 * 1024), tn.PortSpec("b", "q", mtu=9000), 100)])
    try:
        tn.build_network(spec)
        for host, dev, want, frame in (("a", "p", 768 * 1024, 1514), ("b", "q", tn.DEFAULT_QUEUE_BYTES, 9014)):
            out = subprocess.run(["ip", "netns", "exec", f"{prefix}-{host}", "tc", "-d", "-j", "qdisc", "show", "dev", dev],
                                 capture_output=True, text=True, check=True).stdout
            opts = json.loads(out)[0]["options"]
            burst, limit = tn.tbf_sizes(100, want, frame - 14)
            assert burst + limit == want and burst >= 2 * frame
            # tc shows the queue as its latency at the rate: (limit - burst) / rate, in us
            assert opts["burst"].startswith(f"{burst}b") and opts["rate"] == 12_500_000, opts
            assert opts["lat"] == pytest.approx((limit - burst) / 12.5e6 * 1e6, abs=2), opts
    finally:
        tn.destroy_prefix(prefix)
    assert not tn.list_namespaces(prefix) and not tn.root_links(prefix)


def _result(ndr: float, pdr: float, seconds: float = 1.0):
    from ipsec_hil.lab.decision.search import Goal, GoalResult
    goals = (GoalResult(Goal("NDR", 0.0), ndr, ndr * 1.02, 0.02, True, seconds),
             GoalResult(Goal("PDR", 0.005), pdr, pdr * 1.02, 0.02, True, seconds))
    return type("R", (), {"goals": goals})()


def test_the_plan_brackets_the_bottleneck_and_lengthens_trials_for_a_deep_queue():
    from ipsec_hil.lab.decision.bottleneck import search_plan
    b = path_bottleneck(load_topology(VIRTUAL, models=REGISTRY), "npu", GCM44, 1200)
    plan = search_plan(b, width=0.02, trial_seconds=1.0)
    assert plan.max_rate == pytest.approx(1.1 * b.payload_mbit) and plan.final_duration == 1.0
    assert any("92.4 Mbit/s of UDP payload" in line for line in plan.lines())
    deep = parse_topology(_with(VIRTUAL.read_text(), "{a: xgs136.port8, b: peer3300.port8, rate_mbit: 100, queue_kib: 128}",
                                "{a: xgs136.port8, b: peer3300.port8, rate_mbit: 100, queue_kib: 875}"), "deep.yaml", models=REGISTRY)
    longer = search_plan(path_bottleneck(deep, "npu", GCM44, 1200), width=0.02, trial_seconds=1.0)
    assert longer.final_duration == pytest.approx(3.6)  # 875 KiB at 100 Mbit/s = 71.7 ms; / 2 % = 3.58 s
    assert longer.bottleneck.hidden_ratio(longer.final_duration) <= 0.02


def test_the_physical_limit_check_fails_with_the_figures():
    """The old twin's figure (NDR = PDR = 110 on a 92.4 bottleneck), a queue-hidden 95.6, and
    an NDR above its PDR each fail, naming the numbers; figures under the limit pass."""
    from ipsec_hil.lab.decision.bottleneck import physical_limit_problems, search_plan
    plan = search_plan(path_bottleneck(load_topology(VIRTUAL, models=REGISTRY), "npu", GCM44, 1200), width=0.02, trial_seconds=1.0)
    assert physical_limit_problems(_result(91.0, 92.5), plan) == []
    old = physical_limit_problems(_result(110.0, 110.0), plan)
    assert len(old) == 2 and old[0].startswith("NDR 110.0 Mbit/s is above the bottleneck's line rate: xgs136.port8 "
                                               "carries 92.4 Mbit/s of payload, 93.4 with 0.0% loss")
    assert physical_limit_problems(_result(95.6, 95.6), plan)[1].startswith("PDR 95.6 Mbit/s is above")
    assert physical_limit_problems(_result(90.0, 85.0), plan) == [
        "NDR 90.0 Mbit/s is above PDR 85.0 Mbit/s: a load met the stricter goal but not the looser one"]
