"""The paired verdict rule on simulated interleaved trials (3 % noise, drifting lab)."""

from __future__ import annotations

import numpy as np
import pytest

from ipsec_hil.lab.measuring.baseline import NOISE_FLOOR, NOISE_STDEVS
from ipsec_hil.lab.decision.bench import SCENARIOS, scenario_verdicts
from ipsec_hil.lab.decision.compare import (
    CANDIDATE,
    PARENT,
    RECOMMENDED_PAIRS,
    Direction,
    FigureTrials,
    Rule,
    Verdict,
    compare,
    compare_trials,
    interleaved_schedule,
    split_trials,
)
from ipsec_hil.lab.decision.errors import DecisionError
from ipsec_hil.lab.decision.simulate import simulated_trials


def _scenario(name_start: str):
    return next(s for s in SCENARIOS if s.name.startswith(name_start))


def test_real_20_percent_regression_caught_19_of_20():
    sc = _scenario("20 % slower")
    verdicts = scenario_verdicts(sc, pairs=RECOMMENDED_PAIRS, repetitions=20, seed=1)
    assert sum(v is Verdict.REGRESSION for v in verdicts) >= 19, verdicts


NOT_A_CHANGE = (Verdict.NO_CHANGE, Verdict.UNRESOLVED)


def test_identical_builds_no_change_19_of_20():
    """No false alarm in 19 of 20; "no change" only where the interval proves +-5 % (13 of
    20 at 6 pairs of 3 % noise), the rest unresolved -- once counted as "no change" too."""
    sc = _scenario("identical builds")
    verdicts = scenario_verdicts(sc, pairs=RECOMMENDED_PAIRS, repetitions=20, seed=2)
    assert sum(v in NOT_A_CHANGE for v in verdicts) >= 19, verdicts
    assert sum(v is Verdict.NO_CHANGE for v in verdicts) >= 10, verdicts


def test_20_percent_faster_is_progression():
    verdicts = scenario_verdicts(_scenario("20 % faster"), repetitions=20, seed=3)
    assert sum(v is Verdict.PROGRESSION for v in verdicts) >= 19, verdicts


def test_drift_fools_sequential_unpaired_but_not_interleaved_paired():
    paired = scenario_verdicts(_scenario("identical, lab drifts -20 %, interleaved"), repetitions=20, seed=4)
    unpaired = scenario_verdicts(_scenario("identical, lab drifts -20 %, sequential"), repetitions=20, seed=4)
    assert sum(v in NOT_A_CHANGE for v in paired) >= 19, paired
    assert sum(v is Verdict.NO_CHANGE for v in paired) >= 10, paired
    # the same drift, measured parent-first and compared unpaired, reads as a regression in
    # most comparisons (bench: 13-19 of 20 depending on the seed; the floor is half)
    assert sum(v is Verdict.REGRESSION for v in unpaired) >= 10, unpaired


def test_pairing_narrows_the_interval_under_drift():
    """On the same interleaved trials, the paired interval is narrower than the unpaired one."""
    rng = np.random.default_rng(5)
    narrower = 0
    for _ in range(20):
        trials = simulated_trials(rng, interleaved_schedule(6), candidate_ratio=0.9, drift=-0.2, walk_sd=0.02)
        p, c = split_trials(trials)
        a, b = compare("rate", p, c), compare("rate", p, c, paired=False)
        narrower += (a.ci_high - a.ci_low) < (b.ci_high - b.ci_low)
    assert narrower >= 18


def test_verdict_carries_effect_interval_rule_and_counts():
    p = [1000.0, 990.0, 1010.0, 1005.0, 995.0, 1000.0]
    c = [800.0, 795.0, 805.0, 802.0, 798.0, 800.0]
    result = compare("udp rate", p, c, unit="Mbit/s")
    assert result.verdict is Verdict.REGRESSION
    assert result.ratio == pytest.approx(sum(c) / sum(p))
    assert result.ci_low <= result.ratio <= result.ci_high < 0.95
    assert (result.n_parent, result.n_candidate) == (6, 6)
    assert result.rule == Rule() and result.paired
    line = result.summary()
    assert "regression" in line and "6 pairs" in line and "+-5%" in line and "0.800" in line
    assert result.to_dict()["verdict"] == "regression"


def test_reproducible_with_the_same_seed_and_different_with_another():
    p = [1000, 970, 1020, 990, 1010, 985]
    c = [960, 990, 950, 1000, 940, 975]
    assert compare("x", p, c) == compare("x", p, c)
    other = compare("x", p, c, rule=Rule(seed=99))
    assert (other.ci_low, other.ci_high) != (compare("x", p, c).ci_low, compare("x", p, c).ci_high)


def test_lower_is_better_mirrors_the_verdict():
    latency_parent = [100.0, 101.0, 99.0, 100.0, 100.5, 99.5]
    latency_candidate = [x * 1.3 for x in latency_parent]
    slower = compare("latency", latency_parent, latency_candidate, direction=Direction.LOWER_IS_BETTER)
    assert slower.verdict is Verdict.REGRESSION
    faster = compare("latency", latency_candidate, latency_parent, direction=Direction.LOWER_IS_BETTER)
    assert faster.verdict is Verdict.PROGRESSION


def test_equivalence_proved_only_when_the_interval_is_inside_the_band():
    p = [1000.0, 1001.0, 999.0, 1000.0, 1000.0, 1000.0]
    tight = compare("x", p, [v * 1.01 for v in p])
    assert tight.verdict is Verdict.NO_CHANGE and tight.equivalence_proved
    wide = compare("x", p, [1000.0, 1200.0, 850.0, 1000.0, 1150.0, 880.0])
    assert wide.verdict is Verdict.UNRESOLVED and not wide.equivalence_proved
    words = f"unresolved: candidate/parent between {wide.ci_low:.3f} and {wide.ci_high:.3f}"
    assert wide.summary().startswith(f"x: {words} (the interval crosses 1 +- 5 %: more trials needed)")


def test_compare_trials_pairs_by_order_and_schedules():
    assert interleaved_schedule(2) == (PARENT, CANDIDATE, CANDIDATE, PARENT)
    assert interleaved_schedule(2, "alternate") == (PARENT, CANDIDATE, PARENT, CANDIDATE)
    trials = list(zip(interleaved_schedule(3), [10.0, 8.0, 8.1, 10.1, 9.9, 7.9]))
    assert split_trials(trials) == ([10.0, 10.1, 9.9], [8.0, 8.1, 7.9])
    assert compare_trials(FigureTrials("x", trials)).verdict is Verdict.REGRESSION


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: compare("rate", [1, 2, 3, 4], [1, 2, 3]), "4 parent and 3 candidate"),
        (lambda: compare("rate", [1, 0, 3], [1, 2, 3]), "rate: parent[1]"),
        (lambda: compare("rate", [1, 2, 3], [1, float("nan"), 3]), "rate: candidate[1]"),
        (lambda: compare("rate", [1, 2], [1, 2]), "Rule.min_pairs"),
        (lambda: compare("", [1, 2, 3], [1, 2, 3]), "figure"),
        (lambda: Rule(threshold=1.5), "Rule.threshold"),
        (lambda: Rule(confidence=0.2), "Rule.confidence"),
        (lambda: Rule(resamples=10), "Rule.resamples"),
        (lambda: split_trials([("parent", 1.0), ("other", 2.0)]), "trials[1].role"),
        (lambda: split_trials([("parent", 1.0)]), "1 parent and 0 candidate"),
        (lambda: interleaved_schedule(2, "zigzag"), "scheme"),
    ],
)
def test_bad_input_names_the_parameter(call, fragment):
    with pytest.raises(DecisionError) as info:
        call()
    assert fragment in str(info.value)


def test_unpaired_rule_for_baseline_repeats_across_days():
    """Baseline repeats from another day are not pairs: the unpaired rule takes them, and it
    agrees with ipsec_hil.lab.measuring.baseline's noise rule on a clear case of each kind."""
    baseline_repeats = [940.0, 950.0, 945.0]
    today = [760.0, 755.0, 765.0, 758.0]
    mean = sum(baseline_repeats) / 3
    noise = max(NOISE_STDEVS * float(np.std(baseline_repeats, ddof=1)), NOISE_FLOOR * mean)
    assert sum(today) / 4 < mean - noise  # baseline.py says regression
    assert compare("rate", baseline_repeats, today, paired=False).verdict is Verdict.REGRESSION
    same = [944.0, 948.0, 941.0, 947.0]
    assert abs(sum(same) / 4 - mean) < noise  # baseline.py says ok
    assert compare("rate", baseline_repeats, same, paired=False).verdict is Verdict.NO_CHANGE
