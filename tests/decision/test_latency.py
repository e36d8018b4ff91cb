"""Latency summary: exact definitions (nearest-rank p99, statistics.median), lost probes."""

from __future__ import annotations

import pytest

from ipsec_hil.lab.decision.errors import DecisionError
from ipsec_hil.lab.decision.latency import ProbeSample, latency_profile, nearest_rank, summarize


def _probes(latencies, lost=0, start=100.0):
    return [ProbeSample(start + i, start + i + d) for i, d in enumerate(latencies)] + [
        ProbeSample(start, None) for _ in range(lost)
    ]


def test_nearest_rank_definition():
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert nearest_rank(values, 99) == 99.0  # rank ceil(0.99 * 100) = 99
    assert nearest_rank(values, 100) == 100.0
    assert nearest_rank(values[:10], 99) == 10.0  # fewer than 100: the maximum
    assert nearest_rank([5.0, 7.0], 50) == 5.0  # rank ceil(1.0) = 1
    assert nearest_rank([float(v) for v in range(1, 151)], 99) == 149.0  # ceil(148.5), not round


def test_summary_of_known_samples():
    latencies = [i * 1e-6 for i in range(1, 201)]  # 1..200 us
    s = summarize(_probes(latencies, lost=3), fraction=0.5, offered=1000.0)
    assert (s.probes, s.lost) == (203, 3)
    assert s.min == pytest.approx(1e-6) and s.max == pytest.approx(200e-6)
    assert s.median == pytest.approx(100.5e-6)  # even count: mean of ranks 100 and 101
    assert s.p99 == pytest.approx(198e-6)  # rank ceil(0.99 * 200) = 198
    assert s.to_dict()["p99"] == s.p99
    assert "50% of PDR" in s.summary() and "200 of 203 probes received" in s.summary()


def test_profile_probes_each_fraction_of_pdr():
    loads = []

    def probe(load):
        loads.append(load)
        return _probes([1e-5 * (1 + load / 1e5)] * 50)

    out = latency_profile(probe, pdr=1e5)
    assert loads == pytest.approx([1e4, 5e4, 9e4])
    assert [s.fraction for s in out] == [0.1, 0.5, 0.9]
    assert out[0].median < out[2].median


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: summarize([ProbeSample(1.0, None)], fraction=0.1, offered=10.0), "none received"),
        (lambda: summarize([ProbeSample(2.0, 2.1), ProbeSample(2.0, 1.0)], fraction=0.1, offered=1.0), "samples[1]"),
        (lambda: summarize([(1.0, 2.0)], fraction=0.1, offered=1.0), "samples[0]"),
        (lambda: latency_profile(lambda load: [], pdr=0), "pdr"),
        (lambda: latency_profile(lambda load: [], pdr=1.0, fractions=[1.5]), "fractions"),
        (lambda: nearest_rank([1.0], 0), "percentile"),
    ],
)
def test_bad_input_is_named(call, fragment):
    with pytest.raises(DecisionError) as info:
        call()
    assert fragment in str(info.value)
