"""tools/report's own logic, without Allure or a lab: history carried, builds numbered, errors.

Why: the trend is only right if each run gets the next buildOrder after the carried
history and the run's own executor.json is respected; a bad results directory must say
which file is wrong instead of an Allure stack trace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tool_module import load_tool

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "report"


rep = load_tool("report", "tools_report")


def _trend(d: Path, *orders: int) -> None:
    (d / "history").mkdir(parents=True, exist_ok=True)
    (d / "history" / "history-trend.json").write_text(json.dumps([{"buildOrder": o} for o in orders]))


def test_carry_history_copies_the_previous_reports_history(tmp_path):
    report, results = tmp_path / "report", tmp_path / "results"
    _trend(report, 3, 2)
    results.mkdir()
    (results / "history").mkdir()
    (results / "history" / "stale.json").write_text("{}")
    assert rep.carry_history(report, results) == 1
    assert sorted(p.name for p in (results / "history").iterdir()) == ["history-trend.json"]


def test_no_previous_report_means_no_history(tmp_path):
    (tmp_path / "results").mkdir()
    assert rep.carry_history(tmp_path / "none", tmp_path / "results") == 0
    assert not (tmp_path / "results" / "history").exists()


def test_next_build_after_the_carried_history_and_again_on_a_rerun(tmp_path):
    (tmp_path / "executor.json").write_text(json.dumps({"name": "ipsec-hil"}))
    _trend(tmp_path, 4, 3)
    assert rep.number_build(tmp_path) == 5
    assert json.loads((tmp_path / "executor.json").read_text()) == {"name": "ipsec-hil", "buildOrder": 5}
    _trend(tmp_path, 5, 4, 3)  # reported once: the report's history now holds build 5
    assert rep.number_build(tmp_path) == 6


def test_a_runs_own_build_order_is_kept(tmp_path):
    (tmp_path / "executor.json").write_text(json.dumps({"name": "ci", "buildOrder": 42}))
    _trend(tmp_path, 7)
    assert rep.number_build(tmp_path) == 42


def test_no_executor_file_nothing_invented(tmp_path):
    assert rep.number_build(tmp_path) is None
    assert not (tmp_path / "executor.json").exists()


def test_bad_executor_file_named(tmp_path):
    (tmp_path / "executor.json").write_text("[1, 2]")
    with pytest.raises(rep.ReportError, match=r"executor\.json: expected a JSON object"):
        rep.number_build(tmp_path)


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "no such results directory"),
    (lambda d: d.mkdir(), "no \\*-result.json in it"),
])
def test_cli_errors_are_one_line_and_exit_2(tmp_path, setup, message):
    results = tmp_path / "results"
    setup(results)
    r = subprocess.run([sys.executable, str(TOOL), "--results", str(results), "--out", str(tmp_path / "o"),
                        "--single", str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("report: error: "), r.stderr
    assert message.replace("\\", "") in lines[0]


# ------------------------------------------------ which Allure (the logic lives in the package now)

from ipsec_hil.lab.reporting import html as html_lib  # noqa: E402
from ipsec_hil import report_cli  # noqa: E402


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_allure_given_then_the_checkouts_then_path(tmp_path, monkeypatch):
    given, checkout, on_path = (_exe(tmp_path / d / "allure") for d in ("given", "checkout", "bin"))
    monkeypatch.setattr(html_lib, "CHECKOUT_ALLURE", checkout)
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert html_lib.find_allure(given) == given
    assert html_lib.find_allure() == checkout
    monkeypatch.setattr(html_lib, "CHECKOUT_ALLURE", tmp_path / "none" / "allure")
    assert html_lib.find_allure() == on_path
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(html_lib.ReportError, match=r"no Allure 2 command line: .* or give --allure PATH"):
        html_lib.find_allure()
    with pytest.raises(html_lib.ReportError, match=r"--allure .*nothing: not an executable file"):
        html_lib.find_allure(tmp_path / "nothing")


def test_the_installed_commands_defaults_are_under_the_current_directory(tmp_path, monkeypatch, capsys):
    """ipsec-hil-report in a driver repository reads ./reports/allure-results (not a checkout's)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports" / "allure-results").mkdir(parents=True)
    assert report_cli.main([]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}/reports/allure-results: no *-result.json in it" in err, err


def test_tools_report_keeps_the_checkouts_reports_as_default():
    r = subprocess.run([sys.executable, str(TOOL), "--help"], capture_output=True, text=True, timeout=60,
                       cwd="/")
    assert r.returncode == 0 and "usage: tools/report" in r.stdout
    assert f"(default: {REPO / 'reports'})" in " ".join(r.stdout.split()), r.stdout
