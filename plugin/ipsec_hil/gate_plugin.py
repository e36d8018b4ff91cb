"""``--save-baseline FILE`` / ``--baseline FILE`` / ``--gate``: the merge gate's hooks.

Thin glue over :mod:`ipsec_hil.lab.measuring.baseline` (pure): :class:`GateRun` is a part of
the run's context (ipsec_hil.context.Part). The figures come from what the run's
controller gathered (the context's entries: every test's record, carried from xdist
workers in the reports' user_properties), the driver builds from the hardware facts it
read once.

- :meth:`GateRun.from_config`: ``--gate`` needs ``--baseline``; the baseline file is loaded
  and validated at once (a bad file is a usage error, exit 4, naming the file and field --
  before an hour of measurements).
- :meth:`GateRun.finish` (controller, after the driver was restored, before the page):
  take the appliances' driver builds and kernel (environment), compare with the
  baseline (``baseline-comparison.json`` beside the page, an Allure result "Compared with
  baseline" with the table attached), then save this run as a repeat if asked. With
  ``--gate`` a regression sets the exit code :data:`GATE_REGRESSION` (18); a comparison
  that found none of the baseline's rates in this run is :data:`GATE_NOTHING_COMPARED`
  (21): a gate that measured nothing must not pass; and a run in which some selected
  tests did not run is :data:`GATE_INCOMPLETE` (26): the gate did not establish what it
  was asked to (the page's first screen lists what, under "Not established").
- ``pytest_hil_page_sections`` / ``pytest_hil_allure_environment`` (ipsec_hil.hookspecs): the
  "Compared with baseline" section and the ``baseline.*`` environment keys.
- ``pytest_terminal_summary``: the verdict and the driver builds compared.

Saving refuses a run whose exit status is not 0: a baseline is a reference, and a run with
failed or broken tests is not one (its figures are still on the page).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ipsec_hil.context import Part, RunContext, run_context
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.reporting import sections
from ipsec_hil.lab.reporting.allure_results import Attachment, write_result
from ipsec_hil.lab.reporting.page import Section
from ipsec_hil.lab.measuring import baseline as bl
from ipsec_hil.session import command_line, hil_session, reports_dir, wants_lab

log = logging.getLogger(__name__)

__all__: list[str] = []

#: ``--gate`` and a regression / nothing compared: the run's exit codes (ipsec_hil.exitcodes).
GATE_REGRESSION = HilExitCode.GATE_REGRESSION
GATE_NOTHING_COMPARED = HilExitCode.GATE_NOTHING_COMPARED
GATE_INCOMPLETE = HilExitCode.GATE_INCOMPLETE

COMPARISON_JSON = "baseline-comparison.json"


@dataclass
class GateRun(Part):
    save: Path | None = None
    against: Path | None = None
    gate: bool = False
    base: bl.Baseline | None = None
    comparison: bl.Comparison | None = None
    saved: bl.Baseline | None = None
    messages: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    allure_environment: dict[str, str] = field(default_factory=dict)

    name = "gate"

    @classmethod
    def from_config(cls, config: pytest.Config) -> GateRun:
        g = cls(save=_path(config, config.getoption("--save-baseline", None)),
                against=_path(config, config.getoption("--baseline", None)),
                gate=bool(config.getoption("--gate", False)))
        if g.gate and g.against is None:
            raise pytest.UsageError("--gate needs --baseline FILE (the run to compare with)")
        if g.against is not None:
            try:
                g.base = bl.load(g.against)
            except bl.BaselineError as exc:
                raise pytest.UsageError(f"--baseline: {exc}") from None
        if g.save is not None and g.save.exists():
            try:
                bl.load(g.save)
            except bl.BaselineError as exc:
                raise pytest.UsageError(f"--save-baseline: the file exists but is not a baseline: {exc}") from None
        return g

    def finish(self, ctx: RunContext, session: pytest.Session) -> None:
        if self.save is not None or self.base is not None:
            _finish(self, ctx, session)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil")
    group.addoption("--save-baseline", metavar="FILE", default=None,
                    help="save this run's figures, counters and environment as a baseline (a file that "
                    "exists gets one more repeat: the spread of the repeats is the noise)")
    group.addoption("--baseline", metavar="FILE", default=None,
                    help="compare this run's rates with a baseline: below mean - max(3 x stdev, 2 %% of "
                    "mean) is a regression (page section 'Compared with baseline')")
    group.addoption("--gate", action="store_true", default=False,
                    help=f"with --baseline: any regression makes the run exit {GATE_REGRESSION}")


def _path(config: pytest.Config, value: str | None) -> Path | None:
    if not value:
        return None
    p = Path(value)
    return p if p.is_absolute() else Path(config.invocation_params.dir) / p


# ----------------------------------------------------------------- Allure


def write_allure_result(config: pytest.Config, comparison: bl.Comparison) -> Path | None:
    """One Allure result, "Compared with baseline", failed on a regression, with the table
    (Markdown) and the comparison (JSON) attached -- run-level facts have no test of their own."""
    alluredir = getattr(config.option, "allure_report_dir", None)
    if not alluredir:
        return None
    return write_result(
        alluredir, name="Compared with baseline", full_name="gate::compared_with_baseline",
        history_id="ipsec-hil-gate-baseline", status="passed" if comparison.passed else "failed",
        message=comparison.summary() + ". Builds: " + comparison.builds_line(),
        description=f"Baseline {comparison.source}; builds compared: {comparison.builds_line()}",
        attachments=[Attachment("baseline comparison", sections.baseline_comparison_markdown(comparison).encode(),
                                "text/markdown", "md"),
                     Attachment("baseline comparison.json", (json.dumps(comparison.to_dict(), indent=1) + "\n").encode(),
                                "application/json", "json")],
        suite="gate")


# ----------------------------------------------------------------- what the run recorded


def run_figures(config: pytest.Config) -> tuple[list[bl.FigureValue], dict[str, list[str]], dict[str, str]]:
    """(figures, ledger tables per test, outcome per test) from the controller's entries."""
    entries = run_context(config).entries.by_nodeid
    figures: list[bl.FigureValue] = []
    counters: dict[str, list[str]] = {}
    outcomes: dict[str, str] = {}
    for raw_id, e in sorted(entries.items()):
        nodeid = bl.canonical_nodeid(raw_id)  # without xdist's @group: serial and -n runs compare
        outcomes[nodeid] = str(e.get("outcome", "passed"))
        rec = e.get("record")  # a records.TestRecord, typed again on arrival
        if rec is None:
            continue
        figures += [bl.FigureValue(nodeid, str(f.label), f.value, str(f.unit)) for f in rec.figures]
        if rec.ledgers:
            counters[nodeid] = [str(t) for t in rec.ledgers]
    return figures, counters, outcomes


def run_environment(config: pytest.Config) -> dict[str, Any]:
    """Topology, virtual or not, and every appliance's driver build and kernel (read once by the run)."""
    topology = run_context(config).topology()
    run = hil_session(config)
    # A run that executed no acceptance test has no lab to ask (and must not connect to one).
    facts = run.hardware_facts().appliances if run is not None and wants_lab(config) else ()
    apps_env = [bl.ApplianceEnv(h.appliance, h.model, h.driver, h.module_md5, h.module_size, h.kernel) for h in facts]
    return bl.environment(topology=topology.lab.name, virtual=bool(topology.lab.virtual), appliances=apps_env,
                          traffic_seconds=config.getoption("--traffic-seconds", None),
                          command=command_line(config))


def _finish(g: GateRun, ctx: RunContext, session: pytest.Session) -> None:
    config = session.config
    figures, counters, outcomes = run_figures(config)
    g.environment = run_environment(config)
    if g.base is not None:
        c = bl.compare(g.base, figures, g.environment)
        g.comparison = c
        out = reports_dir(config)
        out.mkdir(parents=True, exist_ok=True)
        (out / COMPARISON_JSON).write_text(json.dumps(c.to_dict(), indent=1) + "\n", encoding="utf-8")
        env = {"baseline.file": c.source, "baseline.repeats": str(c.repeats), "baseline.verdict": c.summary()}
        for name, md5 in c.baseline_builds.items():
            env[f"baseline.{name}.module.md5"] = md5 or "unknown"
        g.allure_environment = env
        write_allure_result(config, c)
        g.messages.append(f"baseline {c.source}: {c.summary()}")
        g.messages.append(f"driver builds compared: {c.builds_line()}")
        for r in c.regressions:
            g.messages.append(f"  REGRESSION {r.key}: {r.current:.1f} Mbit/s < {r.mean:.1f} - {r.noise:.1f}")
        if g.gate and c.regressions and session.exitstatus in (0, 1):
            session.exitstatus = GATE_REGRESSION
            g.messages.append(f"--gate: {len(c.regressions)} regression(s): exit {int(GATE_REGRESSION)}")
        compared = [r for r in c.rows if r.verdict in ("regression", "ok", "improved")]
        if g.gate and not compared and session.exitstatus in (0, 1):
            session.exitstatus = GATE_NOTHING_COMPARED
            g.messages.append(f"--gate: none of the baseline's {len(c.rows)} rate(s) was measured by this run: "
                              f"exit {int(GATE_NOTHING_COMPARED)}")
    if g.gate:
        _judge_completeness(g, ctx, session)
    if g.save is not None:
        if session.exitstatus != 0:
            g.messages.append(f"--save-baseline {g.save}: NOT saved, the run's exit status is "
                              f"{int(session.exitstatus)} (a baseline must be a passing run)")
        elif not any(f.is_rate for f in figures):
            g.messages.append(f"--save-baseline {g.save}: NOT saved, the run recorded no rate")
        else:
            rep = bl.Repeat(date=bl.now_iso(), environment=g.environment, figures=figures, counters=counters,
                            outcomes=outcomes)
            try:
                g.saved = bl.save(g.save, rep)
                g.messages.append(f"baseline saved: {g.save} (repeat {len(g.saved.repeats)}, "
                                  f"{sum(1 for f in figures if f.is_rate)} rates)")
            except bl.BaselineError as exc:
                g.messages.append(f"--save-baseline: NOT saved: {exc}")


def _judge_completeness(g: GateRun, ctx: RunContext, session: pytest.Session) -> None:
    """``--gate``: a run in which some selected tests did not run did not establish what the
    gate asks; it exits GATE_INCOMPLETE unless the run already failed otherwise. (A run in
    which every test was skipped already exits NOTHING_MEASURED, ipsec_hil.session.)"""
    not_run = ctx.entries.not_run()
    if not not_run or session.exitstatus != 0:
        return
    session.exitstatus = GATE_INCOMPLETE
    g.messages.append(f"--gate: {len(not_run)} of {len(ctx.entries.by_nodeid)} selected acceptance test(s) did not run "
                      f"(the page's first screen lists them under 'Not established'): exit {int(GATE_INCOMPLETE)}")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    g = run_context(config).part(GateRun)
    if not g.messages:
        return
    terminalreporter.section("baseline and gate")
    for m in g.messages:
        terminalreporter.write_line(m)


def pytest_hil_page_sections(config: pytest.Config) -> Section | None:
    g = run_context(config).part(GateRun)
    return sections.baseline_comparison(g.comparison) if g.comparison is not None else None


def pytest_hil_allure_environment(config: pytest.Config) -> dict[str, str] | None:
    return run_context(config).part(GateRun).allure_environment
