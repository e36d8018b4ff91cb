"""``python -m ipsec_hil.lab.decision.bench``: what the rules cost and how often they are right.

Why a bench and not only tests: the tests assert the floors the issue sets (>= 19 of 20);
this prints the actual rates and the search's cost in trials and traffic seconds, for the
trial counts and durations we recommend, so a change of a default can be judged by numbers.
The scenarios and cases live here so the tests (tests/decision) check exactly these.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ipsec_hil.lab.decision.compare import (
    CANDIDATE,
    PARENT,
    RECOMMENDED_PAIRS,
    Verdict,
    compare,
    interleaved_schedule,
    split_trials,
)
from ipsec_hil.lab.decision.jumpavg import compare_jumpavg
from ipsec_hil.lab.decision.search import Goal, SearchResult, search
from ipsec_hil.lab.decision.simulate import SimulatedDut, simulated_trials

REL_SD = 0.03  # per-trial relative noise of a rate on the bench (what the lab shows)


@dataclass(frozen=True)
class ComparisonScenario:
    """Simulated parent/candidate trials of one figure and the verdict the rule should give.

    ``schedule`` "abba" interleaves the builds; "sequential" runs every parent trial first
    (the unpaired, non-interleaved way a comparison to another run works). ``drift`` is the
    lab's total linear change over the run, ``walk_sd`` its per-trial random walk.
    """

    name: str
    candidate_ratio: float
    expected: Verdict
    drift: float = -0.05
    walk_sd: float = 0.005
    schedule: str = "abba"
    paired: bool = True


SCENARIOS = (
    ComparisonScenario("20 % slower candidate, interleaved, paired", 0.80, Verdict.REGRESSION),
    ComparisonScenario("identical builds, interleaved, paired", 1.00, Verdict.NO_CHANGE),
    ComparisonScenario("20 % faster candidate, interleaved, paired", 1.20, Verdict.PROGRESSION),
    ComparisonScenario("10 % slower candidate, interleaved, paired", 0.90, Verdict.REGRESSION),
    ComparisonScenario("identical, lab drifts -20 %, interleaved, paired", 1.00, Verdict.NO_CHANGE, drift=-0.20),
    ComparisonScenario(
        "identical, lab drifts -20 %, sequential, unpaired", 1.00, Verdict.NO_CHANGE, drift=-0.20,
        schedule="sequential", paired=False,
    ),
)


RULES = ("bootstrap", "jumpavg")


def scenario_verdicts(
    scenario: ComparisonScenario,
    *,
    pairs: int = RECOMMENDED_PAIRS,
    repetitions: int = 20,
    seed: int = 0,
    rule: str = "bootstrap",
) -> list[Verdict]:
    """The rule's verdict on ``repetitions`` independent simulated comparisons.

    ``rule`` "bootstrap" is the gate's rule (:func:`compare`); "jumpavg" the alternative
    (:func:`compare_jumpavg`, which ignores pairing), on the very same simulated trials.
    """
    if rule not in RULES:
        raise ValueError(f"rule: expected one of {RULES}, found {rule!r}")
    rng = np.random.default_rng(seed)
    if scenario.schedule == "sequential":
        schedule: Sequence[str] = [PARENT] * pairs + [CANDIDATE] * pairs
    else:
        schedule = interleaved_schedule(pairs, scenario.schedule)
    verdicts = []
    for _ in range(repetitions):
        trials = simulated_trials(
            rng, schedule, candidate_ratio=scenario.candidate_ratio, rel_sd=REL_SD,
            drift=scenario.drift, walk_sd=scenario.walk_sd,
        )
        parent, candidate = split_trials(trials)
        if rule == "jumpavg":
            verdicts.append(compare_jumpavg(scenario.name, parent, candidate).verdict)
        else:
            verdicts.append(compare(scenario.name, parent, candidate, paired=scenario.paired).verdict)
    return verdicts


@dataclass(frozen=True)
class SearchCase:
    """A simulated DUT, the goals searched on it, and the search's keyword arguments."""

    name: str
    dut: Callable[[int], SimulatedDut]
    goals: tuple[Goal, ...]
    options: dict[str, float] = field(default_factory=dict)


#: NDR robust to a stray packet: decided by 2 of 3 final trials (exceed ratio 0.5)
ROBUST_NDR = Goal("NDR", 0.0, width=0.01, exceed_ratio=0.5, duration_sum=3.0)
GOALS = (Goal("NDR", 0.0, width=0.01), Goal("PDR", 0.005, width=0.01))
SEARCH_OPTIONS = {"max_rate": 1e6, "min_rate": 1e4, "final_duration": 1.0, "initial_duration": 0.25, "phases": 1}

SEARCH_CASES = (
    SearchCase("sharp knee at 63 % of max", lambda s: SimulatedDut("sharp", knee=6.3e5, seed=s), GOALS),
    SearchCase("sharp knee at 4.7 % of max", lambda s: SimulatedDut("sharp", knee=4.7e4, seed=s), GOALS),
    SearchCase(
        "livelock knee at 63 % (forwards 26 % at max)", lambda s: SimulatedDut("livelock", knee=6.3e5, seed=s), GOALS
    ),
    SearchCase(
        "sharp knee at 63 % + 20 ms buffer", lambda s: SimulatedDut("sharp", knee=6.3e5, buffer=12600, seed=s), GOALS
    ),
    SearchCase("gradual loss from 40 %", lambda s: SimulatedDut("gradual", knee=4e5, full_loss_at=1.2e6, seed=s), GOALS),
    SearchCase(
        "sharp knee + stray packet (p=0.05), robust NDR",
        lambda s: SimulatedDut("sharp", knee=6.3e5, one_packet_loss=0.05, seed=s),
        (ROBUST_NDR, GOALS[1]),
    ),
    SearchCase(
        "sharp knee + stray packet (p=0.05), strict NDR",
        lambda s: SimulatedDut("sharp", knee=6.3e5, one_packet_loss=0.05, seed=s),
        GOALS,
    ),
    SearchCase("never loses", lambda s: SimulatedDut("lossless", seed=s), GOALS),
)


def run_case(case: SearchCase, seed: int = 0) -> tuple[SearchResult, SimulatedDut]:
    dut = case.dut(seed)
    return search(dut, goals=case.goals, **{**SEARCH_OPTIONS, **case.options}), dut


def brackets(result: SearchResult, dut: SimulatedDut) -> dict[str, bool]:
    """Per goal: do the proved bounds hold the DUT's true rate, at the goal width?"""
    out = {}
    for g in result.goals:
        true = dut.true_rate(g.goal.loss_ratio, result.final_duration)
        if g.upper_bound is None:  # max_rate met the goal: true rate must be at least that
            out[g.goal.name] = g.lower_bound is not None and true >= g.lower_bound
            continue
        lo_ok = g.lower_bound is None or g.lower_bound <= true * (1 + 1e-9)
        hi_ok = true <= g.upper_bound * (1 + 1e-9)
        out[g.goal.name] = lo_ok and hi_ok and g.width_reached
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--pairs", type=int, nargs="*", default=[3, 4, RECOMMENDED_PAIRS, 10])
    args = parser.parse_args(argv)
    reps = args.repetitions
    for rule in RULES:
        print(f"# Comparison ({rule}): expected verdict in {reps} repetitions, trial noise "
              f"{REL_SD:.0%} relative sd (both rules see the same trials; jumpavg ignores pairing)")
        print(f"{'scenario':66} " + " ".join(f"{p:>2} pairs, unresolved" for p in args.pairs))
        for sc in SCENARIOS:
            counts = [Counter(scenario_verdicts(sc, pairs=p, repetitions=reps, rule=rule)) for p in args.pairs]
            print(f"{sc.name + ' -> ' + sc.expected.value:66} "
                  + " ".join(f"{c[sc.expected]:>5}/{reps}, {c[Verdict.UNRESOLVED]:>10}" for c in counts))
        print()
    print(f"# Search: {reps} seeds per case; options {SEARCH_OPTIONS}")
    print(f"{'case':50} {'trials min/mean/max':>20} {'traffic s mean':>15} {'bracketed':>12}")
    for case in SEARCH_CASES:
        counts, times, good = [], [], 0
        for seed in range(reps):
            result, dut = run_case(case, seed)
            counts.append(result.trial_count)
            times.append(result.trial_time)
            good += all(brackets(result, dut).values())
        print(f"{case.name:50} {min(counts):>6}/{np.mean(counts):>5.1f}/{max(counts):>5} "
              f"{np.mean(times):>15.1f} {good:>8}/{reps}")
    shown = next(c for c in SEARCH_CASES if c.name.startswith("gradual"))
    result, dut = run_case(shown)
    print(f"\n# One search in full ({shown.name}; true NDR {dut.true_rate(0):.6g}, "
          f"true PDR {dut.true_rate(0.005):.6g})")
    for line in result.summary():
        print("  " + line)
    for t in result.trials:
        print(f"  #{t.index:<2} {t.role:8} phase {t.phase:>2} load {t.load:>12.1f} "
              f"{t.result.duration:5.2f} s loss {t.loss_ratio:.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
