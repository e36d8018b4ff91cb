"""The safety modules' shared fixture ``vlab``: one virtual lab per module (the project's
lab factory, tests/lab_factory.py), seeded with an operator's files (_lab.seed)."""

import pytest

from lab_factory import lab_fixture
from safety._lab import seed, snapshot

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
