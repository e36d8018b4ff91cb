"""tools/setup is idempotent and fast the second time; run-acceptance maps "no tests" to 0;
run-selftests refuses to run without root and fails when it selects nothing."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.lab_factory import subprocess_env

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


REWRITE_RECORDER = """
import os

import _pytest.assertion.rewrite as rewrite

_real = rewrite._rewrite_test


def _recorded(fn, config):
    with open(os.environ["REWRITE_LOG"], "a") as f:
        f.write(str(fn) + "\\n")
    return _real(fn, config)


rewrite._rewrite_test = _recorded
"""


def test_rewrite_cache_spares_every_run_pytest_s_rewriting(tmp_path):
    """tools/pytest-rewrite-cache (run by tools/setup): with PYTHONDONTWRITEBYTECODE set, a
    pytest process rewrites a test module's and a conftest's asserts from source unless the
    tool wrote pytest's cache for them; the suite's plugin modules are in that cache too."""
    import sys

    checkout = tmp_path / "checkout"
    (checkout / "tests").mkdir(parents=True)
    (checkout / "pytest.ini").write_text("[pytest]\n")
    (checkout / "conftest.py").write_text("")
    (checkout / "tests" / "conftest.py").write_text("LIMIT = 2\n")
    (checkout / "tests" / "test_a.py").write_text("def test_a():\n    assert 1 + 1 == 2\n")
    mine = {str(checkout / "conftest.py"), str(checkout / "tests" / "conftest.py"), str(checkout / "tests" / "test_a.py")}
    recorder = tmp_path / "recorder"
    recorder.mkdir()
    (recorder / "rewrite_recorder.py").write_text(REWRITE_RECORDER)
    log = tmp_path / "rewritten.txt"

    def rewritten_by_a_collection() -> set[str]:
        log.unlink(missing_ok=True)
        env = dict(subprocess_env(), PYTHONDONTWRITEBYTECODE="1", REWRITE_LOG=str(log),
                   PYTHONPATH=os.pathsep.join([str(recorder), subprocess_env()["PYTHONPATH"]]))
        r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "rewrite_recorder",
                            "-p", "no:cacheprovider", "tests"], cwd=checkout, env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return set(log.read_text().split()) if log.exists() else set()

    assert mine <= rewritten_by_a_collection()  # no cache: pytest rewrites them (the recorder sees it)
    r = subprocess.run([sys.executable, str(REPO / "tools/pytest-rewrite-cache"), "--root", str(checkout)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and not r.stderr, r.stdout + r.stderr
    again = rewritten_by_a_collection()
    assert not again & mine, f"rewritten again despite the cache: {sorted(again & mine)}"
    suite = [f for f in again if f.startswith(str(REPO / "plugin"))]
    assert not suite, f"the suite's plugin modules were rewritten again: {suite}"
