"""Verdicts that say what the interval says (issue 54), on a recorded comparison.

tests/decision/recorded/cpu-x1.041-unresolved.comparison.json is issue 54's case in the
phase's own format: the CPU figure ran its 16-pair budget and ended at x1.041 [1.019, 1.063],
an interval that excludes 1.00 on the worse side and crosses the threshold. The code before
the fix wrote it as "no change", answered "no regression" and exited 0. Here its trials are
replayed through the comparison phase (``compare_builds``, the lab's streams and swaps
answered from the recording) and the plugin's finish (``compare_plugin._finish``: the
exit status, comparison.json, the terminal's and the page's one-line answer), with no lab.
The same trials, scaled, show that a figure proved inside the band stays "no change" and a
regression stays a regression.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from ipsec_hil import compare_plugin as cp
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.decision.compare import Direction, FigureTrials, Verdict, compare_trials
from ipsec_hil.lab.decision.sequential import SequentialRule
from ipsec_hil.lab.comparing import build_comparison as bc
from ipsec_hil.lab.reporting.first_screen import verdict_lines

RECORDED = json.loads((Path(__file__).parent / "recorded" / "cpu-x1.041-unresolved.comparison.json").read_text())[0]
SECONDS = RECORDED["trial_seconds"]
CPU = bc.figure_name(bc.CPU, SECONDS)
UP = bc.figure_name("up", SECONDS)
RECORDED_CPU = next(t["figure"] for t in RECORDED["trials"] if t["unit"] == "us/packet")
"""The CPU figure's name when it was recorded (per packet; per data frame since issue 54's
step 2): the recording's trials are answered under today's name."""
ANSWER = "unresolved: candidate/parent between 1.019 and 1.063"


def test_the_recording_is_issue_54s_case():
    """What the recording holds, as the code before the fix reported it: a CPU figure at
    x1.041 [1.019, 1.063] after the whole budget, written as "no change" without proof."""
    cpu = next(c for c in RECORDED["comparisons"] if c["figure"] == RECORDED_CPU)
    assert (round(cpu["ratio"], 3), round(cpu["ci_low"], 3), round(cpu["ci_high"], 3)) == (1.041, 1.019, 1.063)
    assert cpu["verdict"] == "no change" and not cpu["equivalence_proved"] and RECORDED["pairs"] == 16


def _replay(monkeypatch, tmp_path: Path, cpu_factor: float = 1.0) -> bc.BuildComparison:
    """The recorded run's phase again: every trial's figures answered from the recording (the
    candidate's CPU values times ``cpu_factor``), swaps and warm-up streams free; the two
    build files (their md5 is on the page) in ``tmp_path``."""
    values = {(t["index"], CPU if t["figure"] == RECORDED_CPU else t["figure"]):
              t["value"] * (cpu_factor if (t["figure"], t["role"]) == (RECORDED_CPU, "candidate") else 1.0)
              for t in RECORDED["trials"]}
    asked: list[tuple[str, ...]] = []

    def trial(active, figures, seconds, streams=None):
        asked.append(tuple(figures))
        return {f: values[len(asked) - 1, bc.figure_name(f, seconds)] for f in figures}

    monkeypatch.setattr(bc, "_switch", lambda deployments, path: None)
    monkeypatch.setattr(bc, "_measure", lambda active, figure, seconds: RECORDED["warmups"][0])
    monkeypatch.setattr(bc, "_measure_trial", trial)
    parent, candidate = (tmp_path / Path(RECORDED[role]).name for role in ("parent", "candidate"))
    parent.write_bytes(b"\x7fELF parent\n")
    candidate.write_bytes(b"\x7fELF candidate\n")
    builds = bc.Builds("xgs136", parent, candidate)
    out = bc.compare_builds(SimpleNamespace(name=RECORDED["tunnel_case"]), [], builds, pairs=RECORDED["pairs"],
                            seconds=SECONDS, figures=("up", "cpu"), sequential=SequentialRule(max_pairs=RECORDED["pairs"]))
    assert out.error is None and len(asked) == 2 * out.pairs
    return out


def _finish(monkeypatch, tmp_path: Path, result: bc.BuildComparison, exitstatus: int = 0):
    """``compare_plugin._finish`` on ``result`` as the model's comparison: (the session, the
    terminal's lines, the page's first-screen verdict lines, comparison.json)."""
    pr = cp.ParentRun({"xgs136": result.builds.parent}, RECORDED["pairs"], SECONDS, ("up", "cpu"), SequentialRule())
    dr = SimpleNamespace(results=["deployed"], requested={"xgs136": (result.builds.candidate, None)})
    monkeypatch.setattr(cp, "driver_run", lambda config: dr)
    monkeypatch.setattr(cp, "Lab", SimpleNamespace(connect=lambda topology: SimpleNamespace(close=lambda: None)))
    monkeypatch.setattr(cp, "_compare_model", lambda config, lab, pr, model, candidate: result)
    monkeypatch.setattr(cp, "parent_run", lambda config: pr)
    lines: list[str] = []
    terminal = SimpleNamespace(section=lambda title: None, write_line=lines.append)
    config = SimpleNamespace(rootpath=tmp_path, option=SimpleNamespace(allure_report_dir=str(tmp_path / "allure")),
                             pluginmanager=SimpleNamespace(get_plugin=lambda name: terminal))
    (tmp_path / "allure").mkdir()
    session = SimpleNamespace(config=config, exitstatus=exitstatus)
    cp._finish(pr, SimpleNamespace(topology=lambda: None, live_lab=lambda: None), session)
    page = verdict_lines(cp.pytest_hil_page_verdict(config), [])
    return session, lines, page, json.loads((tmp_path / "reports" / "comparison.json").read_text())


def test_the_recorded_unresolved_comparison_is_unresolved_everywhere_and_exits_with_its_own_code(monkeypatch, tmp_path):
    result = _replay(monkeypatch, tmp_path)
    assert result.pairs == 16 and [t.figure for t in result.trials].count(UP) == 6  # up proved at 3 pairs
    cpu = next(c for c in result.comparisons if c.figure == CPU)
    assert cpu.verdict is Verdict.UNRESOLVED and cpu.answer() == ANSWER and cpu.worse_than_parent, cpu.summary()
    assert cpu.summary().startswith(f"{CPU}: {ANSWER} (budget of 16 pairs ended: unresolved, ")
    session, lines, page, written = _finish(monkeypatch, tmp_path, result)

    assert session.exitstatus == HilExitCode.COMPARISON_UNRESOLVED == 28
    answer = f"UNRESOLVED in 1 figure(s): xgs136 {CPU} {ANSWER}"
    assert lines[0] == f"candidate vs parent: {answer}", lines
    assert page[0] == f"**Verdict: candidate against parent: {answer}**", page
    (model,) = written
    by = {c["figure"]: c for c in model["comparisons"]}
    assert by[CPU]["verdict"] == "unresolved" and by[CPU]["answer"] == ANSWER, by[CPU]
    assert not by[CPU]["equivalence_proved"] and by[CPU]["worse_than_parent"]
    assert by[UP]["verdict"] == "no change" and by[UP]["equivalence_proved"] and by[UP]["answer"] == "no change"
    recorded = next(c for c in RECORDED["comparisons"] if c["figure"] == RECORDED_CPU)
    assert set(recorded) <= set(by[CPU]), "a key comparison.json had is gone"
    allure = [json.loads(p.read_text()) for p in (tmp_path / "allure").glob("*-result.json")]
    assert {r["fullName"]: r["status"] for r in allure} == {f"compare::xgs136::{UP}": "passed",
                                                             f"compare::xgs136::{CPU}": "unknown"}
    everything = "\n".join(lines + page) + json.dumps(written)
    assert "no regression" not in everything


def test_the_fixed_rule_on_the_recorded_trials_is_unresolved_across_its_5_percent_threshold():
    """The fixed design (95 % bootstrap, +-5 %) on the recording's first 4 pairs, as
    tools/decision-power judges it: [1.027, 1.071] excludes 1.00 and crosses 1.05."""
    trials = [(t["role"], t["value"]) for t in RECORDED["trials"] if t["figure"] == RECORDED_CPU][:8]
    c = compare_trials(FigureTrials(CPU, trials, direction=Direction.LOWER_IS_BETTER, unit="us/packet"))
    assert c.rule.threshold == 0.05 and c.ci_low < 1.05 < c.ci_high and c.worse_than_parent
    assert c.verdict is Verdict.UNRESOLVED and c.answer() == "unresolved: candidate/parent between 1.027 and 1.071"
    assert c.to_dict()["verdict"] == "unresolved"


def test_an_interval_inside_the_band_stays_no_change(monkeypatch, tmp_path):
    """The recording's candidate CPU values over 1.041: the same spread around x1.00, an
    interval wholly inside [0.975, 1.025]: no change, "no regression", exit 0."""
    result = _replay(monkeypatch, tmp_path, cpu_factor=1 / 1.041)
    cpu = next(c for c in result.comparisons if c.figure == CPU)
    assert cpu.verdict is Verdict.NO_CHANGE and 0.975 <= cpu.ci_low and cpu.ci_high <= 1.025, cpu.summary()
    assert not cpu.worse_than_parent
    session, lines, page, written = _finish(monkeypatch, tmp_path, result)
    assert session.exitstatus == 0
    assert lines[0] == f"candidate vs parent: no regression: xgs136 {UP} no change; xgs136 {CPU} no change", lines
    assert {c["verdict"] for c in written[0]["comparisons"]} == {"no change"}


def test_a_regression_stays_a_regression(monkeypatch, tmp_path):
    """The recording's candidate CPU values 10 % higher: decided a regression before the
    budget, exit 22."""
    result = _replay(monkeypatch, tmp_path, cpu_factor=1.10)
    cpu = next(c for c in result.comparisons if c.figure == CPU)
    assert cpu.verdict is Verdict.REGRESSION and cpu.ci_low > 1.025 and result.pairs < 16, cpu.summary()
    session, lines, page, written = _finish(monkeypatch, tmp_path, result)
    assert session.exitstatus == HilExitCode.CANDIDATE_REGRESSION
    assert lines[0].startswith(f"candidate vs parent: REGRESSION in 1 figure(s): xgs136 {CPU} x1.1"), lines
    assert next(c for c in written[0]["comparisons"] if c["figure"] == CPU)["verdict"] == "regression"


def test_a_failed_test_and_a_regression_take_precedence_over_unresolved(monkeypatch, tmp_path):
    result = _replay(monkeypatch, tmp_path)
    session, lines, _, _ = _finish(monkeypatch, tmp_path, result, exitstatus=1)
    assert session.exitstatus == 1 and ANSWER in lines[0]  # the tests' failure stands; the answer still says it
    cpu = next(c for c in result.comparisons if c.figure == CPU)
    also_slower = replace(result, comparisons=[replace(cpu, figure="PDR", verdict=Verdict.REGRESSION), cpu])
    pr = cp.ParentRun({}, 16, SECONDS, results=[also_slower])
    assert cp.exit_status(pr) == HilExitCode.CANDIDATE_REGRESSION
    assert cp.verdict_line(pr).startswith("REGRESSION in 1 figure(s): xgs136 PDR x1.041 [1.019, 1.063]; also "
                                          f"UNRESOLVED in 1 figure(s): xgs136 {CPU} {ANSWER}")
    pr.not_measured.append("xgs136: the lab broke")
    assert cp.exit_status(pr) == HilExitCode.COMPARISON_NOT_MEASURED


@pytest.mark.parametrize("verdict", [Verdict.NO_CHANGE, Verdict.NOT_JUDGED])
def test_a_figure_measured_worse_is_never_no_regression(monkeypatch, tmp_path, verdict):
    """Worse than the parent by less than the threshold (no change) or by no more than the
    lab's noise (not judged): no verdict against the build, exit 0, but the answer says worse."""
    result = _replay(monkeypatch, tmp_path)
    cpu = next(c for c in result.comparisons if c.figure == CPU)
    worse = replace(cpu, verdict=verdict)
    assert worse.worse_than_parent
    pr = cp.ParentRun({}, 16, SECONDS, results=[replace(result, comparisons=[result.comparisons[0], worse])])
    line = cp.verdict_line(pr)
    assert cp.exit_status(pr) == 0 and "no regression" not in line, line
    assert line.startswith("no figure past the threshold, but worse than the parent in 1 figure(s)"), line
    assert f"xgs136 {CPU} {verdict.value} x1.041 [1.019, 1.063]; xgs136 {UP} no change" in line, line
