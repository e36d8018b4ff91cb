"""``--parent-driver MODEL=PATH``: candidate against parent in one run (issue 14).

Beside ``--driver MODEL=candidate.ko``. The functional tests run on the candidate (the
``--driver`` part deployed it at lab-ready); then, in :meth:`ParentRun.finish` (a part of
the run's context, ipsec_hil.context.Part, called by the controller after every test and,
in the parts' order, before the ``--driver`` part restores the appliance's own module and
before the page is written), this phase brings
up one tunnel per model (outer IPv4, inner IPv4, AES-GCM, one child: the page's rate
configuration), swaps parent and candidate on that tunnel's appliances in the
interleaved order and judges each rate figure (:mod:`ipsec_hil.lab.comparing.build_comparison`).

Exit status (ipsec_hil.exitcodes), most serious first: whatever already ended the run badly
(tests failed = 1, lab not up = 17, ...) stands; else a comparison that could not be
measured gives ``COMPARISON_NOT_MEASURED`` (the lab broke, no verdict); else any
figure's "regression" gives ``CANDIDATE_REGRESSION``; else any figure left "unresolved"
(its interval crosses the threshold) gives ``COMPARISON_UNRESOLVED``: a merge bot that reads
0 may merge, and an unresolved figure has not shown that it may. The verdicts are printed
and on the page whatever the exit status.

The one-line answer (:func:`verdict_line`, the terminal's, the page's first screen and
Allure's) says "no regression" only when every figure is proved no worse than its parent:
an unresolved figure reads with its interval ("unresolved: candidate/parent between 1.019
and 1.063"), and a figure measured worse within the threshold or the lab's noise is named
as worse (issue 54: a CPU figure at x1.041 [1.019, 1.063] was once "no regression", exit 0).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ipsec_hil.context import Part, RunContext, run_context
from ipsec_hil.driver_plugin import driver_run, parse_driver_options
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.reporting.allure_results import Attachment, write_result
from ipsec_hil.lab.reporting.page import Bold, Bullets, Code, Image, Item, Paragraph, Section
from ipsec_hil.lab.comparing.build_comparison import (DEFAULT_SECONDS, FIGURES, KNOWN_FIGURES, RATE_CONFIGURATION,
                                                      BuildComparison, Builds, check_figures, compare_builds)
from ipsec_hil.lab.cases import TunnelCase, tunnel_cases
from ipsec_hil.lab.decision.compare import Comparison, Rule, Verdict
from ipsec_hil.lab.decision.errors import DecisionError
from ipsec_hil.lab.decision.sequential import FIXED_PAIRS, SequentialRule
from ipsec_hil.lab.decision.plot import plot_comparisons
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.live_lab import Lab
from ipsec_hil.lab.tunnel import bring_up
from ipsec_hil.lab.traffic.bench_routes import BenchRoutes
from ipsec_hil.session import reports_dir, wants_lab

log = logging.getLogger(__name__)

__all__: list[str] = []



@dataclass
class ParentRun(Part):
    """The run's parent builds and, after the phase, one comparison per model."""

    parents: dict[str, Path]
    pairs: int
    seconds: float
    figures: tuple[str, ...] = FIGURES
    sequential: SequentialRule | None = None  # None: the fixed design of ``pairs`` pairs
    results: list[BuildComparison] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)

    name = "comparison"

    @classmethod
    def from_config(cls, config: pytest.Config) -> ParentRun:
        """The options checked (a usage error names the wrong one); no parents: an idle part."""
        values = config.getoption("--parent-driver", []) or []
        if not values:
            return cls({}, 0, 0.0)
        parsed = parse_driver_options(values, Path(config.invocation_params.dir), option="--parent-driver")
        candidates = config.getoption("--driver", []) or []
        cand_models = {v.partition("=")[0] for v in candidates}
        for model in parsed:
            if model not in cand_models:
                raise pytest.UsageError(f"--parent-driver {model}=...: no --driver {model}=CANDIDATE to compare it with")
        pairs, seconds = config.getoption("--compare-pairs"), config.getoption("--compare-seconds")
        design = config.getoption("--compare-design")
        sequential = None
        if design == "sequential":
            try:
                sequential = SequentialRule() if pairs is None else SequentialRule(max_pairs=pairs)
            except DecisionError as exc:
                raise pytest.UsageError(f"--compare-pairs {pairs}: {exc}") from None
            pairs = sequential.max_pairs
        elif pairs is None:
            pairs = FIXED_PAIRS
        if pairs < Rule().min_pairs:
            raise pytest.UsageError(f"--compare-pairs {pairs}: the verdict rule needs at least {Rule().min_pairs} pairs")
        if not seconds >= 1:
            raise pytest.UsageError(f"--compare-seconds {seconds}: at least 1 (iperf3 counts whole seconds)")
        try:
            figures = check_figures(str(config.getoption("--compare-figures")).split(","))
        except ValueError as exc:
            raise pytest.UsageError(f"--compare-figures: {exc}") from None
        return cls({m: p for m, (p, _) in parsed.items()}, pairs, seconds, figures, sequential)

    def finish(self, ctx: RunContext, session: pytest.Session) -> None:
        if self.parents and wants_lab(session.config) and not (self.results or self.not_measured):
            _finish(self, ctx, session)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil")
    group.addoption("--parent-driver", action="append", default=[], metavar="MODEL=PATH",
                    help="the build the --driver candidate replaces: after the tests, measure both in "
                         "interleaved trials and judge each rate figure (regression: exit "
                         f"{int(HilExitCode.CANDIDATE_REGRESSION)}; unresolved: exit "
                         f"{int(HilExitCode.COMPARISON_UNRESOLVED)})")
    group.addoption("--compare-design", choices=("sequential", "fixed"), default="sequential",
                    help="sequential (default): pairs until each figure's interval decides against +-2.5 %% "
                         "or the budget ends (decision/sequential.py); fixed: --compare-pairs pairs, +-5 %% rule")
    group.addoption("--compare-pairs", type=int, default=None, metavar="N",
                    help=f"the budget of pairs per figure (sequential, default {SequentialRule().max_pairs}) or the "
                         f"pairs (fixed, default {FIXED_PAIRS}); the rules need >= 3")
    group.addoption("--compare-seconds", type=float, default=DEFAULT_SECONDS, metavar="S",
                    help=f"seconds of traffic per comparison trial (default {DEFAULT_SECONDS:g}, the length "
                         "tools/decision-power measured the decision's power with; a PDR search's final trials)")
    group.addoption("--compare-figures", default=",".join(FIGURES), metavar="LIST",
                    help=f"figures each comparison trial measures, of {', '.join(KNOWN_FIGURES)} "
                         f"(default {','.join(FIGURES)}: the rate and the CPU per data frame, as the decision's "
                         "power was measured; down adds a stream per trial; pdr runs one PDR search per trial, "
                         "~10x a stream)")


def parent_run(config: pytest.Config) -> ParentRun | None:
    """The run's comparison state, or None when no ``--parent-driver`` was given."""
    pr = run_context(config).part(ParentRun)
    return pr if pr.parents else None


def comparison_case(topology, model: str) -> TunnelCase | None:
    cases = tunnel_cases(topology, model=model, **RATE_CONFIGURATION)
    return cases[0] if cases else None


def _compare_model(config: pytest.Config, lab: Lab, pr: ParentRun, model: str, candidate: Path) -> BuildComparison:
    case = comparison_case(lab.topology, model)
    if case is None:
        raise LabError(f"{model}: the topology has no tunnel from a {model} in the rate configuration "
                       f"({RATE_CONFIGURATION})")
    builds = Builds(model, pr.parents[model], candidate)
    dr = driver_run(config)
    run_id = "cmp-" + uuid.uuid4().hex[:8]
    with bring_up(lab, case, run_id=run_id) as active:
        hosts = {active.local.name, active.remote.name}
        deployments = [d for d in (dr.deployments if dr else []) if d.appliance.name in hosts
                       and d.backup is not None and str(d.local_path) == str(candidate)]
        if not deployments:
            raise LabError(f"{model}: the candidate is not deployed on {', '.join(sorted(hosts))}")
        # journalled on the bench (the run holds its lease): a run killed mid-comparison
        # leaves the route to the next run's recovery
        with BenchRoutes(active.bench, run_id) as routes:
            routes.add(active.inner_prefix("remote"), active.inner_address("local"))
            return compare_builds(active, deployments, builds, pairs=pr.pairs, seconds=pr.seconds,
                                  figures=pr.figures, sequential=pr.sequential)


def _write_outputs(config: pytest.Config, pr: ParentRun) -> None:
    out = reports_dir(config)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps([r.to_dict() for r in pr.results], indent=1))
    alluredir = getattr(config.option, "allure_report_dir", None)
    for r in pr.results:
        if not r.comparisons:
            continue
        path = out / "plots" / f"parent-vs-candidate-{r.model}.png"
        png = plot_comparisons(r.comparisons, path)
        pr.plots.append(path)
        if alluredir:
            for c in r.comparisons:
                _allure_result(alluredir, r, c, png)


#: Allure's status per verdict: an unresolved figure is not a pass ("unknown": no claim either way)
ALLURE_STATUS = {Verdict.REGRESSION: "failed", Verdict.UNRESOLVED: "unknown"}


def _allure_result(alluredir: str, r: BuildComparison, c: Comparison, png: bytes) -> None:
    """One Allure result per figure: failed on a regression, unknown when unresolved; its
    historyId is the model and figure, so Allure's history trends candidate/parent per figure
    across runs."""
    write_result(
        alluredir, name=f"candidate vs parent: {r.model} {c.figure}",
        full_name=f"compare::{r.model}::{c.figure}", history_id=f"ipsec-hil-compare-{r.model}-{c.figure}",
        status=ALLURE_STATUS.get(c.verdict, "passed"), message=c.summary(),
        suite="candidate vs parent", description=f"{r.tunnel_case}: parent {r.builds.parent}, candidate "
                                                 f"{r.builds.candidate}",
        parameters={"ratio": f"{c.ratio:.3f}", "interval": f"[{c.ci_low:.3f}, {c.ci_high:.3f}]",
                    "verdict": c.answer()},
        attachments=[Attachment("parent vs candidate", png, "image/png", "png"),
                     Attachment("trials.json", json.dumps(c.to_dict(), indent=1).encode(), "application/json", "json")])


def _finish(pr: ParentRun, ctx: RunContext, session: pytest.Session) -> None:
    config = session.config
    dr = driver_run(config)
    if dr is None or not dr.results:
        pr.not_measured.append("the candidate was never deployed: nothing to compare")
    else:
        lab = ctx.live_lab()  # the run's connected lab (ipsec_hil.context): closed by the run
        for model, (candidate, _) in dr.requested.items():
            if model not in pr.parents:
                continue
            try:
                result = _compare_model(config, lab, pr, model, candidate)
            except LabError as exc:
                pr.not_measured.append(f"{model}: {exc}")
                continue
            pr.results.append(result)
            if result.error:
                pr.not_measured.append(f"{model}: {result.error}")
        _write_outputs(config, pr)
    _report(config, pr)
    if session.exitstatus == 0:
        session.exitstatus = exit_status(pr)


def exit_status(pr: ParentRun) -> int:
    """The comparison's own exit status, for a run whose tests passed (the module's docstring:
    the order, most serious first)."""
    if pr.not_measured:
        return HilExitCode.COMPARISON_NOT_MEASURED
    if any(r.regressions for r in pr.results):
        return HilExitCode.CANDIDATE_REGRESSION
    if any(r.unresolved for r in pr.results):
        return HilExitCode.COMPARISON_UNRESOLVED
    return 0


def verdict_line(pr: ParentRun) -> str:
    """The run's one-line answer to "does the candidate make anything worse than its parent".

    "no regression" only when no figure is a regression, none is unresolved and none was
    measured worse than its parent (its interval wholly on the worse side of 1.00)."""
    if pr.not_measured:
        return "NOT MEASURED: " + "; ".join(pr.not_measured)
    figures = [(r.model, c) for r in pr.results for c in r.comparisons]

    def interval(c: Comparison) -> str:
        return f"x{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}]"

    regs = [(m, c) for m, c in figures if c.verdict is Verdict.REGRESSION]
    unresolved = [(m, c) for m, c in figures if c.verdict is Verdict.UNRESOLVED]
    heads = []
    if regs:
        heads.append(f"REGRESSION in {len(regs)} figure(s): " + "; ".join(f"{m} {c.figure} {interval(c)}"
                                                                         for m, c in regs))
    if unresolved:
        heads.append(f"UNRESOLVED in {len(unresolved)} figure(s): " + "; ".join(f"{m} {c.figure} {c.answer()}"
                                                                                for m, c in unresolved))
    if heads:
        return "; also ".join(heads)
    worse = [(m, c) for m, c in figures if c.worse_than_parent]
    if worse:
        return (f"no figure past the threshold, but worse than the parent in {len(worse)} figure(s) (within the "
                "threshold or the lab's noise): " + "; ".join(f"{m} {c.figure} {c.answer()} {interval(c)}"
                                                               for m, c in worse)
                + "".join(f"; {m} {c.figure} {c.answer()}" for m, c in figures if not c.worse_than_parent))
    return "no regression: " + "; ".join(f"{m} {c.figure} {c.answer()}" for m, c in figures)


def summary_lines(pr: ParentRun) -> list[str]:
    lines = [f"candidate vs parent: {verdict_line(pr)}"]
    for r in pr.results:
        lines.append(f"  {r.model} on {r.tunnel_case}: parent {r.builds.parent} (md5 {r.builds.identity('parent').md5}), "
                     f"candidate {r.builds.candidate} (md5 {r.builds.identity('candidate').md5}); {r.pairs} pairs ({r.design}) of "
                     f"{r.trial_seconds:g} s trials, {r.swaps} swaps (each followed by a discarded warm-up stream), "
                     f"{r.wall_seconds:.1f} s added")
        lines += [f"    {c.summary()}" for c in r.comparisons]
    return lines


def _report(config: pytest.Config, pr: ParentRun) -> None:
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.section("candidate vs parent")
        for line in summary_lines(pr):
            terminal.write_line(line)


def page_section(pr: ParentRun) -> Section:
    items = [Item((f"{r.model} on ", Code(str(r.tunnel_case)), f": {r.pairs} interleaved pairs ({r.design}; parent, "
                   f"candidate, candidate, parent, ...) of {r.trial_seconds:g} s trials, {r.swaps} build swaps each "
                   f"followed by a discarded warm-up stream ({', '.join(f'{w:.1f}' for w in r.warmups)} Mbit/s), "
                   f"{r.wall_seconds:.1f} s"),
                  tuple(Item(c.summary()) for c in r.comparisons)
                  + tuple(Item(f"trial {t.index} {t.role}: {t.figure} = "
                               f"{t.value:.{1 if t.unit == 'Mbit/s' else 3}f} {t.unit}") for t in r.trials))
             for r in pr.results]
    items += [Item(Image("parent vs candidate", f"plots/{p.name}")) for p in pr.plots]
    return Section("Candidate against parent", (Paragraph(Bold(verdict_line(pr))), Bullets(tuple(items))))


def pytest_hil_page_sections(config: pytest.Config) -> Section | None:
    pr = parent_run(config)
    return page_section(pr) if pr is not None and (pr.results or pr.not_measured) else None


def pytest_hil_page_verdict(config: pytest.Config) -> list[str] | None:
    pr = parent_run(config)
    if pr is None or not (pr.results or pr.not_measured):
        return None
    return [f"candidate against parent: {verdict_line(pr)}"] + [c.summary() for r in pr.results for c in r.comparisons]


def pytest_hil_allure_environment(config: pytest.Config) -> dict[str, str] | None:
    pr = parent_run(config)
    if pr is None:
        return None
    env = {"candidate_vs_parent.verdict": verdict_line(pr)}
    for model, path in pr.parents.items():
        env[f"parent_driver.{model}.file"] = str(path)
    return env
