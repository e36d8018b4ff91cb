"""tests/cpu_by_file.py: each test file's CPU, its subprocesses included, in a cgroup of its own.

The real run: a pytest with two xdist workers over two files, one of which starts a
process that burns 0.3 s of CPU; the burn must be counted to that file (it ran in a child
of the worker, so only the cgroup sees it there), the other file must hold less, and the
run's cgroups must be gone afterwards.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cpu_by_file

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


def test_cpu_stat_usage_and_a_file_without_it():
    text = "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n"
    assert cpu_by_file.parse_cpu_stat(text, Path("/x/cpu.stat")) == 1234567
    with pytest.raises(ValueError, match=r"/x/cpu.stat: no usage_usec line"):
        cpu_by_file.parse_cpu_stat("user_usec 1\n", Path("/x/cpu.stat"))


def test_hierarchy_found_or_named_missing(tmp_path):
    (tmp_path / "cpuacct").mkdir()
    (tmp_path / "cpuacct" / "cpuacct.usage").write_text("0\n")
    assert cpu_by_file.find_hierarchy(tmp_path) == cpu_by_file.Hierarchy(tmp_path / "cpuacct", 1)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu io memory\n")
    assert cpu_by_file.find_hierarchy(v2).version == 2
    with pytest.raises(RuntimeError, match="no cgroup cpu accounting under"):
        cpu_by_file.find_hierarchy(tmp_path / "nothing")


def test_file_key_is_a_cgroup_name_and_reversible():
    key = cpu_by_file.file_key("tests/teeth/test__x.py::test_a[b/c]")
    assert "/" not in key and cpu_by_file.file_of(key) == "tests/teeth/test__x.py"


BURN = """
import subprocess, sys
def test_burns_in_a_child():
    code = "import time\\nwhile time.process_time() < 0.3: pass"
    subprocess.run([sys.executable, "-c", code], check=True)
"""
IDLE = """
def test_nothing_much():
    assert sum(range(10)) == 45
"""


@pytest.mark.needs_root
def test_a_childs_cpu_is_counted_to_its_file_and_the_cgroups_go(tmp_path):
    try:
        hier = cpu_by_file.find_hierarchy()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom tests import cpu_by_file\n\n"
        "def pytest_configure(config):\n    cpu_by_file.register(config)\n")
    (tmp_path / "test_burn.py").write_text(BURN)
    (tmp_path / "test_idle.py").write_text(IDLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    before = {p.name for p in hier.root.glob("ipsec-hil-cpu-*")}
    env = {k: v for k, v in os.environ.items()
           if k not in (cpu_by_file.ROOT_ENV, cpu_by_file.OWNER_ENV, "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    env[cpu_by_file.ENV] = "1"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile",
                        str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "own tests' CPU by file" in r.stdout, r.stdout[-3000:]
    got = json.loads((tmp_path / "reports" / "selftests" / "cpu-by-file.json").read_text())["cpu_seconds"]
    assert set(got) == {"test_burn.py", "test_idle.py"}, got
    assert got["test_burn.py"] >= 0.25, got
    assert got["test_idle.py"] < got["test_burn.py"], got
    assert {p.name for p in hier.root.glob("ipsec-hil-cpu-*")} == before, "the run's cgroups were left behind"
