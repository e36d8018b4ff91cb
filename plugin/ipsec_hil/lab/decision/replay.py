"""Replay: the sequential design re-decided thousands of times on resampled recorded pairs
(issue 54), so a power curve and a false-alarm rate are known to a percent from a few dozen
live decisions.

Why: a live decision on the lab costs minutes, and 20 of them give a detection rate to
about +-10 % (Wilson); the claim "a 5 % regression is found in 95 % of decisions" needs
+-1 %. The live runs record every trial (``tools/decision-power``'s JSON lines); their pairs
are the lab's noise as the decision sees it -- swaps, warm-ups, TCP, ticks. Replay draws
pairs from them with replacement and runs the same looks as
:func:`ipsec_hil.lab.decision.sequential.sequential_look` (the paired t interval of the
per-pair log ratio at the per-look level, :func:`~ipsec_hil.lab.decision.compare.interval_verdict`
against the margin), vectorised: ``runs`` decisions at once.

- **A pool** per figure: the per-pair log ratios d = log(candidate / parent) of the
  recorded decisions of one scenario (:func:`pair_log_ratios` of each decision's trials in
  measurement order).
- **The power curve**: the identical builds' pools shifted by log(level) (a rate x level
  candidate; for a lower-is-better figure such as the CPU, by -log(level): a candidate
  costing 1 / level) -- the identical builds' noise around a known effect. The live
  regression scenarios check that shift: their own decisions' Wilson interval should hold
  the curve at their level (:func:`inside`).
- **A decision of a model** measures every figure until each is decided (build_comparison's
  sequential design): its pairs are the most any of its figures needed, each figure resampled
  on its own (independent figures, a stated simplification: one trial measures them together).

Assumed: pairs independent and alike (no drift across a decision beyond what the recorded
pairs hold); the pool's pairs stand for the lab's (a pool of a few dozen pairs has a few
dozen values: a tail the live runs never showed is missing here too).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .compare import Direction, Verdict, split_trials
from .sequential import SequentialRule, t_upper_quantile

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a rate of ``k`` in ``n`` (95 % by default): what a live
    count of 19 in 20 says (0.76 to 0.99) and what 3,800 in 4,000 says (0.943 to 0.957)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def pair_log_ratios(trials: Iterable[Sequence]) -> list[float]:
    """``[(role, value), ...]`` in measurement order -> log(candidate_i / parent_i) per pair."""
    parent, candidate = split_trials([(r, float(v)) for r, v in trials])
    return [math.log(c) - math.log(p) for p, c in zip(parent, candidate) if p > 0 and c > 0]


@dataclass(frozen=True)
class Replayed:
    """``runs`` replayed decisions of one figure: verdicts and the pairs each took."""

    verdicts: np.ndarray  # of Verdict values (str)
    pairs: np.ndarray  # int, the pair at which each decided (max_pairs when unresolved)

    @property
    def runs(self) -> int:
        return len(self.verdicts)

    def count(self, verdict: Verdict) -> int:
        return int(np.sum(self.verdicts == verdict.value))

    def rate(self, verdict: Verdict) -> float:
        return self.count(verdict) / self.runs


def decide_many(d: np.ndarray, rule: SequentialRule, direction: Direction) -> Replayed:
    """The sequential looks over each row of ``d`` (runs x max_pairs per-pair log ratios):
    after pair k from ``min_pairs`` on, the t interval exp(mean +- t sd / sqrt(k)) at the
    per-look level; a row stops at its first decided look."""
    runs, budget = d.shape
    if budget < rule.max_pairs:
        raise ValueError(f"replay: {budget} pairs a row, the rule's budget is {rule.max_pairs}")
    level = rule.level_per_look()
    lo_edge, hi_edge = math.log(1 - rule.margin), math.log(1 + rule.margin)
    worse_low = direction is Direction.HIGHER_IS_BETTER
    verdicts = np.full(runs, Verdict.UNRESOLVED.value, dtype=object)
    pairs = np.full(runs, rule.max_pairs)
    open_ = np.ones(runs, dtype=bool)
    s1 = np.cumsum(d, axis=1)
    s2 = np.cumsum(d * d, axis=1)
    for k in range(rule.min_pairs, rule.max_pairs + 1):
        mean = s1[:, k - 1] / k
        var = np.maximum(0.0, (s2[:, k - 1] - k * mean * mean) / (k - 1))
        half = t_upper_quantile((1.0 - level) / 2.0, k - 1) * np.sqrt(var) / math.sqrt(k)
        low, high = mean - half, mean + half
        below, above = high < lo_edge, low > hi_edge
        worse, better = (below, above) if worse_low else (above, below)
        inside = (low >= lo_edge) & (high <= hi_edge)
        for verdict, hit in ((Verdict.REGRESSION, worse), (Verdict.PROGRESSION, better & ~worse),
                             (Verdict.NO_CHANGE, inside & ~worse & ~better)):
            now = open_ & hit
            verdicts[now] = verdict.value
            pairs[now] = k
            open_ &= ~now
        if not open_.any():
            break
    return Replayed(verdicts, pairs)


def replay(pool: Sequence[float], rule: SequentialRule, direction: Direction, *, shift: float = 0.0,
           runs: int = 4000, seed: int = 54) -> Replayed:
    """``runs`` decisions of pairs drawn with replacement from ``pool`` (+ ``shift``)."""
    if len(pool) < 2:
        raise ValueError(f"replay: {len(pool)} recorded pairs, need at least 2")
    rng = np.random.default_rng(seed)
    d = rng.choice(np.asarray(pool, dtype=float), size=(runs, rule.max_pairs), replace=True) + shift
    return decide_many(d, rule, direction)


def inside(k: int, n: int, rate: float) -> bool:
    """Whether a replayed ``rate`` lies in the live count's Wilson interval."""
    lo, hi = wilson(k, n)
    return lo <= rate <= hi


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


#: The power curve's levels: candidate / parent from 0.90 to 1.00 (1.00: identical builds)
CURVE = tuple(round(0.90 + 0.01 * i, 2) for i in range(11))


def _shift(level: float, direction: Direction) -> float:
    """log candidate/parent of a candidate at ``level`` of the parent: a rate x level, a
    lower-is-better figure (CPU) costing 1 / level."""
    return math.log(level) if direction is Direction.HIGHER_IS_BETTER else -math.log(level)


def _pools(records: Sequence[dict], figures: Iterable[str]) -> dict[str, list[float]]:
    return {f: [x for r in records for x in pair_log_ratios((r.get("trials") or {}).get(f, []))] for f in figures}


def seconds_per_pair(records: Sequence[dict]) -> float:
    """The live decisions' median lab seconds per pair (swaps, warm-ups, trials, reads)."""
    per = [r["wall_seconds"] / r["pairs"] for r in records if r.get("pairs") and not r.get("error")]
    return float(np.median(per)) if per else math.nan


def power_curve(records: Sequence[dict], rule: SequentialRule, directions: dict[str, Direction], *,
                runs: int = 4000, levels: Sequence[float] = CURVE, seed: int = 54) -> list[dict]:
    """Per figure and level, ``runs`` replayed decisions of a model whose candidate changes that
    figure by ``level`` (the identical builds' pool shifted) while the other figures are the
    identical builds' (unshifted): the changed figure's verdict shares with Wilson intervals,
    the pairs of the whole decision (the most any figure needed) and its lab time."""
    ident = [r for r in records if r.get("kind") is None and not r.get("error")]
    pools = _pools(ident, directions)
    missing = [f for f, p in pools.items() if len(p) < 2]
    if missing:
        raise ValueError(f"replay: no recorded identical-build pairs of {', '.join(missing)}")
    per_pair = seconds_per_pair(records)
    base = {f: replay(pools[f], rule, directions[f], runs=runs, seed=seed + 1 + i) for i, f in enumerate(directions)}
    out = []
    for figure, direction in directions.items():
        for level in levels:
            changed = replay(pools[figure], rule, direction, shift=_shift(level, direction), runs=runs, seed=seed)
            pairs = np.maximum.reduce([changed.pairs] + [base[f].pairs for f in directions if f != figure])
            others_alarm = np.zeros(runs, dtype=bool)
            for f in directions:
                if f != figure:
                    others_alarm |= np.isin(base[f].verdicts, (Verdict.REGRESSION.value, Verdict.PROGRESSION.value))
            row = {"figure": figure, "level": level, "runs": runs, "pool": len(pools[figure]),
                   "median_pairs": float(np.median(pairs)), "p95_pairs": percentile(pairs, 95),
                   "median_s": float(np.median(pairs)) * per_pair, "p95_s": percentile(pairs, 95) * per_pair,
                   "other_figures_alarm": float(others_alarm.mean())}
            for v in Verdict:
                if v is not Verdict.NOT_JUDGED:
                    k = changed.count(v)
                    row[v.value] = (k / runs, *wilson(k, runs))
            out.append(row)
    return out


def curve_lines(rows: Sequence[dict]) -> list[str]:
    """The curve as a markdown table: at 1.00 the regression and progression columns are the
    false alarms of that figure."""
    out = ["| figure | candidate/parent | replayed | regression [Wilson 95 %] | progression | no change | unresolved "
           "| other figures' false alarms | decision pairs median / p95 | decision lab s median / p95 |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        reg = r["regression"]
        out.append(f"| {r['figure']} | {r['level']:.2f} | {r['runs']} ({r['pool']} pairs) | {reg[0]:.1%} "
                   f"[{reg[1]:.1%}, {reg[2]:.1%}] | {r['progression'][0]:.1%} | {r['no change'][0]:.1%} | "
                   f"{r['unresolved'][0]:.1%} | {r['other_figures_alarm']:.1%} | {r['median_pairs']:g} / "
                   f"{r['p95_pairs']:g} | {r['median_s']:.0f} / {r['p95_s']:.0f} |")
    return out


def live_check(records: Sequence[dict], rule: SequentialRule, directions: dict[str, Direction], *,
               runs: int = 4000, seed: int = 54) -> list[str]:
    """Each live scenario against the replay: its live count with its Wilson interval, the
    curve's rate at its level (identical builds' pairs shifted), the rate replayed from its
    own pairs, and whether the curve's rate lies inside the live interval."""
    ident = [r for r in records if r.get("kind") is None and not r.get("error")]
    pools = _pools(ident, directions)
    out = ["| scenario | live N | live: expected verdict [Wilson 95 %] | replayed, identical pairs shifted | "
           "replayed, its own pairs | curve inside the live interval |", "|---|---:|---:|---:|---:|---|"]
    by: dict[tuple, list[dict]] = {}
    for r in records:
        if not r.get("error"):
            by.setdefault((r.get("kind"), r.get("level")), []).append(r)
    for (kind, level), rs in sorted(by.items(), key=lambda kv: (kv[0][0] or "", -(kv[0][1] or 1))):
        figures = [kind] if kind else list(directions)
        for f in figures:
            live = [(r.get("sequential") or {}).get(f) for r in rs]
            live = [v for v in live if v]
            if not live or len(pools.get(f, [])) < 2:
                continue
            if kind:
                k = sum(v["verdict"] == Verdict.REGRESSION.value for v in live)
                shift, want = _shift(level, directions[f]), Verdict.REGRESSION
            else:  # identical: the expected verdict is no false alarm
                k = sum(v["verdict"] not in (Verdict.REGRESSION.value, Verdict.PROGRESSION.value) for v in live)
                shift, want = 0.0, None
            curve = replay(pools[f], rule, directions[f], shift=shift, runs=runs, seed=seed)
            own_pool = _pools(rs, [f])[f]
            own = replay(own_pool, rule, directions[f], runs=runs, seed=seed) if len(own_pool) >= 2 else None

            def rate(x: Replayed | None) -> float:
                if x is None:
                    return math.nan
                return x.rate(want) if want else 1 - x.rate(Verdict.REGRESSION) - x.rate(Verdict.PROGRESSION)

            lo, hi = wilson(k, len(live))
            name = f"{'rate' if kind == 'up' else kind} x{level:g}" if kind else f"identical ({f})"
            out.append(f"| {name} | {len(live)} | {k}/{len(live)} [{lo:.0%}, {hi:.0%}] | {rate(curve):.1%} | "
                       f"{rate(own):.1%} | {'yes' if lo <= rate(curve) <= hi else 'NO'} |")
    return out
