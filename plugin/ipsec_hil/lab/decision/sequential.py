"""Sequential design (issue 41): add pairs until the interval decides, or the budget ends.

Why: :func:`.compare.compare_trials` judges a fixed number of pairs. A 20 % regression is
clear after 3 pairs and the lab's time on the other pairs is wasted; a 3 % one, or proving
that two builds are within +-2.5 % of each other, needs more pairs than a fixed design can
afford for every figure. So the caller measures a figure pair by pair and calls
:func:`sequential_look` after each complete pair (from ``min_pairs`` on); it stops
measuring that figure as soon as a look is ``decided``.

**The rule** (:class:`SequentialRule`: margin m = 2.5 %, confidence 95 %, looks after each
pair from 3 to 16 pairs). At a look with k pairs: the interval at the per-look level
``1 - (1 - confidence) / looks`` (99.64 % with 14 looks); for a higher-is-better figure
*regression* when the whole interval lies below ``1 - m``, *progression* when it lies wholly
above ``1 + m``, *no change* (equivalence proved) when it lies wholly inside
``[1 - m, 1 + m]`` (mirrored for lower-is-better figures: a CPU time per packet regresses
*upwards*; :func:`.compare.interval_verdict`, the fixed design's rule too). Otherwise the look
is *unresolved* and not decided -- unless k is the budget ``max_pairs``: then it is decided
as *unresolved* ("budget ended: unresolved"), a statement that no claim could be made,
never a pass in disguise (the run exits ``COMPARISON_UNRESOLVED``).

**The interval: paired Student t on per-pair log ratios.** For pair i,
``d_i = log(candidate_i / parent_i)``; the interval is ``exp(mean(d) +- t * sd(d) / sqrt(k))``
with ``t`` the ``(1 + level) / 2`` quantile of Student's t with k - 1 degrees of freedom
(:func:`t_quantile`, implemented here: scipy is not a dependency). It is an interval for
the **geometric mean ratio** candidate/parent. ``Comparison.ratio`` is still the ratio of
means, as :mod:`.compare` reports it (with trial noise of a few % the two differ by far
less than the interval's width). Why not compare.py's percentile bootstrap: at 99.6 % with
3-6 pairs it under-covers badly (3 pairs have 10 distinct resamples: its "99.6 %" interval
is the range of 10 numbers), so the error statement below would be false exactly where the
design stops early. The t interval is exact for normal log ratios at every k; log ratios
because the noise is multiplicative (a rate scales) and the ratio's interval then stays
positive and symmetric on the log scale. Pairs carry the lab's drift out of the ratio as in
compare.py; what is left of a linear drift in the abba order (+-one trial's drift,
alternating from pair to pair) is absorbed by ``sd(d)``.

**Error control, stated: <= 1 - confidence (5 %) per figure, for any stopping.** Let theta be
the true geometric mean ratio. Each look's interval misses theta with probability at most
``(1 - confidence) / looks``; by the union bound (Bonferroni) the chance that *any* of the
``looks`` intervals misses it is at most ``1 - confidence``. When every interval holds theta,
every verdict the design can reach is true (regression: theta < 1 - m; equivalence:
1 - m <= theta <= 1 + m; progression: theta > 1 + m), whichever look it stopped at. So the
probability of a wrong verdict on a figure -- a false regression, a false progression or a
false "no change proved" -- is at most 5 %, for this stopping rule and for any other the
caller might apply (stopping early, skipping looks, stopping because the lab is needed),
as long as it makes no more than ``looks`` looks: the looks are declared before the first
trial (``min_pairs`` .. ``max_pairs``) and :func:`sequential_look` refuses more pairs than the
budget. That is what "not peeking" means here: looking at 95 % after every pair would
give each look its own 5 % and a figure measured to 16 pairs up to 14 chances of a false
claim (the simulation, ``python -m ipsec_hil.lab.decision.sequential``, prints that rule's
error rate beside this one). Bonferroni is conservative: consecutive looks share most of
their pairs, so their misses are strongly correlated and the real rate is well below 5 %.
A group-sequential boundary (Pocock, O'Brien-Fleming) would spend the error less
wastefully, but its boundaries assume a known variance or need the joint distribution of
t statistics with k - 1 = 2..15 degrees of freedom; Bonferroni is valid without either and
checkable in one line on the page. The statement assumes independent, normal per-pair log
ratios with one variance; an outlying pair widens the interval (fewer decisions), and a
same-build noise larger than the effect (compare.py's "not judged") is not screened here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable, Sequence

from ipsec_hil.lab.decision.compare import (Comparison, Direction, FigureTrials, Rule, Verdict, interval_verdict,
                                             split_trials)
from ipsec_hil.lab.decision.errors import bad


@dataclass(frozen=True)
class SequentialRule:
    """The sequential design's parameters, declared before the first trial and printed with every look.

    ``margin``: equivalence margin, an interval wholly within ``[1 - margin, 1 + margin]`` is "no change";
    ``confidence``: family-wise over all looks of one figure (the error rate is <= 1 - confidence);
    ``min_pairs``: the first look; ``max_pairs``: the budget, the last look.
    """

    margin: float = 0.025
    confidence: float = 0.95
    min_pairs: int = 3
    max_pairs: int = 16

    def __post_init__(self) -> None:
        def number(x: object) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

        def integer(x: object) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        if not (number(self.margin) and 0.0 < self.margin < 1.0):
            raise bad("SequentialRule.margin", self.margin, "a fraction in (0, 1), e.g. 0.025 for +-2.5 %")
        if not (number(self.confidence) and 0.5 <= self.confidence < 1.0):
            raise bad("SequentialRule.confidence", self.confidence, "a probability in [0.5, 1), e.g. 0.95")
        if not (integer(self.min_pairs) and self.min_pairs >= 2):
            raise bad("SequentialRule.min_pairs", self.min_pairs,
                      "an integer >= 2 (a t interval needs 2 pairs for its spread)")
        if not (integer(self.max_pairs) and self.min_pairs <= self.max_pairs <= 1000):
            raise bad("SequentialRule.max_pairs", self.max_pairs,
                      f"an integer from min_pairs ({self.min_pairs}) to 1000")

    def looks(self) -> int:
        """Looks per figure: one after each pair from ``min_pairs`` to ``max_pairs``."""
        return self.max_pairs - self.min_pairs + 1

    def level_per_look(self) -> float:
        """Bonferroni: each look at ``1 - (1 - confidence) / looks`` keeps the family-wise rate."""
        return 1.0 - (1.0 - self.confidence) / self.looks()

    def describe(self) -> str:
        """One line for the page: the looks, the per-look level, the error statement, the margin."""
        looks = self.looks()
        which = (f"a look after each pair from {self.min_pairs} to {self.max_pairs}" if looks > 1
                 else f"one look at {self.max_pairs} pairs")
        return (
            f"sequential: {which}, each at {_percent(self.level_per_look())} "
            f"(Bonferroni over {looks} look{'s' * (looks > 1)}: <= {_percent(1.0 - self.confidence)} error overall), "
            f"margin +-{_percent(self.margin)}, paired t interval of the geometric mean ratio"
        )


@dataclass(frozen=True)
class SequentialLook:
    """One look: whether to stop measuring the figure, the verdict so far and why.

    ``comparison`` is the verdict at this look (its interval at the per-look level);
    ``reason`` says in words, with the numbers, why the look decided or did not.
    """

    decided: bool
    comparison: Comparison
    pairs: int
    reason: str


def sequential_look(measured: FigureTrials, *, rule: SequentialRule | None = None) -> SequentialLook:
    """The look after the last pair of ``measured.trials`` (``(role, value)`` in measurement order, whole pairs).

    Call it after each pair from ``rule.min_pairs`` on and stop measuring once ``decided``.
    ``comparison.ci_low``/``ci_high`` are the per-look interval of the geometric mean ratio
    candidate/parent, ``comparison.ratio`` the ratio of means (the module's docstring says why).
    """
    figure, trials, direction, unit = measured.figure, measured.trials, measured.direction, measured.unit
    rule = SequentialRule() if rule is None else rule
    if not isinstance(rule, SequentialRule):
        raise bad("rule", rule, "a decision.sequential.SequentialRule")
    if not isinstance(figure, str) or not figure:
        raise bad("figure", figure, "a non-empty name")
    if not isinstance(direction, Direction):
        raise bad(f"{figure}: direction", direction, "a decision.compare.Direction")
    if isinstance(trials, (str, bytes)) or not hasattr(trials, "__iter__"):
        raise bad(f"{figure}: trials", trials, "a sequence of (role, value) in measurement order")
    parent_values, candidate_values = split_trials(trials)
    parent = _positive(figure, "parent", parent_values)
    candidate = _positive(figure, "candidate", candidate_values)
    k = len(parent)
    if not rule.min_pairs <= k <= rule.max_pairs:
        raise bad(f"{figure}: trials", f"{k} pairs",
                  f"{rule.min_pairs} to {rule.max_pairs} pairs (SequentialRule.min_pairs/max_pairs: the declared "
                  "looks; a look beyond the budget would void the error statement)")
    level = rule.level_per_look()
    low, high = log_ratio_interval(parent, candidate, level)
    lo_edge, hi_edge = 1.0 - rule.margin, 1.0 + rule.margin
    verdict = interval_verdict(low, high, rule.margin, direction)
    interval = f"{_percent(level)} interval [{low:.3f}, {high:.3f}]"
    after = f"after {k} pair{'s' * (k > 1)}"
    if verdict in (Verdict.REGRESSION, Verdict.PROGRESSION):
        side = f"below {lo_edge:.3f}" if high < lo_edge else f"above {hi_edge:.3f}"
        reason = f"{interval} wholly {side} {after}: {verdict.value}"
    elif verdict is Verdict.NO_CHANGE:
        reason = f"{interval} wholly inside [{lo_edge:.3f}, {hi_edge:.3f}] {after}: no change (equivalence proved)"
    elif k >= rule.max_pairs:
        reason = (f"budget of {rule.max_pairs} pairs ended: unresolved, {interval} neither wholly inside "
                  f"nor wholly outside [{lo_edge:.3f}, {hi_edge:.3f}]")
    else:
        reason = (f"{interval} neither wholly inside nor wholly outside [{lo_edge:.3f}, {hi_edge:.3f}] "
                  f"after {k} of at most {rule.max_pairs} pairs: not decided, measure another pair")
    comparison = Comparison(
        figure=figure,
        unit=unit,
        direction=direction,
        verdict=verdict,
        ratio=math.fsum(candidate) / math.fsum(parent),
        ci_low=low,
        ci_high=high,
        paired=True,
        # compare.Rule's fields as the plot and the JSON read them: threshold = margin,
        # confidence = the per-look level (below 1 by Rule's check even at its limit)
        rule=Rule(threshold=rule.margin, confidence=min(level, math.nextafter(1.0, 0.0)), min_pairs=rule.min_pairs),
        parent=tuple(parent),
        candidate=tuple(candidate),
        method=rule.describe(),
    )
    return SequentialLook(decided=verdict is not Verdict.UNRESOLVED or k >= rule.max_pairs, comparison=comparison,
                          pairs=k, reason=reason)


def log_ratio_interval(parent: Sequence[float], candidate: Sequence[float], level: float) -> tuple[float, float]:
    """Paired Student-t interval at ``level`` of the geometric mean of ``candidate[i] / parent[i]``.

    Values must be > 0 (checked by :func:`sequential_look`). Identical pair ratios give a
    zero-width interval: no spread was seen, and the t interval says so.
    """
    k = len(parent)
    d = [math.log(c) - math.log(p) for p, c in zip(parent, candidate)]
    mean = math.fsum(d) / k
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in d) / (k - 1))
    half = t_upper_quantile((1.0 - level) / 2.0, k - 1) * sd / math.sqrt(k)
    return math.exp(mean - half), math.exp(mean + half)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``t_quantile(0.975, 10)`` = 2.2281)."""
    if not (isinstance(p, float | int) and not isinstance(p, bool) and 0.0 < p < 1.0):
        raise bad("p", p, "a probability in (0, 1)")
    if p == 0.5:
        return 0.0
    q = t_upper_quantile(1.0 - p if p > 0.5 else p, df)
    return q if p > 0.5 else -q


def t_upper_quantile(tail: float, df: int) -> float:
    """The t >= 0 with ``P(T > t) = tail`` (0 < tail <= 0.5), by bisection on :func:`t_upper_tail`.

    Takes the tail rather than the quantile so a per-look tail like 0.05 / 28 loses no digits
    to ``1 - p``.
    """
    if not (isinstance(df, int) and not isinstance(df, bool) and df >= 1):
        raise bad("df", df, "an integer >= 1 (degrees of freedom)")
    if not (isinstance(tail, float | int) and not isinstance(tail, bool) and 0.0 < tail <= 0.5):
        raise bad("tail", tail, "a probability in (0, 0.5]")
    return _t_upper_quantile(float(tail), df)


@lru_cache(maxsize=256)
def _t_upper_quantile(tail: float, df: int) -> float:
    """Cached after the checks (a cache key would take True for 1): a figure's looks ask for the same few."""
    lo, hi = 0.0, 1.0
    while t_upper_tail(hi, df) > tail:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):  # the tail decreases in t: keep P(T > lo) >= tail > P(T > hi)
        mid = 0.5 * (lo + hi)
        if t_upper_tail(mid, df) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


def t_upper_tail(t: float, df: int) -> float:
    """``P(T > t)`` for t >= 0: ``I_x(df/2, 1/2) / 2`` with ``x = df / (df + t^2)``, computed
    directly (not as 1 - CDF), so small tails keep their digits."""
    return 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """``I_x(a, b)`` by the continued fraction (modified Lentz), on the side of x where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (Numerical Recipes' ``betacf``)."""
    tiny = 1e-300

    def nonzero(v: float) -> float:
        return v if abs(v) >= tiny else tiny

    c, d = 1.0, 1.0 / nonzero(1.0 - (a + b) * x / (a + 1.0))
    h = d
    for m in range(1, 1000):
        even = m * (b - m) * x / ((a + 2 * m - 1.0) * (a + 2 * m))
        d = 1.0 / nonzero(1.0 + even * d)
        c = nonzero(1.0 + even / c)
        h *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1.0))
        d = 1.0 / nonzero(1.0 + odd * d)
        c = nonzero(1.0 + odd / c)
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta I_{x}({a}, {b}): continued fraction did not converge")


def _positive(figure: str, side: str, values: Sequence[float]) -> list[float]:
    """Finite values > 0: a log ratio needs both sides (a trial that measured nothing is a failed trial)."""
    out = []
    for i, v in enumerate(values):
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise bad(f"{figure}: {side}[{i}]", v, "a number") from None
        if not (math.isfinite(x) and x > 0.0):
            raise bad(f"{figure}: {side}[{i}]", v,
                      "a finite number > 0 (a log ratio needs both sides; a trial that measured nothing is "
                      "a failed trial: drop its pair)")
        out.append(x)
    return out


def _percent(x: float) -> str:
    """0.996428 -> '99.64 %', 0.05 -> '5 %', 0.025 -> '2.5 %': two decimals at most, no trailing zeros."""
    return f"{100.0 * x:.2f}".rstrip("0").rstrip(".") + " %"


def replay_looks(measured: FigureTrials, *, rule: SequentialRule | None = None) -> SequentialLook:
    """The caller's loop over trials already measured: a look after each pair from
    ``min_pairs``; the first decided look (pairs after it unused), else the last look.

    Why: the simulation runs the design exactly as a run does, and a reader can re-check a
    figure's stop from the trials in its JSON.
    """
    rule = SequentialRule() if rule is None else rule
    trials = list(measured.trials)
    last = min(len(trials) // 2, rule.max_pairs)
    if last < rule.min_pairs:
        raise bad(f"{measured.figure}: trials", f"{len(trials)} trials",
                  f">= {2 * rule.min_pairs} (SequentialRule.min_pairs pairs)")
    for k in range(rule.min_pairs, last + 1):
        look = sequential_look(replace(measured, trials=trials[: 2 * k]), rule=rule)
        if look.decided:
            break
    return look


# --- Simulation: what the design decides on simulated figures (simulate.py's noise model) ---

#: the simulated lab, per trial (bench.py's lab: -5 % over its 6 pairs is -0.45 %/trial): a
#: linear trend of -0.5 % per trial plus a random walk of 0.5 % per trial
DRIFT_PER_TRIAL = -0.005
WALK_SD = 0.005
#: true candidate/parent ratios simulated: identical builds, inside the margin, at it, beyond it
RATIOS = (1.00, 0.98, 0.975, 0.95, 0.90, 0.80)
NOISES = (0.015, 0.03)  # per-trial relative sd of a rate
FIXED_PAIRS = 4
DESIGNS = ("sequential", "fixed", "peeking")


class _Peeking(SequentialRule):
    """The design without the correction, for comparison only: every look at ``confidence``."""

    def level_per_look(self) -> float:
        return self.confidence

    def describe(self) -> str:
        return (f"peeking: a look after each pair from {self.min_pairs} to {self.max_pairs}, each at "
                f"{_percent(self.confidence)}, no correction, margin +-{_percent(self.margin)}")


@dataclass(frozen=True)
class OperatingRates:
    """Shares of ``runs`` simulated decisions of one design on one simulated figure."""

    design: str
    candidate_ratio: float
    rel_sd: float
    runs: int
    regression: float
    progression: float
    proved: float  # no change (equivalence proved)
    unresolved: float  # unresolved: the interval crossed the margin (sequential: the budget ended)
    not_judged: float  # the fixed rule's same-build-noise screen (compare_trials)
    median_pairs: float


def simulated_decisions(
    candidate_ratio: float,
    rel_sd: float,
    *,
    runs: int = 200,
    seed: int = 0,
    rule: SequentialRule | None = None,
    designs: Sequence[str] = DESIGNS,
    drift_per_trial: float = DRIFT_PER_TRIAL,
    walk_sd: float = WALK_SD,
) -> dict[str, OperatingRates]:
    """Per design, what ``runs`` simulated figures (seeded) end in.

    Designs see the same trials: "sequential" (``rule``, default :class:`SequentialRule`),
    "peeking" (the same looks, each at the uncorrected confidence) and "fixed" (today's
    ``compare_trials`` with ``Rule()`` on the first ``FIXED_PAIRS`` pairs).
    """
    import numpy as np

    from ipsec_hil.lab.decision.compare import compare_trials, interleaved_schedule
    from ipsec_hil.lab.decision.simulate import simulated_trials

    rule = SequentialRule() if rule is None else rule
    unknown = [d for d in designs if d not in DESIGNS]
    if unknown or not designs:
        raise bad("designs", list(designs), f"some of {DESIGNS}")
    if not (isinstance(runs, int) and runs >= 1):
        raise bad("runs", runs, "an integer >= 1")
    peeking = _Peeking(rule.margin, rule.confidence, rule.min_pairs, rule.max_pairs)
    rng = np.random.default_rng(seed)
    n = max(rule.max_pairs, FIXED_PAIRS)
    schedule = interleaved_schedule(n)
    outcomes: dict[str, list[tuple[Comparison, int]]] = {d: [] for d in designs}
    for _ in range(runs):
        trials = simulated_trials(rng, schedule, candidate_ratio=candidate_ratio, rel_sd=rel_sd,
                                  drift=drift_per_trial * (len(schedule) - 1), walk_sd=walk_sd)
        for design in designs:
            if design == "fixed":
                outcomes[design].append((compare_trials(FigureTrials("simulated", trials[: 2 * FIXED_PAIRS])), FIXED_PAIRS))
            else:
                look = replay_looks(FigureTrials("simulated", trials), rule=rule if design == "sequential" else peeking)
                outcomes[design].append((look.comparison, look.pairs))
    return {design: _rates(design, candidate_ratio, rel_sd, got) for design, got in outcomes.items()}


def _rates(design: str, ratio: float, rel_sd: float, got: list[tuple[Comparison, int]]) -> OperatingRates:
    import numpy as np

    def share(test: Callable[[Comparison], bool]) -> float:
        return sum(1 for c, _ in got if test(c)) / len(got)

    return OperatingRates(
        design=design, candidate_ratio=ratio, rel_sd=rel_sd, runs=len(got),
        regression=share(lambda c: c.verdict is Verdict.REGRESSION),
        progression=share(lambda c: c.verdict is Verdict.PROGRESSION),
        proved=share(lambda c: c.verdict is Verdict.NO_CHANGE),
        unresolved=share(lambda c: c.verdict is Verdict.UNRESOLVED),
        not_judged=share(lambda c: c.verdict is Verdict.NOT_JUDGED),
        median_pairs=float(np.median([pairs for _, pairs in got])),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ipsec_hil.lab.decision.sequential``: the design's operating table (README section 5)."""
    import argparse

    parser = argparse.ArgumentParser(description="Sequential design vs the fixed rule on simulated figures")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-pairs", type=int, default=SequentialRule.max_pairs, help="the sequential budget")
    args = parser.parse_args(argv)
    rule = SequentialRule(max_pairs=args.max_pairs)
    print(f"# {args.runs} simulated decisions per line, seed {args.seed}; lab drift {DRIFT_PER_TRIAL:+.1%}/trial "
          f"+ random walk {WALK_SD:.1%}/trial; abba order")
    print(f"# sequential = {rule.describe()}")
    print(f"# fixed      = compare_trials, {FIXED_PAIRS} pairs, {Rule().describe()}")
    print(f"# peeking    = the sequential looks, each at {_percent(rule.confidence)}: what not correcting costs")
    print("| true ratio | noise | design | regression | progression | no change proved | unresolved "
          "| not judged | median pairs |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for noise in NOISES:
        for ratio in RATIOS:
            for r in simulated_decisions(ratio, noise, runs=args.runs, seed=args.seed, rule=rule).values():
                print(f"| {ratio:.3f} | {_percent(noise)} | {r.design} | {r.regression:.1%} | {r.progression:.1%} "
                      f"| {r.proved:.1%} | {r.unresolved:.1%} | {r.not_judged:.1%} | {r.median_pairs:g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
