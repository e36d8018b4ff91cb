"""Shared helpers for the project's own tests (tests/).

- ``@pytest.mark.needs_root``: the test needs root (network namespaces, veth, TUN, raw
  sockets); skipped with that reason otherwise (``tools/run-selftests`` refuses to run
  without root instead, so a CI run never passes on those skips).
- A virtual lab per test module: ``lab = lab_fixture(...)`` from tests/lab_factory.py
  (the plugin's own start/stop; see there). An acceptance run in a subprocess:
  ``lab_factory.suite_run`` (a scratch rootdir of its own).
- ``run_prefix`` fixture: a short name prefix unique to this test (``ts`` + 4 hex), for
  namespaces, veths and processes -- other runs share this machine. Namespaces that still
  carry it after the test are deleted and the test fails, so leaks are caught.
- ``repo_root`` fixture: the repository's root directory.
- Order: the longest test files run first (:data:`LONGEST_FIRST`), so that under xdist
  (``--dist loadfile --no-loadscope-reorder``, as tools/run-selftests runs) the longest
  file never starts last while the other worker idles.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from lab_factory import namespaces_of

REPO_ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

#: Test files by wall time, longest first (worker seconds from tools/selftest-times in a fresh-clone
#: .ci/run on the 2-core machine, 2 workers: fault matrix xgs136 ~500 s, parent vs candidate ~465 s,
#: fault matrix xgs3300 ~445 s, every step ~185 s, acceptance slice ~150 s, integrity ~60 s, gate ~50 s,
#: report ~35 s; secrets and trust below that). Files not listed keep their collection order after these.
LONGEST_FIRST = (
    "teeth/test_fault_matrix_xgs136.py",
    "decision_e2e/test_parent_vs_candidate.py",
    "teeth/test_fault_matrix_xgs3300.py",
    "safety/test_every_step.py",
    "acceptance/test_suite_on_twin.py",
    "safety/test_integrity.py",
    "gate/test_gate_e2e.py",
    "report/test_html_report.py",
    "safety/test_secrets.py",
    "safety/test_trust.py",
)


def is_root() -> bool:
    return os.geteuid() == 0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_root: needs root (network namespaces, veth, TUN); skipped otherwise"
    )


def _longest_first_rank(item: pytest.Item) -> int:
    try:
        rel = Path(item.path).resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return len(LONGEST_FIRST)
    return LONGEST_FIRST.index(rel) if rel in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_longest_first_rank)  # stable: a file's tests stay together, in order
    if is_root():
        return
    skip = pytest.mark.skip(reason="needs root (network namespaces, veth, TUN, raw sockets)")
    for item in items:
        if item.get_closest_marker("needs_root") is not None:
            item.add_marker(skip)


@pytest.fixture
def run_prefix() -> str:
    """``ts`` + 4 hex digits; afterwards no namespace of that prefix may remain."""
    prefix = "ts" + secrets.token_hex(2)
    while is_root() and namespaces_of(prefix):
        prefix = "ts" + secrets.token_hex(2)
    yield prefix
    if not is_root():
        return
    left = namespaces_of(prefix)
    for ns in left:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=10)
    assert not left, f"test left network namespaces behind: {left} (deleted now)"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
