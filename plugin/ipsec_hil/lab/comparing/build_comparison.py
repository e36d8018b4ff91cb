"""Candidate against parent on one tunnel: alternate the builds, measure, judge (issue 14).

Why a phase of its own, after the functional tests: the functional tests judge the
candidate alone; the merge question -- "does this build make anything worse than the
build it replaces, on this lab, today?" -- needs both builds measured side by side. The
builds are swapped on the tunnel's appliances (``DriverDeployment.switch_to``: md5,
kldstat and kernel log checked at every swap) in the order
:func:`ipsec_hil.lab.decision.compare.interleaved_schedule` gives (parent, candidate,
candidate, parent, ...), after each swap one discarded warm-up stream (the first stream after a swap is slow while
the driver re-attaches: on the twin it cost up to 40 % and made identical builds read as a
regression), each trial measures every figure, and the paired bootstrap rule
of :func:`ipsec_hil.lab.decision.compare.compare_trials` gives the verdict per figure. The
candidate is loaded again at the end, so whatever restores the appliance's own build
afterwards (the ``--driver`` plugin) finds the state it left.

The SAs stay installed across a swap: the twin re-offloads them when the driver attaches
again; on hardware a driver that loses its SAs on reload shows as a failed trial (the
iperf3 error names it) and the phase reports "not measured", never a verdict.

Library code: no pytest. The caller holds the tunnel (and with it both appliances' locks).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ipsec_hil.lab.decision.compare import (CANDIDATE, PARENT, Comparison, Direction, FigureTrials, Rule, Verdict,
                                         compare_trials, interleaved_schedule)
from ipsec_hil.lab.decision.sequential import SequentialRule, sequential_look
from ipsec_hil.lab.driver import DriverDeployment, ModuleBuild, local_build
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.decision.search import Goal, search
from ipsec_hil.lab.measuring import cpu_cost
from ipsec_hil.lab.traffic.bench import iperf_run
from ipsec_hil.lab.traffic.udp_load import udp_trial

log = logging.getLogger(__name__)

#: The stream figures: one TCP stream, bench -> remote LAN ("up") and back ("down") -- the
#: pages' rate figures.
STREAMS = ("up", "down")

#: The PDR as a comparison figure: per trial, one MLRsearch-style search (one goal, no
#: intermediate phase) of UDP load bench -> remote LAN, its proved lower bound the value.
#: Opt-in (``--compare-figures up,down,pdr``): a search is ~10 short trials, so it costs
#: ~10x a stream per trial.
PDR = "pdr"
#: The DUT's kernel CPU time per data frame over the trial's streams (measuring.cpu_cost: the
#: up stream's sealed frames and the down stream's opened ones, not their ACKs): the cost a
#: driver adds when the link, not the engine, is the limit -- a build that burns more CPU per
#: frame and still fills the link differs in nothing else. Lower is better. In the default
#: figures since issue 54 (:data:`FIGURES`); it rides on the trial's streams (an up stream is
#: run for it when no stream figure is asked).
CPU = "cpu"
KNOWN_FIGURES = STREAMS + (PDR, CPU)
#: The figures a comparison measures unless told otherwise (the gate's ``--compare-figures``
#: default, and what tools/decision-power measured the decision's power with, issue 54): the
#: up stream's rate and the CPU per data frame -- the two regression kinds a driver change
#: makes. The down stream is opt-in (``up,down,cpu``): each trial then runs two streams, and a
#: decision's 16-pair budget would no longer end within 10 minutes of lab time per model.
FIGURES = ("up", CPU)
#: 0.5 % loss (the PDR's definition); width 2 %, well inside the verdict rule's 5 %.
#: Each load is judged on two final trials' time with an exceed ratio of 0.5 (the draft's
#: goal exceed ratio, for a SUT with rare loss episodes the load did not cause): a load that
#: passes once is met, one that fails is measured again and missed only if it fails twice.
#: With one trial deciding, a single stall of a shared machine set the upper bound of a
#: whole search: a CI run's parent searched 96/20/103/99 Mbit/s, and the 20 % slower
#: candidate's verdict was unresolved ("no change (unresolved)" then) at x0.92 [0.69, 1.90].
PDR_LOSS, PDR_WIDTH, PDR_EXCEED, PDR_TRIALS_PER_LOAD = 0.005, 0.02, 0.5, 2


def pdr_goal(seconds: float) -> Goal:
    """The comparison's PDR goal for final trials of ``seconds``."""
    return Goal("PDR", PDR_LOSS, width=PDR_WIDTH, exceed_ratio=PDR_EXCEED, duration_sum=PDR_TRIALS_PER_LOAD * seconds)


#: The trial length, warm-up and budget a decision of the CPU figure needs (issue 54), set from
#: tools/decision-power on the default virtual lab with the pages' noise: the CPU figure's
#: trial carries ~11.7 statclock ticks a second of up stream (jumbo frames), so a 2 s trial's
#: floors alone spread it 2.5 % and 5 % took ~25 pairs; 8 s trials (~94 ticks, floors 0.6 %,
#: the noise's 2 %/1 s draw 0.69 %) decide a 5 % costlier build in ~5-7 pairs of ~19 s and
#: prove identical builds equal in ~7, so the 16-pair budget ends any decision within ~5 min.
#: The warm-up after a swap is the driver re-attaching, not the trial: 2 s (identical builds
#: read x1.00 with it). docs/DESIGN.md "The merge decision" has the table these come from.
DEFAULT_SECONDS = 8.0
DEFAULT_WARMUP_S = 2.0

#: The configuration a comparison measures (the pages' rate configuration): one place for
#: the plugin and tools/decision-power.
RATE_CONFIGURATION = {"outer": "ipv4", "inner": "ipv4", "cipher": "aes-gcm-16", "children": "one"}

PDR_DATAGRAM = 1200  # bytes of UDP payload, as tests_hil/test_ndr_pdr.py: below every inner limit
PDR_MAX_TRIALS = 40


class ComparisonError(LabError):
    """A trial could not be measured (iperf3 error, a swap that failed): no verdict."""


@dataclass(frozen=True)
class Builds:
    """The two builds of one model: what the run replaces, and what it proposes."""

    model: str
    parent: Path
    candidate: Path

    def path(self, role: str) -> Path:
        return self.parent if role == PARENT else self.candidate

    def identity(self, role: str) -> ModuleBuild:
        return local_build(self.path(role))[1]


@dataclass(frozen=True)
class Trial:
    """One measurement of one figure under one build, in measurement order."""

    index: int
    role: str
    figure: str
    value: float
    unit: str  # Mbit/s for a rate, us/frame for the CPU figure
    started: float  # seconds since the phase started


@dataclass
class BuildComparison:
    """Everything the page, the plot and the exit status need about one model's comparison."""

    model: str
    tunnel_case: str
    builds: Builds
    pairs: int
    trial_seconds: float
    trials: list[Trial] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    swaps: int = 0
    warmups: list[float] = field(default_factory=list)  # Mbit/s of the discarded trial after each swap
    wall_seconds: float = 0.0
    error: str | None = None
    design: str = "fixed"  # or the sequential rule's description

    @property
    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.verdict is Verdict.REGRESSION]

    @property
    def unresolved(self) -> list[Comparison]:
        """The figures whose interval crosses the threshold: no verdict either way, not a pass."""
        return [c for c in self.comparisons if c.verdict is Verdict.UNRESOLVED]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "tunnel_case": self.tunnel_case, "pairs": self.pairs,
            "trial_seconds": self.trial_seconds, "design": self.design, "swaps": self.swaps, "warmups": self.warmups, "wall_seconds": round(self.wall_seconds, 1),
            "parent": str(self.builds.parent), "candidate": str(self.builds.candidate), "error": self.error,
            "trials": [t.__dict__ for t in self.trials], "comparisons": [c.to_dict() for c in self.comparisons],
        }


def figure_name(figure: str, seconds: float) -> str:
    if figure == CPU:
        return f"DUT kernel CPU per data frame (sys + intr of kern.cp_time over the trial's streams), {seconds:g} s"
    if figure == PDR:
        missed_when = math.floor(PDR_EXCEED * PDR_TRIALS_PER_LOAD) + 1  # trials over the loss that miss a load
        return (f"PDR (loss <= {100 * PDR_LOSS:g} %, width {100 * PDR_WIDTH:g} %, a load missed when "
                f"{missed_when} of {PDR_TRIALS_PER_LOAD} trials exceed it), "
                f"{PDR_DATAGRAM}-byte UDP, {seconds:g} s final trials")
    return f"1 TCP stream {figure}, {seconds:g} s"


def check_figures(figures: Sequence[str]) -> tuple[str, ...]:
    """The figures named, in order, or a ValueError naming the unknown one."""
    out = tuple(f.strip() for f in figures if f.strip())
    for f in out:
        if f not in KNOWN_FIGURES:
            raise ValueError(f"unknown comparison figure {f!r}; known: {', '.join(KNOWN_FIGURES)}")
    if not out:
        raise ValueError(f"no comparison figure named; known: {', '.join(KNOWN_FIGURES)}")
    if len(set(out)) != len(out):
        raise ValueError(f"a comparison figure is named twice: {', '.join(out)}")
    return out


def _measure_pdr(active: Any, seconds: float) -> float:
    """The PDR's proved lower bound (Mbit/s of UDP payload offered) of one search.

    Range as tests_hil/test_ndr_pdr.py: 2 % .. 1.1 x the slowest link on the path. No
    lower bound (nothing met 0.5 % loss down to 2 % of the link) is a failed trial."""
    target, src = active.inner_address("remote"), active.bench_inner_address("local")
    link = active.floor(via_bench=True).link_mbit
    wanted = pdr_goal(seconds)
    try:
        result = search(udp_trial(active.bench, active.remote, target, size=PDR_DATAGRAM, bind=src),
                        max_rate=1.1 * link, min_rate=0.02 * link, goals=(wanted,), final_duration=seconds,
                        phases=0, max_trials=PDR_MAX_TRIALS)
    except LabError as exc:
        raise ComparisonError(f"{active.name}: PDR search: {exc}") from exc
    goal = result.goal(wanted.name)
    if goal.lower_bound is None:
        raise ComparisonError(f"{active.name}: PDR search proved no lower bound down to {0.02 * link:.1f} Mbit/s "
                              f"in {result.trial_count} trials ({goal.note or 'no note'})")
    return goal.lower_bound


def _measure(active: Any, figure: str, seconds: float) -> float:
    """One figure's value (Mbit/s): a TCP stream through the tunnel between the bench and
    the remote end, or the PDR of one search."""
    if figure == PDR:
        return _measure_pdr(active, seconds)
    target, src = active.inner_address("remote"), active.bench_inner_address("local")
    res = iperf_run(active.bench, active.remote, target, seconds=seconds, reverse=figure == "down", bind=src)
    if not res.ok or not res.received_bps:
        raise ComparisonError(f"{active.name}: iperf3 {figure}: {res.error or 'no bytes received'}")
    return res.received_bps / 1e6


def _measure_with_cpu(active: Any, streams: Sequence[str], seconds: float,
                      costs: list | None = None) -> tuple[dict[str, float], float]:
    """The streams' Mbit/s, in order, and the DUT's kernel microseconds per data frame over
    all of them (measuring.cpu_cost: one read before the first stream and one after each;
    ``costs``: the trial's combined cpu_cost.CpuCost appended, its ticks for the caller to
    count)."""
    try:
        prev = cpu_cost.read(active.local)
        rates: dict[str, float] = {}
        windows = []
        for stream in streams:
            rates[stream] = _measure(active, stream, seconds)
            cur = cpu_cost.read(active.local)
            windows.append(cpu_cost.cost_between(prev, cur, stream))
            prev = cur
        cost = cpu_cost.combine(windows)
    except LabError as exc:
        raise ComparisonError(f"{active.name}: CPU per data frame: {exc}") from exc
    if costs is not None:
        costs.append(cost)
    return rates, cost.us_per_frame


def cpu_streams(figures: Sequence[str]) -> tuple[str, ...]:
    """The streams the CPU figure's window spans: every stream the comparison measures (its
    window is the trial's traffic), the up stream when it measures none."""
    return tuple(f for f in STREAMS if f in figures) or (STREAMS[0],)


def _measure_trial(active: Any, figures: Sequence[str], seconds: float, costs: list | None = None,
                   streams: Sequence[str] | None = None) -> dict[str, float]:
    """Every figure of one trial, in the order asked. The CPU figure spans ``streams``
    (default :func:`cpu_streams` of ``figures``; the comparison passes its own, so a decided
    stream figure still carries the CPU figure's window), their rates reused for the stream
    figures asked."""
    values: dict[str, float] = {}
    if CPU in figures:
        rates, values[CPU] = _measure_with_cpu(active, streams or cpu_streams(figures), seconds, costs)
        values.update((f, v) for f, v in rates.items() if f in figures)
    for figure in figures:
        if figure not in values:
            values[figure] = _measure(active, figure, seconds)
    return {f: values[f] for f in figures}


def direction_of(figure: str) -> Direction:
    return Direction.LOWER_IS_BETTER if figure == CPU else Direction.HIGHER_IS_BETTER


def unit_of(figure: str) -> str:
    return "us/frame" if figure == CPU else "Mbit/s"


def _switch(deployments: Sequence[DriverDeployment], path: Path) -> None:
    for dep in deployments:
        try:
            dep.switch_to(path)
        except LabError as exc:
            raise ComparisonError(f"swapping to {path} on {dep.appliance.name}: {exc}") from exc


def compare_builds(active: Any, deployments: Sequence[DriverDeployment], builds: Builds, *,
                   pairs: int, seconds: float, rule: Rule | None = None,
                   figures: Sequence[str] = FIGURES, sequential: SequentialRule | None = None,
                   warmup: float | None = None) -> BuildComparison:
    """Measure ``figures`` on ``active`` (an ActiveTunnel with a bench route in place) in
    interleaved pairs of trials and judge each figure.

    Fixed design (``sequential`` None): ``pairs`` pairs, :func:`compare_trials` with ``rule``.
    Sequential design: up to ``sequential.max_pairs`` pairs (``pairs`` is ignored); after each
    pair from ``min_pairs`` on every undecided figure is looked at
    (:func:`ipsec_hil.lab.decision.sequential.sequential_look`), a decided figure is no longer
    measured, and the phase ends when every figure is decided.

    ``figures``: names from :data:`KNOWN_FIGURES` (checked by :func:`check_figures`).
    ``warmup``: seconds of the discarded stream after each swap (None: :data:`DEFAULT_WARMUP_S`,
    at most ``seconds``).
    ``deployments``: the ``--driver`` deployments of the tunnel's appliances of this model
    (already deployed: their backup holds the appliance's own module). A trial that
    cannot be measured ends the phase with ``error`` set and no comparisons.
    """
    figures = check_figures(figures)
    budget = sequential.max_pairs if sequential is not None else pairs
    out = BuildComparison(builds.model, active.name, builds, budget, seconds,
                          design=sequential.describe() if sequential is not None else "fixed")
    decided: dict[str, Comparison] = {}
    t0 = time.monotonic()
    loaded: str | None = CANDIDATE  # --driver deployed the candidate
    try:
        for index, role in enumerate(interleaved_schedule(budget)):
            if role != loaded:
                loaded = None  # unknown until the swap succeeded
                _switch(deployments, builds.path(role))
                out.swaps += 1
                loaded = role
                # discarded: the first stream after a swap ran 10-40 % slow on the twin
                # (the driver re-attaching re-offloads the SAs and resyncs routes); always a
                # TCP stream, whatever the figures, so a PDR-only comparison does not pay a search
                out.warmups.append(round(_measure(active, STREAMS[0], warmup or min(seconds, DEFAULT_WARMUP_S)), 3))
            started = time.monotonic() - t0
            wanted = [f for f in figures if f not in decided]
            extra = {"streams": cpu_streams(figures)} if CPU in wanted else {}
            for figure, value in _measure_trial(active, wanted, seconds, **extra).items():
                out.trials.append(Trial(index, role, figure_name(figure, seconds), round(value, 3), unit_of(figure),
                                        round(started, 2)))
                log.info("comparison %s trial %d %s %s: %.3f %s", builds.model, index, role, figure, value,
                         unit_of(figure))
            if sequential is not None and index % 2 == 1 and (index + 1) // 2 >= sequential.min_pairs:
                decided.update(_look(out, wanted, seconds, sequential))
                if len(decided) == len(figures):
                    break
    except ComparisonError as exc:
        out.error = str(exc)
    finally:
        if loaded != CANDIDATE:  # the parent, or a swap that failed half-way
            try:
                _switch(deployments, builds.candidate)
                out.swaps += 1
            except ComparisonError as exc:
                out.error = f"{out.error}; AND the candidate could not be loaded again: {exc}" if out.error else str(exc)
        out.wall_seconds = time.monotonic() - t0
    if out.error is None:
        for figure in figures:
            out.comparisons.append(decided[figure] if figure in decided else compare_trials(
                _measured(out, figure, seconds), rule=rule))
    out.pairs = max((t.index for t in out.trials), default=-1) // 2 + 1
    return out


def _measured(out: BuildComparison, figure: str, seconds: float) -> FigureTrials:
    """The trials of ``figure`` measured so far, as the decision takes them."""
    name = figure_name(figure, seconds)
    return FigureTrials(name, [(t.role, t.value) for t in out.trials if t.figure == name],
                        direction=direction_of(figure), unit=unit_of(figure))


def _look(out: BuildComparison, figures: Sequence[str], seconds: float,
          rule: SequentialRule) -> dict[str, Comparison]:
    """The figures a look after the last pair decided, with the look's reason on each."""
    done: dict[str, Comparison] = {}
    for figure in figures:
        look = sequential_look(_measured(out, figure, seconds), rule=rule)
        if look.decided:
            done[figure] = replace(look.comparison, reason=look.reason)
    return done
