"""One run, one lab, one page (issue 53): the live lab is connected once per process that
needs it, and the page is written once, never read back.

A tiny acceptance run in a scratch directory (a hardware lab reached locally: nothing
starts, nothing is changed) with two tests that use the ``lab`` fixture. A conftest of the
run counts, per process, every time the lab's appliances are built
(``ipsec_hil.lab.live_lab.build_appliances``: one call is one connected lab, whoever asks:
preflight, the hardware facts, the fixtures) and every write and read of the page file.
Before issue 53 the controller of a plain run built the lab three times (preflight, the
hardware facts, the ``lab`` fixture) and wrote the page twice (``write_page``, then
``append_sections`` read it back and rewrote it).
"""

from __future__ import annotations

import json

import pytest
from tests.plugin.labfiles import lab_file

pytest_plugins = ["pytester"]

LAB = lab_file("local", virtual=False)

COUNTING = """\
import json, os, pathlib
import ipsec_hil.lab.live_lab as live_lab

LOG = pathlib.Path(__file__).with_name("counts.jsonl")
PAGE = "measurement-page"

def note(what):
    with LOG.open("a") as f:
        f.write(json.dumps({"pid": os.getpid(), "what": what}) + "\\n")

def pytest_configure(config):
    build = live_lab.build_appliances
    def counted(topology):
        note("lab")
        return build(topology)
    live_lab.build_appliances = counted
    write, read = pathlib.Path.write_text, pathlib.Path.read_text
    def counted_write(self, *a, **k):
        if PAGE in self.name:
            note("page written")
        return write(self, *a, **k)
    def counted_read(self, *a, **k):
        if PAGE in self.name:
            note("page read")
        return read(self, *a, **k)
    pathlib.Path.write_text, pathlib.Path.read_text = counted_write, counted_read
"""

TESTS = """\
def test_one(lab, record):
    assert lab.appliances

def test_two(lab, record):
    assert lab.bench is not None
"""


def counted_run(pytester: pytest.Pytester, *args: str) -> dict[int, list[str]]:
    pytester.makefile(".yaml", lab=LAB)
    pytester.makeconftest(COUNTING)
    (pytester.path / "tests_hil").mkdir()
    (pytester.path / "tests_hil" / "test_uses_lab.py").write_text(TESTS)
    result = pytester.runpytest_subprocess("--topology", "lab.yaml", *args, "tests_hil")
    result.assert_outcomes(passed=2)
    assert (pytester.path / "reports" / "measurement-page.md").is_file()
    by_pid: dict[int, list[str]] = {}
    for line in (pytester.path / "counts.jsonl").read_text().splitlines():
        d = json.loads(line)
        by_pid.setdefault(d["pid"], []).append(d["what"])
    return by_pid


def test_a_plain_run_connects_the_lab_once_and_writes_the_page_once(pytester: pytest.Pytester):
    by_pid = counted_run(pytester, "-p", "no:xdist")
    assert len(by_pid) == 1, by_pid
    (events,) = by_pid.values()
    assert events.count("lab") == 1, f"the lab was connected {events.count('lab')} times: {events}"
    assert events.count("page written") == 1, events
    assert events.count("page read") == 0, events


def test_under_xdist_each_process_that_needs_the_lab_connects_it_once(pytester: pytest.Pytester):
    pytest.importorskip("xdist")
    by_pid = counted_run(pytester, "-n", "2")
    for pid, events in by_pid.items():
        assert events.count("lab") <= 1, f"process {pid} connected the lab {events.count('lab')} times"
    writers = [pid for pid, events in by_pid.items() if "page written" in events]
    assert len(writers) == 1 and by_pid[writers[0]].count("page written") == 1, by_pid
    assert not any("page read" in events for events in by_pid.values()), by_pid
