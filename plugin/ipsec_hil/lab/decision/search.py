"""NDR/PDR search over offered load, in the spirit of MLRsearch (draft-ietf-bmwg-mlrsearch).

Why a search and not a fixed ramp: the throughput of an IPsec tunnel is the highest load
whose loss stays within a *goal loss ratio* (0 for NDR, 0.5 % for PDR); the answer is an
interval proved by trials -- a **lower bound** (a load that met the goal) and an **upper
bound** (a load that did not) -- narrowed until its *relative width*
``(upper - lower) / upper`` is at most the *goal width*. Every trial costs lab time, so the
search spends it where it narrows an interval.

What is implemented of the draft (terms as it uses them):

* **Goals** (:class:`Goal`): goal loss ratio, goal (relative) width, goal exceed ratio and
  goal duration sum. Several goals are searched in one pass and share every trial (a
  trial at load L informs NDR and PDR at once).
* **Load classification** with the exceed ratio: at one load, the trials at the final
  duration add up to a *good* (loss <= goal) and a *bad* duration; with the goal duration
  sum D the still-missing time is ``max(0, D - good - bad)``. The load is a lower bound when
  even counting all missing time as bad the bad share is <= the exceed ratio, an upper
  bound when even counting it as good the bad share is larger, undecided otherwise (then
  it is measured again). Exceed ratio 0 and D = one trial is the classic rule: one trial
  decides. A ratio of 0.5 with D = 3 trials makes NDR robust to a rare one-packet drop.
* **Relevant bounds**: the upper bound is the smallest load classified "upper"; the lower
  bound the largest load classified "lower" *below* it (a non-monotonic result above the
  upper bound is ignored, as in the draft).
* **Warm-up trial**: one trial before the search (at ``max_rate``), discarded -- it fills
  ARP/ND caches, brings up the SA and queues so the first measured trial is not an outlier.
* **Shorter trials first**: an initial trial at ``max_rate`` and ``initial_duration``
  gives the forwarding rate as the first guess; then ``phases`` intermediate phases whose
  trial durations grow geometrically to ``final_duration`` and whose widths halve down to
  the goal width. Bounds of a shorter phase are only *hints* for the next: they are
  re-measured, and only trials at the final duration prove anything.
* **Expansion from the last bound**: with one bound known the next load steps away from it
  by the phase width, doubling while the same bound keeps moving (external search); with
  both known it gallops the same way from the bound that moved last, never past the
  midpoint (bisection when neither did).

* **A trial knows what it offered** (issue 41): a trial may report the load that actually
  left the generator (:attr:`TrialResult.achieved`; udp_load takes it from iperf3's
  sender-side counts and time). A trial short of its intended load by more than
  ``offer_tolerance`` is *the bench could not offer it*: it classifies nothing (the draft's
  intended load is only a result when the generator delivered it) and is measured again;
  when every one of SHORT_REPEATS attempts at a load above all it offered in full fell
  short (a stall of a busy CPU does not repeat, a limit does), the search's ceiling
  drops to just under the most it did offer, and a goal whose every load up to that
  ceiling met it ends "at least X, not bracketed: the bench's limit"
  (:attr:`GoalResult.bench_limit`) instead of a result at the load asked.

Not implemented: the draft's conditional throughput, per-goal final trial durations,
search-duration/time limits other than ``max_trials``, and its exact width rounding.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from ipsec_hil.lab.decision.errors import DecisionError, bad

WARMUP, INITIAL, SEARCH = "warm-up", "initial", "search"
LOWER, UPPER, UNDECIDED = "lower", "upper", "undecided"


@dataclass(frozen=True)
class TrialResult:
    """What one trial measured: the intended load, the packet counters and the duration.

    ``achieved``: the load that left the generator, measured (same unit as ``offered``);
    None when the generator does not say (a simulation's trials offer what they are asked).
    ``port_tx``: the packets its port counted out meanwhile, when readable (evidence only).
    ``drain``: how long the receiver's window outlasted the sender's (evidence of a standing
    queue at the trial's end: about queue / line rate when the path was overloaded).
    """

    offered: float
    sent: int
    received: int
    duration: float
    achieved: float | None = None
    port_tx: int | None = None  # packets the generator's port transmitted (None: not read)
    drain: float | None = None  # seconds the receiver still counted after the sender's last datagram

    def shortfall(self) -> float:
        """How far the measured load fell short of the intended one (0 when not measured)."""
        if self.achieved is None:
            return 0.0
        return max(0.0, 1.0 - self.achieved / self.offered)

    @property
    def loss_ratio(self) -> float:
        return (self.sent - self.received) / self.sent

    @property
    def forwarding_rate(self) -> float:
        """Received packets per second (the offered load's unit when that is packets/s),
        of the load that left when it was measured."""
        return (self.offered if self.achieved is None else self.achieved) * self.received / self.sent


@dataclass(frozen=True)
class Goal:
    """One search goal; NDR and PDR are two of them."""

    name: str
    loss_ratio: float
    width: float = 0.01
    exceed_ratio: float = 0.0
    duration_sum: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise bad("Goal.name", self.name, "a non-empty name")
        if not 0.0 <= self.loss_ratio < 1.0:
            raise bad(f"Goal {self.name}: loss_ratio", self.loss_ratio, "a ratio in [0, 1)")
        if not 0.0 < self.width < 1.0:
            raise bad(f"Goal {self.name}: width", self.width, "a relative width in (0, 1), e.g. 0.01")
        if not 0.0 <= self.exceed_ratio < 1.0:
            raise bad(f"Goal {self.name}: exceed_ratio", self.exceed_ratio, "a ratio in [0, 1)")
        if self.duration_sum is not None and not self.duration_sum > 0:
            raise bad(f"Goal {self.name}: duration_sum", self.duration_sum, "seconds > 0 or None")


#: A trial may fall this far short of its intended load and still count at it: iperf3's
#: pacing and the sender's timer slack stay inside it on an idle machine; a bench at its
#: limit does not. Kept small because a trial within it counts at the load ASKED, which is
#: the figure the page shows (5 % would let a healthy path read 5 % above its line rate).
#: A busy CPU's stalls go past it now and then: SHORT_REPEATS handles those.
OFFER_TOLERANCE = 0.02
#: Attempts at one load, every one short, before the load is the bench's limit: one short
#: trial may be a stall of a shared CPU (measured again), a limit repeats.
SHORT_REPEATS = 3
#: Short trials in one search before it stops (a bench that keeps stalling measures nothing).
MAX_SHORT_TRIALS = 12

#: the issue's defaults: NDR = 0 loss, PDR = 0.5 % loss, 1 % relative width
DEFAULT_GOALS = (Goal("NDR", 0.0), Goal("PDR", 0.005))


@dataclass(frozen=True)
class SearchTrial:
    """One trial of the search, in order: its role, phase (0 = initial) and result."""

    index: int
    role: str
    phase: int
    load: float
    result: TrialResult
    bench_short: bool = False  # the bench could not offer ``load``: the trial proves nothing

    @property
    def loss_ratio(self) -> float:
        return self.result.loss_ratio


@dataclass(frozen=True)
class GoalResult:
    """The interval one goal ended with.

    ``lower_bound`` None: even ``min_rate`` missed the goal. ``upper_bound`` None: even
    the highest load measured met it (the DUT's throughput is at least that; the search
    cannot prove more). ``bench_limit``: the most the bench offered when asked for more
    (None when it always offered what it was asked). ``proved_at`` is the trial duration
    the bounds were measured at; only ``proved_at == final_duration`` is a result
    (``max_trials`` may stop a search early).
    """

    goal: Goal
    lower_bound: float | None
    upper_bound: float | None
    relative_width: float | None
    width_reached: bool
    proved_at: float
    note: str = ""
    bench_limit: float | None = None

    @property
    def bracketed(self) -> bool:
        """Both bounds proved: the goal's throughput lies between them."""
        return self.lower_bound is not None and self.upper_bound is not None

    def verdict(self, unit: str = "") -> str:
        """The goal's answer in words, for the page's first screen."""
        u = f" {unit}" if unit else ""
        if self.lower_bound is None:
            return f"none: even the lowest load missed the goal ({self.note})" if self.note else "none"
        if self.upper_bound is None:
            return f"at least {self.lower_bound:.1f}{u}, not bracketed: {self._why_not()}"
        return f"{self.lower_bound:.1f}{u}"

    def _why_not(self) -> str:
        if self.bench_limit is not None:
            return f"the bench's limit (it offered at most {self.bench_limit:.1f} when asked more)"
        return "the search's ceiling met the goal"

    def summary(self) -> str:
        lo = "none" if self.lower_bound is None else f"{self.lower_bound:.6g}"
        hi = "none" if self.upper_bound is None else f"{self.upper_bound:.6g}"
        width = "" if self.relative_width is None else f", width {self.relative_width:.2%}"
        note = f" ({self.note})" if self.note else ""
        return f"{self.goal.name} (loss <= {self.goal.loss_ratio:g}): lower {lo}, upper {hi}{width}{note}"


@dataclass(frozen=True)
class SearchResult:
    goals: tuple[GoalResult, ...]
    trials: tuple[SearchTrial, ...]
    min_rate: float
    max_rate: float
    final_duration: float

    def goal(self, name: str) -> GoalResult:
        for result in self.goals:
            if result.goal.name == name:
                return result
        raise bad("goal name", name, f"one of {[r.goal.name for r in self.goals]}")

    @property
    def trial_count(self) -> int:
        """Trials including the warm-up (what the lab spent)."""
        return len(self.trials)

    @property
    def trial_time(self) -> float:
        """Seconds of traffic including the warm-up (overheads between trials not counted)."""
        return sum(t.result.duration for t in self.trials)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready data for the report: bounds per goal and every trial."""
        return {
            "goals": [
                {**asdict(g.goal), **{k: v for k, v in asdict(g).items() if k != "goal"}} for g in self.goals
            ],
            "trials": [
                {"index": t.index, "role": t.role, "phase": t.phase, "load": t.load, **asdict(t.result),
                 "loss_ratio": t.loss_ratio, "bench_short": t.bench_short}
                for t in self.trials
            ],
            "trial_count": self.trial_count,
            "trial_time": self.trial_time,
            "min_rate": self.min_rate,
            "max_rate": self.max_rate,
            "final_duration": self.final_duration,
        }

    def summary(self) -> list[str]:
        return [g.summary() for g in self.goals] + [
            f"{self.trial_count} trials, {self.trial_time:.1f} s of traffic (final trials {self.final_duration:g} s)"
        ]


@dataclass
class _Walk:
    """Per goal and phase: which bound moved last and how many times in a row."""

    last: str = ""
    streak: int = 0
    bounds: tuple[float | None, float | None] = (None, None)

    def moved(self, lo: float | None, hi: float | None) -> None:
        old_lo, old_hi = self.bounds
        which = "lo" if lo != old_lo else "hi" if hi != old_hi else ""
        if which:
            self.streak = self.streak + 1 if which == self.last else 0
            self.last = which
        self.bounds = (lo, hi)


@dataclass
class _Phase:
    number: int
    duration: float
    final: bool
    loads: dict[float, list[TrialResult]] = field(default_factory=dict)

    def classify(self, goal: Goal, load: float) -> str:
        good = bad_ = 0.0
        for r in self.loads[load]:
            if r.loss_ratio <= goal.loss_ratio:
                good += r.duration
            else:
                bad_ += r.duration
        target = (goal.duration_sum or self.duration) if self.final else self.duration
        missing = max(0.0, target - good - bad_)
        total = max(target, good + bad_)
        if (bad_ + missing) / total <= goal.exceed_ratio + 1e-12:
            return LOWER
        if bad_ / total > goal.exceed_ratio + 1e-12:
            return UPPER
        return UNDECIDED

    def bounds(self, goal: Goal) -> tuple[float | None, float | None, float | None]:
        """(relevant lower, relevant upper, an undecided load between them or None)."""
        kinds = {load: self.classify(goal, load) for load in self.loads}
        uppers = [load for load, k in kinds.items() if k == UPPER]
        hi = min(uppers) if uppers else None
        lowers = [load for load, k in kinds.items() if k == LOWER and (hi is None or load < hi)]
        lo = max(lowers) if lowers else None
        pending = [
            load for load, k in kinds.items()
            if k == UNDECIDED and (lo is None or load > lo) and (hi is None or load < hi)
        ]
        return lo, hi, (min(pending) if pending else None)


class _StopSearch(Exception):
    """max_trials reached (internal: ends the loops, the result says so)."""


class _BenchShort(Exception):
    """The trial just run fell short of its load: the ceiling moved, pick the next load again."""


@dataclass
class _Range:
    """The loads the search may ask for: ``max_rate`` drops to what the bench can offer."""

    min_rate: float
    max_rate: float
    bench_limit: float | None = None
    short: int = 0
    offered_ok: float = 0.0  # the highest load the bench offered in full so far
    attempts: dict[float, list[float]] = field(default_factory=dict)  # load -> what its short trials offered


def search(
    trial: Callable[[float, float], TrialResult],
    *,
    max_rate: float,
    min_rate: float,
    goals: Sequence[Goal] = DEFAULT_GOALS,
    final_duration: float = 1.0,
    initial_duration: float | None = None,
    phases: int = 1,
    warmup_duration: float | None = None,
    max_trials: int = 200,
    offer_tolerance: float = OFFER_TOLERANCE,
) -> SearchResult:
    """Find each goal's proved lower and upper bound between ``min_rate`` and ``max_rate``.

    ``trial(load, duration)`` offers ``load`` (any rate unit, e.g. packets/s) for
    ``duration`` seconds and returns its :class:`TrialResult`. ``initial_duration``
    defaults to a quarter of the final duration, ``warmup_duration`` to the initial
    duration (0 skips the warm-up). ``phases`` intermediate phases sit between the
    initial trial and the final phase (0: the final phase starts from the initial trial).
    A trial whose measured ``achieved`` load is more than ``offer_tolerance`` short of its
    load proves nothing and lowers the ceiling to just under what it did offer.
    """
    goals = _checked_goals(goals)
    initial_duration = final_duration / 4 if initial_duration is None else initial_duration
    warmup_duration = initial_duration if warmup_duration is None else warmup_duration
    _check_numbers(max_rate, min_rate, final_duration, initial_duration, phases, warmup_duration, max_trials)
    if not 0 < offer_tolerance < 0.5:
        raise bad("offer_tolerance", offer_tolerance, "a ratio in (0, 0.5), e.g. 0.02")
    trials: list[SearchTrial] = []
    rng = _Range(float(min_rate), float(max_rate))

    def run(role: str, phase: _Phase | None, load: float, duration: float) -> TrialResult:
        if role != WARMUP and sum(t.role != WARMUP for t in trials) >= max_trials:
            raise _StopSearch
        result = trial(load, duration)
        _check_result(result, len(trials), load)
        short = result.shortfall() > offer_tolerance
        trials.append(SearchTrial(len(trials), role, -1 if phase is None else phase.number, load, result, short))
        if short:
            if role != WARMUP:  # a short warm-up is no claim either way: it only warms the path
                _bench_short(rng, result, offer_tolerance)
                raise _BenchShort
        else:
            rng.offered_ok = max(rng.offered_ok, load)
            if phase is not None:
                phase.loads.setdefault(load, []).append(result)
        return result

    plan = _plan(initial_duration, final_duration, phases)
    current = _Phase(0, plan[0], final=len(plan) == 1)
    hints: dict[str, tuple[float | None, float | None]] = {}
    stopped = ""
    try:
        if warmup_duration > 0:
            run(WARMUP, None, max_rate, warmup_duration)
        while True:
            try:
                first = run(INITIAL, current, rng.max_rate, plan[0])
                break
            except _BenchShort:
                continue
        guess = min(rng.max_rate, max(min_rate, first.forwarding_rate))
        hints = {g.name: (guess if guess < rng.max_rate else None, None) for g in goals}
        for number, duration in enumerate(plan):
            if number > 0:
                current = _Phase(number, duration, final=number == len(plan) - 1)
            scale = 2 ** (len(plan) - 1 - number)
            for goal in goals:
                _narrow(goal, goal.width * scale, current, hints[goal.name], rng, run)
                lo, hi, _ = current.bounds(goal)
                hints[goal.name] = (lo, hi)
    except _StopSearch as exc:
        stopped = str(exc) or (f"stopped at max_trials={max_trials} in phase {current.number} "
                               f"({current.duration:g} s trials)")
    results = tuple(_goal_result(goal, current, stopped, rng.bench_limit) for goal in goals)
    return SearchResult(results, tuple(trials), float(min_rate), float(max_rate), float(final_duration))


def _bench_short(rng: _Range, result: TrialResult, tolerance: float) -> None:
    """A trial fell short of its load. The rule (robust under CPU load): at a load the bench
    has offered in full before, it is a stall of the bench (a busy CPU), measured again.
    Above every load it offered in full, it is measured again too, up to SHORT_REPEATS
    attempts; only when every attempt at that load fell short is it the bench's limit: the
    ceiling drops to just under the most those attempts offered (never under a load the
    bench did offer), and the goals met up to there say so."""
    achieved = float(result.achieved or 0.0)
    rng.short += 1
    if result.offered > rng.offered_ok:
        tries = rng.attempts.setdefault(result.offered, [])
        tries.append(achieved)
        if len(tries) >= SHORT_REPEATS:
            best = max(tries)
            rng.bench_limit = best if rng.bench_limit is None else min(rng.bench_limit, best)
            rng.max_rate = min(rng.max_rate, max(best * (1 - tolerance / 2), rng.offered_ok))
    if rng.short >= MAX_SHORT_TRIALS or rng.max_rate <= rng.min_rate:
        raise _StopSearch(f"the bench fell short of its load {rng.short} times (last: asked {result.offered:.4g}, "
                          f"offered {achieved:.4g}); the ceiling reached {rng.max_rate:.4g}")


def _narrow(
    goal: Goal,
    width: float,
    phase: _Phase,
    hint: tuple[float | None, float | None],
    rng: _Range,
    run: Callable[[str, _Phase | None, float, float], TrialResult],
) -> None:
    """Measure in ``phase`` until ``goal``'s interval is at most ``width`` wide (or pinned)."""
    walk = _Walk()
    hint_lo, hint_hi = hint
    while True:
        lo, hi, pending = phase.bounds(goal)
        walk.moved(lo, hi)
        load = pending if pending is not None else _next_load(
            lo, hi, width, walk, hint_lo, hint_hi, phase, rng.min_rate, rng.max_rate
        )
        if load is None:
            return
        try:
            run(SEARCH, phase, min(load, rng.max_rate), phase.duration)
        except _BenchShort:
            continue


def _next_load(
    lo: float | None,
    hi: float | None,
    width: float,
    walk: _Walk,
    hint_lo: float | None,
    hint_hi: float | None,
    phase: _Phase,
    min_rate: float,
    max_rate: float,
) -> float | None:
    step = width * 2 ** walk.streak
    if lo is None and hi is None:
        return next(x for x in (hint_lo, hint_hi, max_rate) if x is not None)
    if hi is None:
        if lo >= max_rate:
            return None
        if hint_hi is not None and lo < hint_hi <= max_rate and hint_hi not in phase.loads:
            return hint_hi
        return min(max_rate, lo * (1 + (step if walk.last == "lo" else width)))
    if lo is None:
        if hi <= min_rate:
            return None
        if hint_lo is not None and hint_lo < hi and hint_lo not in phase.loads:
            return hint_lo
        return max(min_rate, hi * (1 - (step if walk.last == "hi" else width)))
    if (hi - lo) / hi <= width * (1 + 1e-9):
        return None
    mid = (lo + hi) / 2
    if walk.last == "lo":
        return min(mid, lo * (1 + step))
    if walk.last == "hi":
        return max(mid, hi * (1 - step))
    return mid


def _goal_result(goal: Goal, phase: _Phase, stopped: str, bench_limit: float | None) -> GoalResult:
    lo, hi, _ = phase.bounds(goal)
    width = None if lo is None or hi is None else (hi - lo) / hi
    reached = bool(phase.final and not stopped and (width is None or width <= goal.width * (1 + 1e-9)))
    note = stopped
    if not note and hi is None and lo is not None:
        note = "the bench's limit met the goal" if bench_limit is not None else "max_rate met the goal"
    elif not note and lo is None and hi is not None:
        note = "min_rate missed the goal"
    return GoalResult(goal, lo, hi, width, reached, phase.duration, note, bench_limit)


def _plan(initial: float, final: float, phases: int) -> list[float]:
    """Trial durations per phase: initial, then geometric steps up to the final duration."""
    if phases == 0 or initial >= final:
        return [initial, final] if initial < final else [final]
    ratio = (final / initial) ** (1.0 / (phases + 1))
    return [initial * ratio**k for k in range(phases + 1)] + [final]


def _checked_goals(goals: Sequence[Goal]) -> tuple[Goal, ...]:
    goals = tuple(goals)
    if not goals or not all(isinstance(g, Goal) for g in goals):
        raise bad("goals", goals, "a non-empty sequence of Goal")
    names = [g.name for g in goals]
    if len(set(names)) != len(names):
        raise bad("goals", names, "unique goal names")
    return tuple(sorted(goals, key=lambda g: g.loss_ratio))


def _check_numbers(
    max_rate: float, min_rate: float, final: float, initial: float, phases: int, warmup: float, max_trials: int
) -> None:
    if not (isinstance(min_rate, (int, float)) and math.isfinite(min_rate) and min_rate > 0):
        raise bad("min_rate", min_rate, "a finite load > 0")
    if not (isinstance(max_rate, (int, float)) and math.isfinite(max_rate) and max_rate > min_rate):
        raise bad("max_rate", max_rate, f"a finite load > min_rate ({min_rate})")
    if not final > 0:
        raise bad("final_duration", final, "seconds > 0")
    if not 0 < initial <= final:
        raise bad("initial_duration", initial, f"seconds in (0, final_duration={final}]")
    if not (isinstance(phases, int) and 0 <= phases <= 10):
        raise bad("phases", phases, "an integer in [0, 10]")
    if not warmup >= 0:
        raise bad("warmup_duration", warmup, "seconds >= 0 (0: no warm-up)")
    if not (isinstance(max_trials, int) and max_trials >= 2):
        raise bad("max_trials", max_trials, "an integer >= 2")


def _check_result(result: TrialResult, index: int, load: float) -> None:
    if not isinstance(result, TrialResult):
        raise bad(f"trial #{index} at load {load:g}: result", result, "a TrialResult")
    if result.sent <= 0:
        raise DecisionError(
            f"trial #{index} at load {load:g}: sent={result.sent}: the generator sent nothing, "
            "so loss is undefined (is the bench's traffic generator running?)"
        )
    if not 0 <= result.received <= result.sent:
        raise bad(f"trial #{index} at load {load:g}: received", result.received, f"0..sent ({result.sent})")
    if not result.duration > 0:
        raise bad(f"trial #{index} at load {load:g}: duration", result.duration, "seconds > 0")
    if result.achieved is not None and not (math.isfinite(result.achieved) and result.achieved >= 0):
        raise bad(f"trial #{index} at load {load:g}: achieved", result.achieved, "a measured load >= 0 or None")
