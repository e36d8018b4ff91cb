"""A comparison states what it judged: a change within the run's own same-build noise is
"not judged", with the reason, and stays out of the run's verdict (issue 42).

Unit-level data shaped like the slow-candidate run of tests/decision_e2e/test_parent_vs_candidate.py
(4 pairs, abba order, 20 Mbit/s links): the "up" stream is paced by the 20 % slower build
(back-to-back trials of one build within 1-2 %), the "down" stream is CPU-bound (one build's
back-to-back trials ~18 % apart) and its pairs happen to read x0.86: a tight bootstrap
interval below 0.95, which the interval rule alone calls a regression.
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.decision.compare import (CANDIDATE, PARENT, FigureTrials, Verdict, compare_trials, interleaved_schedule,
                                         same_build_noise)

ORDER = interleaved_schedule(4)  # P C C P P C C P


def trials(values: list[float], order: tuple[str, ...] = ORDER) -> list[tuple[str, float]]:
    assert len(values) == len(order)
    return list(zip(order, values))


UP = trials([20.0, 16.1, 16.0, 19.9, 20.1, 16.2, 16.0, 20.0])
DOWN = trials([50.0, 40.0, 47.0, 52.0, 44.0, 38.0, 45.0, 51.0])


def test_a_change_larger_than_the_noise_is_judged():
    c = compare_trials(FigureTrials("1 TCP stream up, 2 s", UP, unit="Mbit/s"))
    assert c.verdict is Verdict.REGRESSION and c.reason is None, c.summary()
    assert same_build_noise(UP) < 0.02 < abs(c.ratio - 1)


def test_a_change_within_the_same_build_noise_is_not_judged_and_says_why():
    c = compare_trials(FigureTrials("1 TCP stream down, 2 s", DOWN, unit="Mbit/s"))
    noise = same_build_noise(DOWN)
    assert c.ci_high < 1 - c.rule.threshold, "the interval alone reads a regression: the case this rule is for"
    assert c.verdict is Verdict.NOT_JUDGED, (
        f"a x{c.ratio:.3f} change with back-to-back trials of one build {noise:.1%} apart was judged: {c.summary()}")
    assert c.reason and f"{abs(c.ratio - 1):.1%}" in c.reason and f"{noise:.1%}" in c.reason, c.reason
    assert "not judged" in c.summary() and c.to_dict()["verdict"] == "not judged"


def test_the_runs_verdict_leaves_the_unjudged_figure_out(tmp_path):
    from ipsec_hil.lab.comparing.build_comparison import BuildComparison, Builds

    run = BuildComparison("xgs3300", "lab-v4in4-gcm", Builds("xgs3300", tmp_path / "p.ko", tmp_path / "c.ko"), 4, 2.0,
                          comparisons=[compare_trials(FigureTrials("up", UP)), compare_trials(FigureTrials("down", DOWN))])
    assert [c.figure for c in run.regressions] == ["up"], [c.summary() for c in run.comparisons]


def test_no_same_build_neighbours_no_noise_figure():
    """The alternate order never runs a build twice in a row: nothing to measure the noise
    with, so the interval rule decides alone."""
    alt = interleaved_schedule(4, "alternate")
    noisy = trials([50.0, 40.0, 52.0, 47.0, 44.0, 38.0, 51.0, 45.0], alt)
    assert same_build_noise(noisy) is None
    assert compare_trials(FigureTrials("down", noisy)).verdict is Verdict.REGRESSION


def test_progressions_within_the_noise_are_not_judged_either():
    c = compare_trials(FigureTrials("down", trials([40.0, 50.0, 44.0, 38.0, 45.0, 51.0, 45.0, 40.0])))
    assert c.verdict is Verdict.NOT_JUDGED and "progression" in (c.reason or ""), c.summary()


@pytest.mark.parametrize("pair", [[(PARENT, 10.0), (PARENT, 0.0)], [(CANDIDATE, 0.0), (CANDIDATE, 5.0)]])
def test_a_zero_trial_is_infinite_noise(pair):
    assert same_build_noise(pair) == float("inf")
