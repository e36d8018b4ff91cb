"""The topology's cap on children holds on real strongSwan 5.9.8, through the suite's own path.

``MAX_CHILDREN`` children of the ``many`` tunnel (one TCP port each) are provisioned onto
the charon pair by ``TunnelProvisioner`` exactly as any configuration: one remote command
initiates them all, one ``--list-sas`` per end verifies them, and every child is INSTALLED on
both ends with its planned proposal and selectors (read by the suite's parser from real
output: the listing of one IKE_SA with all its children is one vici message, whose 512 KiB
is what bounds the count). Teardown leaves both gateways as they were. The seconds per
phase are printed (``-s``): a figure, not an assert.
"""

from __future__ import annotations

from ipsec_hil.lab.provision import TunnelPlan, TunnelProvisioner
from ipsec_hil.lab.topology import MAX_CHILDREN, TunnelConfig

from .test_real_strongswan import apps_for, check_installed, settled_states, states

import pytest

pytestmark = pytest.mark.needs_root


def test_the_cap_of_children_establishes_and_restores(pair, topology, psk):
    plan = TunnelPlan.from_topology(topology, "many")
    base = topology.tunnels["many"].configs()[0]
    cfg = TunnelConfig(base.outer, base.inner, base.cipher, MAX_CHILDREN)
    before = states(pair)
    prov = TunnelProvisioner(apps_for(pair, topology, plan), plan, cfg, psk, run_id=f"{pair.prefix}-cap",
                             initiate_timeout=60)
    bu = prov.up()
    try:
        assert bu.all_up and bu.children_up == MAX_CHILDREN, bu.failures()[:3]
        check_installed(bu, plan, cfg)
    finally:
        prov.down()
    print(f"{MAX_CHILDREN} children on real charon:",
          ", ".join(f"{k} {v:.2f} s" for k, v in prov.timings.items()),
          f"({prov.timings['initiate'] / MAX_CHILDREN * 1000:.1f} ms per child initiated)")
    after, waited = settled_states(pair, before)
    print(f"both gateways as before {waited:.1f} s after the teardown returned")
    assert after == before
