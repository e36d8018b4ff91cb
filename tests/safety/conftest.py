"""The safety modules' shared fixtures: ``vlab``, one virtual lab per module (the
project's lab factory, tests/lab_factory.py), seeded with an operator's files (_lab.seed);
``ends``; ``every`` (the every-step scenarios' objects on that lab, _every_step.Run).

The marker ``safety_exhaustive`` (registered in tests/conftest.py) marks the every-step set: its own CI
stage (tools/run-safety), deselected from tools/run-selftests."""

import pytest

from tests.lab_factory import lab_fixture
from tests.safety._lab import seed, snapshot

from ipsec_hil.fixtures import build_appliances

vlab = lab_fixture(name="vlab", prepare=seed)


@pytest.fixture
def ends(vlab):
    """Both ends' Appliance objects (fresh SSH) and their snapshot before the test."""
    apps, hosts = build_appliances(vlab.topo)
    before = snapshot(vlab, apps)
    yield apps, before
    for h in hosts.values():
        h.close()


@pytest.fixture(scope="module")
def every(vlab, tmp_path_factory):
    """The every-step scenarios' objects on the module's lab (_every_step.Run)."""
    from tests.safety._every_step import Run

    r = Run.open(vlab, str(tmp_path_factory.mktemp("every-step")))
    try:
        yield r
    finally:
        r.close()
