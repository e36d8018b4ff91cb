"""Replay (ipsec_hil.lab.decision.replay, issue 54): the vectorised looks decide as
sequential_look does, pair by pair; Wilson intervals; pools from recorded trials; a shifted
pool finds its shift."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ipsec_hil.lab.decision.compare import CANDIDATE, PARENT, Direction, FigureTrials, Verdict, interleaved_schedule
from ipsec_hil.lab.decision.replay import decide_many, pair_log_ratios, replay, wilson
from ipsec_hil.lab.decision.sequential import SequentialRule, sequential_look


def trials_of(d: list[float]) -> list[tuple[str, float]]:
    """abba trials whose pairs have log ratios ``d`` (parent 100, candidate 100 e^d)."""
    out, it = [], iter(d)
    for i, role in enumerate(interleaved_schedule(len(d))):
        if i % 2 == 0:
            x = next(it)
        out.append((role, 100.0 if role == PARENT else 100.0 * math.exp(x)))
    return out


@pytest.mark.parametrize("direction", [Direction.HIGHER_IS_BETTER, Direction.LOWER_IS_BETTER])
def test_the_replayed_looks_decide_as_sequential_look_does(direction):
    rule = SequentialRule()
    rng = np.random.default_rng(3)
    d = np.concatenate([rng.normal(shift, sd, size=(40, rule.max_pairs))
                        for shift, sd in ((0.0, 0.005), (-0.06, 0.02), (0.06, 0.02), (0.0, 0.04), (-0.03, 0.01))])
    got = decide_many(d, rule, direction)
    for row, verdict, pairs in zip(d, got.verdicts, got.pairs):
        for k in range(rule.min_pairs, rule.max_pairs + 1):
            look = sequential_look(FigureTrials("x", trials_of(list(row[:k])), direction=direction, unit="u"), rule=rule)
            if look.decided or k == rule.max_pairs:
                assert (verdict, pairs) == (look.comparison.verdict.value, k), (list(row[:k]), look.reason)
                break


def test_wilson_intervals_are_the_textbook_ones():
    assert wilson(19, 20) == pytest.approx((0.7639, 0.9911), abs=1e-4)
    assert wilson(20, 20) == pytest.approx((0.8389, 1.0), abs=1e-4)
    assert wilson(0, 40) == pytest.approx((0.0, 0.0876), abs=1e-4)
    lo, hi = wilson(3800, 4000)
    assert hi - lo < 0.015  # "to a percent"


def test_pools_come_from_recorded_trials_in_measurement_order():
    d = [0.01, -0.02, 0.005, 0.0]
    assert pair_log_ratios(trials_of(d)) == pytest.approx(d)
    assert pair_log_ratios([[CANDIDATE, 110.0], [PARENT, 100.0]]) == pytest.approx([math.log(1.1)])


def test_a_pool_shifted_by_five_percent_is_found_and_an_unshifted_one_is_not():
    rule = SequentialRule()
    pool = list(np.random.default_rng(1).normal(0.0, 0.01, 60))
    found = replay(pool, rule, Direction.HIGHER_IS_BETTER, shift=math.log(0.95), runs=2000)
    assert found.rate(Verdict.REGRESSION) > 0.99
    same = replay(pool, rule, Direction.HIGHER_IS_BETTER, runs=2000)
    assert same.count(Verdict.REGRESSION) + same.count(Verdict.PROGRESSION) <= 0.05 * 2000
    costlier = replay(pool, rule, Direction.LOWER_IS_BETTER, shift=-math.log(0.95), runs=2000)
    assert costlier.rate(Verdict.REGRESSION) > 0.99


def _record(kind, level, d_by_figure: dict[str, list[float]], seconds_per_pair: float = 20.0) -> dict:
    """A decision as tools/decision-power records it (its trials in measurement order)."""
    from dataclasses import asdict

    from ipsec_hil.lab.comparing.decision_power import Decision

    pairs = max(len(v) for v in d_by_figure.values())
    seq = {}
    for f, d in d_by_figure.items():
        mean = float(np.mean(d))
        verdict = "regression" if kind == f and abs(mean) > 0.03 else "no change"
        seq[f] = {"verdict": verdict, "ratio": math.exp(mean), "ci": [0.9, 1.1], "equivalence_proved": False,
                  "pairs": len(d)}
    return asdict(Decision("x", kind, level, pairs, seconds_per_pair * pairs, 0.0, sequential=seq,
                           trials={f: [list(t) for t in trials_of(d)] for f, d in d_by_figure.items()}))


def test_the_power_curve_and_the_live_check_from_recorded_decisions():
    """tools/decision-power --replay on its JSON lines: the identical builds' pairs shifted to
    each level give the curve (detection rising to ~1 at 0.95 for a 1 % pair spread, the
    false alarms at 1.00 near 0), a decision's lab time from the live seconds a pair, and
    each live scenario's count against it."""
    from ipsec_hil.lab.decision.replay import curve_lines, live_check, power_curve

    rng = np.random.default_rng(5)
    directions = {"up": Direction.HIGHER_IS_BETTER, "cpu": Direction.LOWER_IS_BETTER}
    records = [_record(None, 1.0, {"up": list(rng.normal(0, 0.004, 4)), "cpu": list(rng.normal(0, 0.01, 8))})
               for _ in range(6)]
    records += [_record("cpu", 0.95, {"cpu": list(rng.normal(-math.log(0.95), 0.01, 6))}) for _ in range(5)]
    rule = SequentialRule()
    curve = power_curve(records, rule, directions, runs=1000)
    by = {(r["figure"], r["level"]): r for r in curve}
    assert by[("cpu", 0.95)]["regression"][0] > 0.95 and by[("up", 0.95)]["regression"][0] > 0.95
    assert by[("cpu", 1.0)]["regression"][0] + by[("cpu", 1.0)]["progression"][0] < 0.05
    assert by[("cpu", 0.99)]["regression"][0] < by[("cpu", 0.95)]["regression"][0]
    assert by[("cpu", 0.95)]["median_s"] == pytest.approx(20.0 * by[("cpu", 0.95)]["median_pairs"])
    lines = curve_lines(curve)
    assert len(lines) == 2 + 2 * 11 and lines[2].startswith("| up | 0.90 |")
    live = live_check(records, rule, directions, runs=1000)
    row = next(x for x in live if x.startswith("| cpu x0.95 |"))
    assert "| 5 | 5/5 [57%, 100%] |" in row and row.endswith("| yes |"), row
    assert any(x.startswith("| identical (up) |") for x in live)


def test_the_recorded_live_set_replays_to_the_targets_docs_design_quotes():
    """tests/decision/recorded/decision-power-54.jsonl (issue 54's bounded live set, 8 s trials):
    replayed, rate x0.95 and CPU x0.95 found in >= 95 % of decisions, identical builds' false
    alarms <= 5 %, a decision's p95 lab time <= 10 minutes -- the figures DESIGN.md's power
    table states (there with 4,000 decisions a row)."""
    import json
    from pathlib import Path

    from ipsec_hil.lab.decision.replay import power_curve

    path = Path(__file__).parent / "recorded" / "decision-power-54.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    directions = {"up": Direction.HIGHER_IS_BETTER, "cpu": Direction.LOWER_IS_BETTER}
    by = {(r["figure"], r["level"]): r for r in power_curve(records, SequentialRule(), directions, runs=1000,
                                                            levels=(0.95, 1.0))}
    for f in directions:
        assert by[(f, 0.95)]["regression"][1] >= 0.95, by[(f, 0.95)]  # the Wilson interval's low end
        alarms = by[(f, 1.0)]["regression"][0] + by[(f, 1.0)]["progression"][0]
        assert alarms <= 0.05 and by[(f, 1.0)]["other_figures_alarm"] <= 0.05
        assert by[(f, 0.95)]["p95_s"] <= 600 and by[(f, 1.0)]["p95_s"] <= 600
