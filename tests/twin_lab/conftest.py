"""Fixtures for the lab builder's tests: root check, unique prefixes, guaranteed cleanup."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SMALL = HERE / "lab_small.yaml"

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root (network namespaces, veth, tc) and iproute2's `ip` for process launch",
)


@pytest.fixture
def small_topology() -> Path:
    return SMALL


@pytest.fixture
def fresh_prefix():
    """A prefix no lab uses; afterwards, nothing with it may remain (checked, then removed)."""
    from ipsec_hil_twin.machinery import netns as tn
    from ipsec_hil_twin.lifecycle.lab import _free_prefix, teardown
    from ipsec_hil_twin.machinery.runtime import RunDir

    prefix = _free_prefix()
    yield prefix
    from ipsec_hil_twin.lifecycle.lab import LabBuildError
    from ipsec_hil_twin.lifecycle.supervisor import down

    leftovers = tn.list_namespaces(prefix) + tn.root_links(prefix)
    try:
        down(prefix=prefix)  # a supervisor a failed test left running
    except LabBuildError:
        pass
    teardown(RunDir.for_prefix(prefix), prefix, None)
    assert not leftovers, f"lab {prefix} left {leftovers} behind"
