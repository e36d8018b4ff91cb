"""tools/setup is idempotent and fast the second time; run-acceptance maps "no tests" to 0;
run-selftests refuses to run without root and fails when it selects nothing."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from lab_factory import subprocess_env

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = ["tools/setup", "tools/run-acceptance", "tools/run-selftests", ".ci/run"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse(script):
    r = subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_setup_second_run_is_a_fast_no_op():
    subprocess.run(["bash", str(REPO / "tools/setup")], capture_output=True, text=True, timeout=900, check=True)
    start = time.monotonic()
    r = subprocess.run(["bash", str(REPO / "tools/setup")], capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Debian packages: all" in r.stdout
    assert "venv up to date" in r.stdout
    assert "pip install" not in r.stdout and "installing" not in r.stdout  # neither uv nor pip ran
    assert took < 60, f"second setup took {took:.1f} s"  # ~1 s idle; generous for a loaded CI machine


def test_run_acceptance_with_nothing_selected_fails_with_5():
    """A gate run that selects nothing measured nothing: pytest's exit 5 comes through, said."""
    r = subprocess.run(
        ["bash", str(REPO / "tools/run-acceptance"), "--collect-only", "-q", "-k", "selects_nothing_zz"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 5, r.stdout + r.stderr
    assert "collected no test (exit 5)" in r.stdout


def test_run_selftests_without_root_fails_naming_the_reason():
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                        "bash", str(REPO / "tools/run-selftests")],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd="/")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "needs root" in r.stderr and "pass untested" in r.stderr, r.stderr
    assert "passed" not in r.stdout  # no pytest ran


def test_run_selftests_that_selects_nothing_fails_with_5():
    r = subprocess.run(["bash", str(REPO / "tools/run-selftests"), "tests/test_setup_scripts.py",
                        "-k", "selects_nothing_zz"],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, env=subprocess_env())
    assert r.returncode == 5, r.stdout + r.stderr
    assert "run-selftests: exit 5: no test was collected or selected -- nothing was tested" in r.stdout
