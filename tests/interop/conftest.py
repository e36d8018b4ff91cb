"""Fixtures for the real-strongSwan interop tests: the topology, a key, one charon pair per module.

The pair (charon_pair.py) is laid out from topologies/virtual.yaml (layout.py); before the
module's first test both daemons have OPNsense's swanctl.conf loaded and its resident
association established. Afterwards nothing of the run may remain (namespaces, processes).
"""

from __future__ import annotations

import secrets

import pytest

from ipsec_hil.lab.provision import Secret
from ipsec_hil.lab.topology import Topology

from .charon_pair import CharonPair, missing_tools
from .layout import RESIDENT_CHILD, load, opnsense_swanctl_conf, ports


@pytest.fixture(scope="module")
def topology() -> Topology:
    return load()


@pytest.fixture(scope="module")
def psk() -> Secret:
    """A fresh key per run for the suite's tunnels (never printed: Secret masks itself)."""
    return Secret(secrets.token_urlsafe(24))


@pytest.fixture(scope="module")
def pair(topology: Topology, tmp_path_factory: pytest.TempPathFactory):
    """Two charon-systemd daemons as the two ends, the resident association established."""
    missing = missing_tools()
    if missing:
        pytest.skip(f"not installed: {missing} (tools/setup installs charon-systemd, "
                    "strongswan-swanctl and libcharon-extra-plugins)")
    prefix = "iop" + secrets.token_hex(2)
    resident_psk = secrets.token_urlsafe(24)
    cp = CharonPair(prefix, tmp_path_factory.mktemp(prefix), ports(topology),
                    {s: opnsense_swanctl_conf(s, resident_psk) for s in ("a", "b")})
    with cp:
        for side in ("a", "b"):
            cp[side].swanctl("--load-all", "--noprompt")
        cp["a"].swanctl("--initiate", "--child", RESIDENT_CHILD, "--timeout", "20", timeout=40)
        yield cp
    left = cp.leftovers()
    assert not left, f"the charon pair left behind: {left}"
