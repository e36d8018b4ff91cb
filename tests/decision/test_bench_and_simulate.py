"""The simulated inputs mean what they say, and the bench runs end to end."""

from __future__ import annotations

import numpy as np
import pytest

from ipsec_hil.lab.decision import bench
from ipsec_hil.lab.decision.compare import interleaved_schedule, split_trials
from ipsec_hil.lab.decision.errors import DecisionError
from ipsec_hil.lab.decision.simulate import SimulatedDut, drift_factors, simulated_trials


@pytest.mark.parametrize("kind", ["sharp", "livelock", "gradual"])
@pytest.mark.parametrize("goal", [0.0, 0.005, 0.05])
def test_true_rate_is_the_edge_of_the_loss_curve(kind, goal):
    dut = SimulatedDut(kind, knee=4e5, full_loss_at=1.2e6)
    edge = dut.true_rate(goal)
    assert dut.loss_ratio(edge) <= goal + 1e-12
    assert dut.loss_ratio(edge * 1.001) > goal


def test_lossless_dut_and_bad_kind():
    assert SimulatedDut("lossless").true_rate(0.0) == float("inf")
    with pytest.raises(DecisionError, match="SimulatedDut.kind"):
        SimulatedDut("wobbly")


def test_simulated_trials_follow_ratio_and_drift():
    rng = np.random.default_rng(0)
    trials = simulated_trials(rng, interleaved_schedule(200), candidate_ratio=0.8, rel_sd=0.03)
    p, c = split_trials(trials)
    assert np.mean(c) / np.mean(p) == pytest.approx(0.8, rel=0.01)
    assert np.std(p) / np.mean(p) == pytest.approx(0.03, rel=0.2)
    factors = drift_factors(np.random.default_rng(0), 11, drift=-0.2)
    assert factors[0] == pytest.approx(1.0) and factors[-1] == pytest.approx(0.8)


def test_bench_prints_rates_and_costs(capsys):
    assert bench.main(["--repetitions", "2", "--pairs", "3"]) == 0
    out = capsys.readouterr().out
    assert "# Comparison" in out and "# Search" in out and "# One search in full" in out
    assert out.count("/2") >= len(bench.SCENARIOS) + len(bench.SEARCH_CASES)
