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
- ``SELFTESTS_CPU_BY_FILE=1``: each test file's CPU, its labs and subprocesses included,
  in a cgroup of its own (tests/cpu_by_file.py), printed at the end.
- Order: the longest test files run first (their worker seconds in :data:`file_order.FILE_TIMES`, written
  by ``tools/selftest-times --write-order`` from a measured run), so that under xdist
  (``--dist loadfile --no-loadscope-reorder``, as tools/run-selftests runs) the longest
  file never starts last while the other worker idles. Under ``--dist loadfile`` a work unit
  is a file, except the fault matrix's, whose shards (one per registry model) are units of
  their own (file_order.shard_scope), so they run on separate workers at once.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from pathlib import Path

import pytest

from tests import cpu_by_file
from tests.file_order import load_file_times, order_longest_first, sharded_loadfile_scheduler
from tests.lab_factory import namespaces_of

REPO_ROOT = Path(__file__).resolve().parents[1]

def is_root() -> bool:
    return os.geteuid() == 0


def sigint_deliverable() -> bool:
    """Give this process (and so every process it starts) SIGINT back if it came ignored;
    True when it had to.

    Why: a run started as a background job of a non-interactive shell (``cmd &`` in a
    script) inherits SIGINT ignored (POSIX), and exec keeps it ignored in everything the
    tests start. Then the Ctrl-C tests fail, and every lab part stopped by SIGINT (tcpdump,
    iperf3, a lab in the foreground) waits out its timeout: a fresh-clone run so launched
    took 718 s of pytest with 3 Ctrl-C failures, against 545 s. A handler, unlike SIG_IGN,
    is reset to the default by exec, so the workers and their children get SIGINT again."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        return True
    return False


def pytest_configure(config: pytest.Config) -> None:
    if sigint_deliverable():
        print("tests/conftest.py: SIGINT came ignored (started in the background?); given back for the "
              "Ctrl-C tests and the processes they stop")
    config.addinivalue_line(
        "markers", "needs_root: needs root (network namespaces, veth, TUN); skipped otherwise"
    )
    # here, not in tests/safety/conftest.py: tools/run-selftests deselects it on any selection
    # (`-m "not safety_exhaustive"`), and the suite's marker check refuses an unknown one
    config.addinivalue_line(
        "markers", "safety_exhaustive: the safety stage's tests (tools/run-safety): interruption at every "
        "step (tests/safety/test_every_step*.py), labgrid under -n 2; tools/run-selftests deselects them"
    )
    cpu_by_file.register(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order_longest_first(items, load_file_times())
    if is_root():
        return
    skip = pytest.mark.skip(reason="needs root (network namespaces, veth, TUN, raw sockets)")
    for item in items:
        if item.get_closest_marker("needs_root") is not None:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` with the fault matrix's shards as separate work units; any other
    mode is xdist's own (None: the next implementation decides)."""
    if config.getvalue("dist") != "loadfile":
        return None
    return sharded_loadfile_scheduler(config, log)


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


@pytest.fixture(autouse=True)
def _forget_lost_leases():
    """A test that breaks a lease fences its host for the whole process (by name:
    ipsec_hil.lab.remote.fence); the next test in this worker starts unfenced."""
    yield
    from ipsec_hil.lab.remote import fence
    from ipsec_hil.lab.sharing.holds import HOLDS

    fence.reset()
    HOLDS.reset()
