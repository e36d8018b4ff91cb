"""``--topology FILE`` and ``--topology=FILE`` for a lab file anywhere on disk, ``~`` included.

Tried as a new user would (issue 11): the space form once made the lab file's folder the
rootdir ("unrecognized arguments: --topology"), and the ``=`` form reached the suite with
``~`` unexpanded. Each spelling runs here through a real shell (which expands ``~`` only
where a user's shell does), from the repository and through tools/run-acceptance, on a
copy of the virtual lab's file in a temporary home. ``--collect-only`` proves the option
was recognised and the file loaded; it must not start a lab.
"""

from __future__ import annotations

import os
import shutil
import re
import sys
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def selected() -> str:
    """``N selected`` of ``-m xgs136`` with topologies/virtual.yaml from the repository: the
    lab file copied elsewhere must select exactly as many. (A fixture, not a module-level
    call: collecting this file must not run a pytest.)"""
    r = subprocess.run([sys.executable, "-m", "pytest", "-m", "xgs136", "--collect-only", "-p", "no:cacheprovider"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    m = re.search(r"(\d+ selected)", r.stdout)
    assert m, r.stdout[-2000:] + r.stderr[-2000:]
    return m[1]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home with ~/labs/xgs.yaml, a copy of topologies/virtual.yaml."""
    (tmp_path / "labs").mkdir()
    shutil.copy(REPO / "topologies" / "virtual.yaml", tmp_path / "labs" / "xgs.yaml")
    return tmp_path


def _shell(command: str, home: Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HIL_PSK"))}
    env["HOME"] = str(home)
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _assert_loaded(r: subprocess.CompletedProcess[str], home: Path, selected: str) -> None:
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert f"rootdir: {REPO}" in out, out[:2000]
    assert f"from {home}/labs/xgs.yaml" in out, out[:2000]
    assert selected in out, out[-2000:]
    assert "virtual lab:" not in out, "collecting started a virtual lab"


@pytest.mark.parametrize("spelling", [
    "--topology ~/labs/xgs.yaml",     # the shell expands ~: the value is an existing path
    "--topology=~/labs/xgs.yaml",     # the shell leaves ~ after '=': the suite expands it
    "--topology {home}/labs/xgs.yaml",
    "--topology={home}/labs/xgs.yaml",
])
def test_each_spelling_from_the_repository(home, spelling, selected):
    r = _shell(f".venv/bin/pytest -m xgs136 {spelling.format(home=home)} --collect-only -p no:cacheprovider", home)
    _assert_loaded(r, home, selected)


def test_relative_to_where_pytest_started(home, selected):
    r = _shell(f"{REPO}/.venv/bin/pytest --rootdir {REPO} -c {REPO}/pytest.ini {REPO}/tests_hil -m xgs136 "
               "--topology labs/xgs.yaml --collect-only -p no:cacheprovider", home, cwd=home)
    _assert_loaded(r, home, selected)


@pytest.mark.parametrize("spelling", ["--topology ~/labs/xgs.yaml", "--topology=~/labs/xgs.yaml"])
def test_each_spelling_through_run_acceptance(home, spelling, selected):
    r = _shell(f"tools/run-acceptance {spelling} --collect-only -p no:cacheprovider", home)
    _assert_loaded(r, home, selected)


def test_a_missing_file_names_the_expanded_path(home):
    r = _shell(".venv/bin/pytest -m xgs136 --topology=~/labs/none.yaml --collect-only -p no:cacheprovider", home)
    assert r.returncode == 4, r.stdout + r.stderr
    assert f"topology file not found: {home}/labs/none.yaml" in r.stderr
