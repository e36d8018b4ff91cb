"""Candidate against parent: the per-run verdict on one figure from interleaved trials.

Why this rule (the one the gate states on its page):

* The lab drifts (temperature, a busy bench, a neighbour on a shared host). A comparison
  against a baseline saved another day (``ipsec_hil.lab.measuring.baseline``) cannot tell drift from a
  driver change. So the run measures both builds *today, in alternation* (parent,
  candidate, candidate, parent, ... -- see :func:`interleaved_schedule`) and pairs the
  i-th parent trial with the i-th candidate trial: both members of a pair saw the same lab
  state, so the drift is common to them and drops out of their ratio.
* Effect size: ``ratio = mean(candidate) / mean(parent)`` (the **ratio of means**; a
  ratio because a driver change scales a rate, means because every trial moved the same
  number of bytes and a median of 6 values wastes information).
* Interval: a **paired bootstrap** percentile interval of that ratio -- resample whole
  *pairs* with replacement (``resamples`` times, numpy generator seeded with ``seed``
  so a run is reproducible), recompute the ratio, take the ``(1-confidence)/2`` and
  ``(1+confidence)/2`` quantiles. Resampling pairs keeps the drift inside each resample
  (both members move together), so the interval is as narrow as the pairing allows.
* Verdict with a **practical-equivalence threshold** ``t`` (default 5 %,
  :func:`interval_verdict`): for a higher-is-better figure, *regression* when the whole
  interval lies below ``1 - t``, *progression* when it lies wholly above ``1 + t``, *no
  change* when it lies wholly inside ``[1 - t, 1 + t]`` (equivalence proved), and
  *unresolved* when it crosses ``1 - t`` or ``1 + t`` (mirrored for lower-is-better figures).
  A "regression" therefore blocks a merge only when it is both real (outside the noise) and
  large enough to matter (beyond ``t``): the claim on the page is "slower by at least t, at
  95 % confidence". "No change" is the mirror claim, "within t, at 95 % confidence", and is
  said only when the interval proves it. Why *unresolved* is a verdict of its own: it used
  to be a "no change" with ``equivalence_proved`` false, and a CPU figure at x1.041 [1.019,
  1.063] -- shown to cost more, not shown to cost more than the threshold -- was summarised
  as "no regression" and exited 0 (issue 54). An unresolved figure reads "unresolved:
  candidate/parent between 1.019 and 1.063" (:meth:`Comparison.answer`) and the run exits
  ``COMPARISON_UNRESOLVED``: more trials are needed, and that is not a pass.

Alternative considered: FD.io CSIT's per-patch comparison runs parent and current builds
alternately too, then groups the concatenated samples with its ``jumpavg`` model (minimum
description length: is one group of samples cheaper to encode than two groups with a jump
between them?) and calls a regression or progression when two groups win. It needs no
threshold, but its answer comes with no interval and no effect size bound a reader can
check against the page's figure, and with the 5-10 samples per build a lab run can afford
the bit-count decision is hard to explain in one line. The bootstrap rule gives the
number the page prints ("0.80 [0.79, 0.81]") and the rule in one sentence.

A change within the lab's own noise is **not judged** (:func:`compare_trials`). The
interval above says whether the *pairs* moved; it cannot say whether the lab would have
moved as much without a build change. Interleaving answers that for free: in the abba
order each build runs twice in a row at every pair boundary (parent, candidate |
candidate, parent | parent, ...), and two back-to-back trials of the *same* build differ
only by the lab's noise. When a figure's regression or progression is no larger than the
largest such same-build difference (:func:`same_build_noise`), the verdict is
``not judged`` and the comparison says why (``reason``), with both numbers: the run's verdict
(the exit status, "REGRESSION in N figure(s)") leaves the figure out rather than blame or
credit the build with noise. Why: on the virtual lab the "down" TCP stream of a candidate
20 % slower at encrypting is CPU-bound on two shared cores; it measured x1.10, x1.00 and
x0.87 in three runs (tests/decision_e2e/test_parent_vs_candidate.py), its back-to-back
same-build trials as far apart, and a tight interval around x0.87 read as a "regression"
of a build that does not touch that figure's bottleneck. A figure a build really changes
by more than the lab's noise is judged as before (the 20 % slower "up" stream: paced,
same-build trials within a few %). Noise larger than the threshold but smaller than the
effect does not hide the effect.

``compare(..., paired=False)`` resamples the two sides independently: it is the rule for samples
that were *not* measured in pairs (e.g. baseline repeats from another day); on interleaved
trials it is the weaker test (drift widens its interval -- see tests/decision).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import numpy as np  # imported where used: 85 ms, and every pytest run with the plugin imports this module

from ipsec_hil.lab.decision.errors import DecisionError, bad

PARENT = "parent"
CANDIDATE = "candidate"

#: pairs per figure we recommend. The bench (3 % trial noise, drifting lab, 20 repetitions):
#: with 6 pairs a 20 % regression is caught 20/20, identical builds give "no change" 20/20,
#: a 10 % regression is caught 18/20 (3 pairs: 20/20, 20/20, 14/20). 6 rather than 3: a
#: percentile bootstrap of 3 pairs has only 10 distinct resamples and undercovers.
RECOMMENDED_PAIRS = 6


class Direction(str, Enum):
    """Which way is better for a figure (a rate: higher; a latency: lower)."""

    HIGHER_IS_BETTER = "higher is better"
    LOWER_IS_BETTER = "lower is better"


@dataclass(frozen=True)
class FigureTrials:
    """One figure's interleaved trials as every decision takes them: the figure's name, its
    ``(role, value)`` pairs in measurement order, which way is better and its unit.

    Why one object: :func:`compare_trials`, ``sequential.sequential_look`` and
    ``sequential.replay_looks`` each took these four apart, with a copy of the same
    signature; a figure's trials are one thing a run measures and hands on."""

    figure: str
    trials: Sequence[tuple[str, float]]
    direction: Direction = Direction.HIGHER_IS_BETTER
    unit: str = ""


class Verdict(str, Enum):
    REGRESSION = "regression"
    PROGRESSION = "progression"
    #: equivalence proved: the interval lies wholly inside the threshold's band (jumpavg, the
    #: alternative rule with no interval: one group of samples was the cheaper description)
    NO_CHANGE = "no change"
    #: the interval crosses the threshold: neither a change nor its absence is proved
    UNRESOLVED = "unresolved"
    #: the change is within the run's own same-build noise: left out of the verdict, with a reason
    NOT_JUDGED = "not judged"


@dataclass(frozen=True)
class Rule:
    """The parameters of the verdict rule; printed with every verdict so it can be checked."""

    threshold: float = 0.05
    confidence: float = 0.95
    resamples: int = 4000
    seed: int = 14
    min_pairs: int = 3

    def __post_init__(self) -> None:
        if not (isinstance(self.threshold, (int, float)) and 0.0 <= self.threshold < 1.0):
            raise bad("Rule.threshold", self.threshold, "a fraction in [0, 1), e.g. 0.05 for +-5 %")
        if not (isinstance(self.confidence, (int, float)) and 0.5 <= self.confidence < 1.0):
            raise bad("Rule.confidence", self.confidence, "a probability in [0.5, 1), e.g. 0.95")
        if not (isinstance(self.resamples, int) and self.resamples >= 200):
            raise bad("Rule.resamples", self.resamples, "an integer >= 200")
        if not isinstance(self.seed, int):
            raise bad("Rule.seed", self.seed, "an integer")
        if not (isinstance(self.min_pairs, int) and self.min_pairs >= 2):
            raise bad("Rule.min_pairs", self.min_pairs, "an integer >= 2")

    def describe(self) -> str:
        return (
            f"ratio of means, {self.confidence:.0%} bootstrap interval "
            f"({self.resamples} resamples, seed {self.seed}), equivalence +-{self.threshold:.0%}"
        )


@dataclass(frozen=True)
class Comparison:
    """The verdict on one figure, with everything needed to print and re-check it.

    ``ratio``/``ci_low``/``ci_high`` are candidate over parent (ratio of means);
    ``parent``/``candidate`` are the trial values in measurement order.
    """

    figure: str
    unit: str
    direction: Direction
    verdict: Verdict
    ratio: float
    ci_low: float
    ci_high: float
    paired: bool
    rule: Rule
    parent: tuple[float, ...]
    candidate: tuple[float, ...]
    #: why the verdict is ``not judged`` (None: judged); printed by :meth:`summary`
    reason: str | None = None
    #: the rule in words when ``rule.describe()`` is not how the interval was made (None: it is).
    #: Why: the sequential design (:mod:`.sequential`) reports a Student-t interval at a
    #: per-look level; its ``rule`` carries the threshold and that level for the plot and the
    #: JSON, but "bootstrap interval" on the page would be false.
    method: str | None = None

    @property
    def n_parent(self) -> int:
        return len(self.parent)

    @property
    def n_candidate(self) -> int:
        return len(self.candidate)

    @property
    def parent_mean(self) -> float:
        return sum(self.parent) / len(self.parent)

    @property
    def candidate_mean(self) -> float:
        return sum(self.candidate) / len(self.candidate)

    @property
    def equivalence_proved(self) -> bool:
        """The interval lies wholly inside ``[1 - t, 1 + t]``: what "no change" means, and only that."""
        return self.verdict is Verdict.NO_CHANGE

    @property
    def worse_than_parent(self) -> bool:
        """The interval excludes 1.00 on the worse side, whatever the verdict: the candidate
        was measured worse, by less than the threshold (no change), by an unknown amount
        (unresolved) or by no more than the lab's noise (not judged). The run's answer never
        calls such a figure "no regression" (issue 54)."""
        return self.ci_high < 1.0 if self.direction is Direction.HIGHER_IS_BETTER else self.ci_low > 1.0

    def answer(self) -> str:
        """The verdict in the words of the run's answer, the page's first screen and the JSON:
        an unresolved figure with the interval it is unresolved between, so nobody reads it
        as a pass ("unresolved: candidate/parent between 1.019 and 1.063")."""
        if self.verdict is Verdict.UNRESOLVED:
            return f"unresolved: candidate/parent between {self.ci_low:.3f} and {self.ci_high:.3f}"
        return self.verdict.value

    def summary(self) -> str:
        """One line for the page: verdict, effect and interval, trial counts, rule."""
        how = f"{self.n_parent} pairs" if self.paired else f"{self.n_parent}+{self.n_candidate} unpaired"
        why = self.reason or (f"the interval crosses 1 +- {100 * self.rule.threshold:g} %: more trials needed"
                              if self.verdict is Verdict.UNRESOLVED else None)
        return (
            f"{self.figure}: {self.answer()}{f' ({why})' if why else ''}: candidate/parent = {self.ratio:.3f} "
            f"[{self.ci_low:.3f}, {self.ci_high:.3f}] ({self.direction.value}; {how}; "
            f"{self.method or self.rule.describe()})"
        )

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["direction"] = self.direction.value
        out["verdict"] = self.verdict.value
        out["answer"] = self.answer()
        out["equivalence_proved"] = self.equivalence_proved
        out["worse_than_parent"] = self.worse_than_parent
        out["parent"] = list(self.parent)
        out["candidate"] = list(self.candidate)
        return out


def interleaved_schedule(pairs: int, scheme: str = "abba") -> tuple[str, ...]:
    """The order in which to run the two builds for ``pairs`` pairs of trials.

    ``"abba"`` (default): parent, candidate, candidate, parent, parent, candidate, ... --
    the candidate runs second in odd pairs and first in even pairs, so a steady drift
    biases half the pairs one way and half the other and cancels in the mean.
    ``"alternate"``: parent, candidate, parent, candidate, ... -- the candidate is always
    one trial later, so a drift of d per trial biases the ratio by about d (small, but
    not zero). Pair i is trials 2i and 2i+1 in both schemes.
    """
    if not (isinstance(pairs, int) and pairs >= 1):
        raise bad("pairs", pairs, "an integer >= 1")
    if scheme not in ("abba", "alternate"):
        raise bad("scheme", scheme, "'abba' or 'alternate'")
    order: list[str] = []
    for i in range(pairs):
        flip = scheme == "abba" and i % 2 == 1
        order += [CANDIDATE, PARENT] if flip else [PARENT, CANDIDATE]
    return tuple(order)


def split_trials(trials: Iterable[tuple[str, float]]) -> tuple[list[float], list[float]]:
    """``[(role, value), ...]`` in measurement order -> (parent values, candidate values).

    The i-th parent and the i-th candidate value form pair i; the counts must match.
    """
    parent: list[float] = []
    candidate: list[float] = []
    for index, item in enumerate(trials):
        try:
            role, value = item
        except (TypeError, ValueError):
            raise bad(f"trials[{index}]", item, "a (role, value) pair") from None
        if role == PARENT:
            parent.append(value)
        elif role == CANDIDATE:
            candidate.append(value)
        else:
            raise bad(f"trials[{index}].role", role, f"{PARENT!r} or {CANDIDATE!r}")
    if len(parent) != len(candidate):
        raise DecisionError(
            f"trials: {len(parent)} parent and {len(candidate)} candidate trials; "
            "interleaved trials come in pairs (a lost trial drops its pair before comparing)"
        )
    return parent, candidate


def compare_trials(measured: FigureTrials, *, rule: Rule | None = None) -> Comparison:
    """The paired verdict from the figure's ``[(role, value), ...]`` in measurement order.

    A regression or progression no larger than :func:`same_build_noise` of the same trials
    is ``not judged``, with the reason (the module's docstring says why).
    """
    trials = list(measured.trials)
    parent, candidate = split_trials(trials)
    result = compare(measured.figure, parent, candidate, direction=measured.direction, unit=measured.unit, rule=rule)
    if result.verdict not in (Verdict.REGRESSION, Verdict.PROGRESSION):
        return result
    noise = same_build_noise(trials)
    effect = abs(result.ratio - 1.0)
    if noise is None or effect > noise:
        return result
    return replace(result, verdict=Verdict.NOT_JUDGED, reason=(
        f"not judged: the {result.verdict.value} by {effect:.1%} is no larger than two back-to-back trials of "
        f"the same build differed ({noise:.1%}): the lab's noise on this figure, not the build's"))


def same_build_noise(trials: Sequence[tuple[str, float]]) -> float | None:
    """The largest relative difference between two consecutive trials of the same build
    (``max / min - 1``), or None when no build ran twice in a row (the "alternate" order).

    In the abba order every pair boundary has one: what the lab alone varies by from one
    trial to the next, with no build change in between.
    """
    worst: float | None = None
    for (role_a, a), (role_b, b) in zip(trials, trials[1:]):
        if role_a != role_b:
            continue
        low, high = sorted((float(a), float(b)))
        d = math.inf if low <= 0 else high / low - 1.0
        worst = d if worst is None else max(worst, d)
    return worst


def compare(
    figure: str,
    parent: Sequence[float],
    candidate: Sequence[float],
    *,
    paired: bool = True,
    direction: Direction = Direction.HIGHER_IS_BETTER,
    unit: str = "",
    rule: Rule | None = None,
) -> Comparison:
    """The verdict on one figure; ``paired``: ``parent[i]`` and ``candidate[i]`` ran side by side.

    ``paired=False`` resamples each side on its own: the rule for samples not measured in
    pairs (baseline repeats from another day); on interleaved trials it is the weaker test.
    """
    rule = rule or Rule()
    p, c = _checked(figure, parent, candidate, rule, direction, paired=paired)
    low, high = _bootstrap_interval(p, c, rule, paired=paired)
    return Comparison(
        figure=figure,
        unit=unit,
        direction=direction,
        verdict=interval_verdict(low, high, rule.threshold, direction),
        ratio=float(c.mean() / p.mean()),
        ci_low=low,
        ci_high=high,
        paired=paired,
        rule=rule,
        parent=tuple(float(x) for x in p),
        candidate=tuple(float(x) for x in c),
    )


def interval_verdict(low: float, high: float, threshold: float, direction: Direction) -> Verdict:
    """The verdict an interval ``[low, high]`` of candidate/parent gives against ``+-threshold``.

    Wholly past ``1 -+ threshold`` on the worse side: regression; on the better side:
    progression; wholly inside ``[1 - threshold, 1 + threshold]``: no change (equivalence
    proved); across either edge: unresolved. The one rule both designs use (the fixed
    bootstrap here, :mod:`.sequential`'s looks), so they cannot disagree on what an interval means.
    """
    below, above = high < 1.0 - threshold, low > 1.0 + threshold
    worse, better = (below, above) if direction is Direction.HIGHER_IS_BETTER else (above, below)
    if worse:
        return Verdict.REGRESSION
    if better:
        return Verdict.PROGRESSION
    if 1.0 - threshold <= low and high <= 1.0 + threshold:
        return Verdict.NO_CHANGE
    return Verdict.UNRESOLVED


def _bootstrap_interval(p: np.ndarray, c: np.ndarray, rule: Rule, *, paired: bool) -> tuple[float, float]:
    """Percentile interval of mean(c)/mean(p) over ``rule.resamples`` seeded resamples."""
    import numpy as np

    rng = np.random.default_rng(rule.seed)
    ip = rng.integers(0, len(p), size=(rule.resamples, len(p)))
    # paired: the same indices for both sides, so every resample keeps whole pairs
    ic = ip if paired else rng.integers(0, len(c), size=(rule.resamples, len(c)))
    ratios = c[ic].mean(axis=1) / p[ip].mean(axis=1)
    alpha = 1.0 - rule.confidence
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def _checked(
    figure: str,
    parent: Sequence[float],
    candidate: Sequence[float],
    rule: Rule,
    direction: Direction,
    *,
    paired: bool,
) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    if not isinstance(figure, str) or not figure:
        raise bad("figure", figure, "a non-empty name")
    if not isinstance(rule, Rule):
        raise bad("rule", rule, "a decision.compare.Rule")
    if not isinstance(direction, Direction):
        raise bad(f"{figure}: direction", direction, "a decision.compare.Direction")
    arrays = []
    for side, values, floor_ok in ((PARENT, parent, False), (CANDIDATE, candidate, True)):
        try:
            arr = np.asarray([float(v) for v in values], dtype=float)
        except (TypeError, ValueError):
            raise bad(f"{figure}: {side}", values, "a sequence of numbers") from None
        for i, v in enumerate(arr):
            if not math.isfinite(v) or v < 0 or (v == 0 and not floor_ok):
                want = "a finite number >= 0" if floor_ok else "a finite number > 0 (the ratio's denominator)"
                raise bad(f"{figure}: {side}[{i}]", float(v), want)
        if len(arr) < rule.min_pairs:
            raise bad(f"{figure}: {side}", f"{len(arr)} trials", f">= {rule.min_pairs} trials (Rule.min_pairs)")
        arrays.append(arr)
    p, c = arrays
    if paired and len(p) != len(c):
        raise DecisionError(
            f"{figure}: {len(p)} parent and {len(c)} candidate trials; a paired comparison needs pairs"
        )
    return p, c
