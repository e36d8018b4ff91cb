"""The own tests' run order: tools/selftest-times --write-order -> tests/file_times.json ->
tests/conftest.py sorts the files longest first (issue 15: the order is a measured fact,
written by a tool, not a hand-kept list)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.file_order import FILE_TIMES, TESTS, load_file_times, order_longest_first

REPO_ROOT = TESTS.parent
TOOL = REPO_ROOT / "tools" / "selftest-times"

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
 <testcase classname="tests.teeth.test_fault_matrix_xgs136" name="test_a" time="300.5"/>
 <testcase classname="tests.teeth.test_fault_matrix_xgs136" name="test_b" time="200.0"/>
 <testcase classname="tests.unit.test_esp_math" name="test_c" time="0.25"/>
 <testcase classname="tests.safety.test_every_step.TestSteps" name="test_d" time="150.0"/>
</testsuite></testsuites>
"""


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60)


def test_write_order_records_every_file_under_tests_longest_first(tmp_path):
    junit, dest = tmp_path / "junit.xml", tmp_path / "file_times.json"
    junit.write_text(JUNIT)
    r = _tool(str(junit), "--write-order", str(dest))
    assert r.returncode == 0, r.stderr
    seconds = json.loads(dest.read_text())["seconds"]
    assert list(seconds) == ["teeth/test_fault_matrix_xgs136.py", "safety/test_every_step.py", "unit/test_esp_math.py"]
    assert seconds["teeth/test_fault_matrix_xgs136.py"] == 500.5  # a file's cases summed, class names dropped
    assert load_file_times(dest) == seconds


def test_a_junit_without_own_tests_leaves_the_order_file_alone(tmp_path):
    junit, dest = tmp_path / "junit.xml", tmp_path / "file_times.json"
    junit.write_text('<testsuites><testsuite><testcase classname="tests_hil.test_rates" name="x" time="3"/>'
                     "</testsuite></testsuites>")
    dest.write_text("kept\n")
    r = _tool(str(junit), "--write-order", str(dest))
    assert r.returncode != 0 and "no test case under tests/" in r.stderr and str(dest) in r.stderr
    assert dest.read_text() == "kept\n"


@pytest.mark.parametrize("text, field", [
    ("{not json", "not an order file"),
    ('{"seconds": [1, 2]}', "'seconds' is list"),
    ('{"seconds": {"unit/x.py": -1}}', "seconds['unit/x.py'] = -1"),
])
def test_a_broken_order_file_is_a_usage_error_naming_it(tmp_path, text, field):
    path = tmp_path / "file_times.json"
    path.write_text(text)
    with pytest.raises(pytest.UsageError) as exc:
        load_file_times(path)
    assert str(path) in str(exc.value) and field in str(exc.value)


def test_the_committed_order_runs_the_longest_recorded_file_first():
    seconds = load_file_times(FILE_TIMES)
    assert seconds, f"{FILE_TIMES} is missing or empty"
    for name in seconds:
        assert (REPO_ROOT / "tests" / name).is_file(), f"{FILE_TIMES}: {name} is no test file (renamed? rewrite it)"
    longest = max(seconds, key=seconds.get)
    items = [SimpleNamespace(path=REPO_ROOT / "tests" / name, n=i)
             for i, name in enumerate(["unit/not_recorded_b.py", *sorted(seconds), "unit/not_recorded_a.py"])]
    order_longest_first(items, seconds)
    assert items[0].path == REPO_ROOT / "tests" / longest
    got = [seconds.get(item.path.relative_to(REPO_ROOT / "tests").as_posix(), 0.0) for item in items]
    assert got == sorted(got, reverse=True)
    names = [item.path.name for item in items]
    b, a = names.index("not_recorded_b.py"), names.index("not_recorded_a.py")
    assert b < a and all(g == 0.0 for g in got[b:]), names  # after every timed file, in collection order
