"""The runs' history (ipsec_hil.lab.reporting.history) and ipsec-hil-flakes on it (issue 52):
a failed test's page line says how often it failed on the lab before; the command counts
runs, failures and flips (pass -> fail -> pass) and names what failed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ipsec_hil import flakes_cli
from ipsec_hil.lab.measuring.measure import Check
from ipsec_hil.lab.reporting import history
from ipsec_hil.lab.reporting.report import PageEntry

DIFF = "xgs136:tx_taken +41,797 but peer3300:rx_done + peer3300:rx_queuefail +41,791 (differ by +6)"


def _run(tmp_path: Path, outcomes: dict[str, str], lab: str = "virtual", tag: str | None = None) -> None:
    history.record_run(tmp_path, lab, "2026-12-07T17:00:00", {
        n: history.Result(o, "conservation: frames handed = frames decrypted" if o == "failed" else None,
                          DIFF if o == "failed" else None) for n, o in outcomes.items()}, tag=tag)


def test_flips_count_a_failure_between_passes_as_the_netdev_ci_does(tmp_path):
    seq = ["passed", "failed", "passed", "failed", "failed", "passed", "failed"]
    for o in seq:
        _run(tmp_path, {"t::six": o, "t::steady": "passed", "t::skipped": "skipped"})
    rows = {f.nodeid: f for f in history.flakes(history.load(tmp_path / history.HISTORY_NAME))}
    six = rows["t::six"]
    # pass->fail->pass twice (the last failure has no pass after it: not a flip yet)
    assert (six.runs, six.failures, six.flips) == (7, 4, 2)
    assert six.invariants == ["conservation: frames handed = frames decrypted"]
    assert six.differed[0] == "xgs136:tx_taken +41,797 vs peer3300:rx_done + peer3300:rx_queuefail +41,791 (+6)"
    assert (rows["t::steady"].failures, rows["t::steady"].flips) == (0, 0)
    assert "t::skipped" not in rows  # a skip is no run
    table = history.flakes_table(list(rows.values()))
    assert table.splitlines()[1].startswith("t::six") and "differ" not in table and "(+6)" in table


def test_recent_counts_only_the_labs_runs_that_ran_the_test(tmp_path):
    for o in ("passed", "failed", "passed"):
        _run(tmp_path, {"t::a": o})
    _run(tmp_path, {"t::a": "failed"}, lab="other")
    runs = history.load(tmp_path / history.HISTORY_NAME, "virtual")
    assert history.recent(runs, "t::a") == (1, 3) and history.recent(runs, "t::a", last=1) == (0, 1)
    assert history.recent(runs, "t::new") == (0, 0)


def test_a_failed_entry_gets_its_record_and_the_run_is_appended(tmp_path):
    for o in ("passed", "failed"):
        _run(tmp_path, {"t::a": o})
    broken = Check("conservation", False, DIFF)
    entries = [PageEntry("t::a", "a", "failed", reason="InvariantError", checks=[broken]),
               PageEntry("t::b", "b", "failed", reason="boom"), PageEntry("t::c", "c", "passed")]
    note = history.annotate(tmp_path, "virtual", entries, "2026-12-07T18:00:00")
    assert entries[0].history == "failed 1 of its last 2 runs on lab virtual before this one"
    assert entries[1].history == "no earlier run on lab virtual: a new failure" and entries[2].history is None
    assert "2 earlier runs on lab virtual" in note
    last = history.load(tmp_path / history.HISTORY_NAME)[-1]
    assert last.results["t::a"] == history.Result("failed", "conservation", DIFF)
    assert last.results["t::b"] == history.Result("failed", "boom", None)


def test_a_broken_history_line_is_named_and_never_breaks_the_page(tmp_path):
    _run(tmp_path, {"t::a": "passed"})
    with open(tmp_path / history.HISTORY_NAME, "a") as fh:
        fh.write('{"lab": "virtual", "results": 3}\n')
    with pytest.raises(history.HistoryError, match=rf"{history.HISTORY_NAME}:2: not a run's record"):
        history.load(tmp_path / history.HISTORY_NAME)
    entries = [PageEntry("t::a", "a", "failed", reason="boom")]
    note = history.annotate(tmp_path, "virtual", entries, "now")
    assert note.startswith("run history not read:") and ":2:" in note
    assert (tmp_path / history.HISTORY_NAME).read_text().count("\n") == 3  # appended, nothing rewritten


def test_flakes_table_only_and_what_a_person_types(tmp_path, capsys):
    for o in ("passed", "failed", "passed"):
        _run(tmp_path, {"t::six": o, "t::ok": "passed"})
    assert flakes_cli.main(["--table-only", "--reports", str(tmp_path), "--lab", "virtual"]) == 1
    out = capsys.readouterr().out
    assert "t::six" in out and "2 tests, 6 test runs, 1 failures in 1 tests, 1 flips" in out
    assert flakes_cli.main(["--table-only", "--reports", str(tmp_path), "--lab", "nowhere"]) == 2
    assert "holds no run of lab nowhere" in capsys.readouterr().err
    assert flakes_cli.main(["--runs", "0", "--", "-m", "xgs136"]) == 2
    assert flakes_cli.main(["--runs", "2"]) == 2
    assert "name the selection after `--`" in capsys.readouterr().err
    (tmp_path / history.HISTORY_NAME).write_text("not json\n")
    assert flakes_cli.main(["--table-only", "--reports", str(tmp_path)]) == 2
    assert ":1: not a run's record" in capsys.readouterr().err


def test_flakes_runs_the_selection_and_finds_its_own_runs(tmp_path):
    """The command runs pytest K times with its tag in the environment; a run that writes
    no history line (it collected no acceptance test) is reported, exit 3, never a pass."""
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    _run(tmp_path / "reports", {"old::t": "failed"}, tag="someone-else")
    r = subprocess.run([sys.executable, "-m", "ipsec_hil.flakes_cli", "--runs", "2", "--", "-q", "-p", "no:cacheprovider",
                        "-p", "no:ipsec_hil", "test_x.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == flakes_cli.NOTHING_RECORDED, r.stdout + r.stderr
    assert "run 2 of 2: exit 0" in r.stdout and "2 of 2 runs recorded nothing" in r.stderr
    assert "old::t" not in r.stdout and "Traceback" not in r.stderr
    assert json.loads((tmp_path / "reports" / history.HISTORY_NAME).read_text().splitlines()[0])["tag"] == "someone-else"
