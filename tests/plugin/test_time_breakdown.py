"""The run says where its wall time went, on the page and in the terminal (issue 15).

A tiny acceptance run in a scratch directory (a hardware lab reached locally: nothing
starts, nothing is changed) whose tests spend known time in shell commands, a settle and
asked traffic; the page's section "Where the time went" and the terminal's table must
show it. Once without xdist, once with two workers (their totals travel to the
controller in ``workeroutput``).
"""

from __future__ import annotations

import re

import pytest
from tests.plugin.labfiles import lab_file

pytest_plugins = ["pytester"]

LAB = lab_file("local", virtual=False)

TESTS = """\
import time
from ipsec_hil.lab.measuring.measure import Snapshot, settle
from ipsec_hil.lab.remote import LocalHost
from ipsec_hil.lab.timeshare import TRAFFIC, spent

class Still:
    name = "dut"
    def snapshot(self):
        return Snapshot("dut", time.time(), {"a": 1})

def test_commands(record):
    LocalHost().run("sleep 0.4").check("sleep")

def test_settle(record):
    settle(Still(), interval=0.3)

def test_traffic(record):
    record.traffic_seconds += 0.5
    with spent(TRAFFIC, cap=0.5):
        time.sleep(0.6)
"""


def seconds_of(page: str, category: str) -> float:
    m = re.search(rf"^\| {re.escape(category)} \| ([\d,.]+) \| [\d.]+ % \|$", page, re.M)
    assert m, f"no row {category!r} in:\n{page}"
    return float(m.group(1).replace(",", ""))


def acceptance_run(pytester: pytest.Pytester, *args: str):
    pytester.makefile(".yaml", lab=LAB)
    (pytester.path / "tests_hil").mkdir()
    (pytester.path / "tests_hil" / "test_timed.py").write_text(TESTS)
    result = pytester.runpytest_subprocess("--topology", "lab.yaml", *args, "tests_hil")
    result.assert_outcomes(passed=3)
    page = (pytester.path / "reports" / "measurement-page.md").read_text()
    return result, page.split("## Where the time went", 1)[1] if "## Where the time went" in page else ""


def test_the_page_and_the_terminal_show_where_the_time_went(pytester: pytest.Pytester):
    result, section = acceptance_run(pytester, "-p", "no:xdist")
    assert section, "the page has no section 'Where the time went'"
    assert 0.4 <= seconds_of(section, "ssh") < 2
    assert 0.3 <= seconds_of(section, "settle") < 2
    assert seconds_of(section, "traffic") == pytest.approx(0.5, abs=0.05)  # the excess 0.1 s is other
    for category in ("bring-up", "stream start/stop", "probes"):
        assert seconds_of(section, category) == 0
    wall = float(re.search(r"\| \*\*wall\*\* \| \*\*([\d,.]+)\*\* \|", section).group(1).replace(",", ""))
    rows = sum(seconds_of(section, c) for c in ("traffic", "bring-up", "ssh", "settle", "stream start/stop",
                                                "probes", "other"))
    assert rows == pytest.approx(wall, abs=0.35)  # each row rounded to 0.1 s
    assert re.search(r"Wall time [\d,.]+ s for 0\.5 s of traffic asked: \*\*[\d.]+x\*\*", section)
    result.stdout.fnmatch_lines(["*where the time went*", "traffic  * 0.5 s *", "ssh  * s *",
                                 "wall * s / traffic asked 0.5 s = *x"])


def test_xdist_workers_send_their_totals_to_the_controller(pytester: pytest.Pytester):
    pytest.importorskip("xdist")
    result, section = acceptance_run(pytester, "-n", "2")
    assert "Shares are of the 2 workers' summed wall time" in section
    assert 0.4 <= seconds_of(section, "ssh") < 2
    assert 0.3 <= seconds_of(section, "settle") < 2
    assert seconds_of(section, "traffic") == pytest.approx(0.5, abs=0.05)
    result.stdout.fnmatch_lines(["*where the time went*", "wall * s  (2 workers summed)"])
