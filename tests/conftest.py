"""Shared helpers for the project's own tests (tests/).

- ``@pytest.mark.needs_root``: the test needs root (network namespaces, veth, TUN, raw
  sockets); skipped with that reason otherwise.
- ``run_prefix`` fixture: a short name prefix unique to this test (``ts`` + 4 hex), for
  namespaces, veths and processes -- other runs share this machine. Namespaces that still
  carry it after the test are deleted and the test fails, so leaks are caught.
- ``repo_root`` fixture: the repository's root directory.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def is_root() -> bool:
    return os.geteuid() == 0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_root: needs root (network namespaces, veth, TUN); skipped otherwise"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if is_root():
        return
    skip = pytest.mark.skip(reason="needs root (network namespaces, veth, TUN, raw sockets)")
    for item in items:
        if item.get_closest_marker("needs_root") is not None:
            item.add_marker(skip)


def _namespaces(prefix: str) -> list[str]:
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith(prefix)]


@pytest.fixture
def run_prefix() -> str:
    """``ts`` + 4 hex digits; afterwards no namespace of that prefix may remain."""
    prefix = "ts" + secrets.token_hex(2)
    while is_root() and _namespaces(prefix):
        prefix = "ts" + secrets.token_hex(2)
    yield prefix
    if not is_root():
        return
    left = _namespaces(prefix)
    for ns in left:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=10)
    assert not left, f"test left network namespaces behind: {left} (deleted now)"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
