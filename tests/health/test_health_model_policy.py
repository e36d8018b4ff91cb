"""Health is judged with the tolerances of the appliance's model (issue 42): the XGS 136,
with far less memory than the XGS 3300, may drift less across a configuration."""
from __future__ import annotations

import pytest

from ipsec_hil.lab.errors import ProfileError
from ipsec_hil.lab.expectations.hardware import REGISTRY, profile_for
from ipsec_hil.lab.measuring.health import POLICY, DriverScope, compare, policy_for

from .samples import baseline, mbufs_plus, snapshot

OCTEP = DriverScope(name="octep", module="octep.ko")


def _ok(after: dict[str, str], model: str) -> bool:
    return compare(snapshot(baseline()), snapshot(after), policy_for(REGISTRY.get(model)), driver=OCTEP).ok


def test_each_model_has_its_own_slack_and_the_136s_is_smaller():
    p136, p3300 = policy_for(REGISTRY.get("xgs136")), policy_for(REGISTRY.get("xgs3300"))
    assert p3300.mbuf_slack == POLICY.mbuf_slack and p3300.cluster_slack == POLICY.cluster_slack
    for name in ("mbuf_slack", "cluster_slack", "zone_items_slack", "malloc_in_use_slack"):
        assert getattr(p136, name) < getattr(p3300, name), name
    assert p136.kernel_trouble == POLICY.kernel_trouble  # a panic is a panic on any model


@pytest.mark.parametrize("key", ["mbuf-current", "cluster-current"])
def test_a_leak_the_3300_tolerates_is_a_defect_on_the_136(key):
    """Between the two models' slack: healthy on the XGS 3300, a driver defect on the XGS 136."""
    slack136 = REGISTRY.get("xgs136").health.mbuf_slack
    leak = mbufs_plus(baseline(), **{key: slack136 + 1})
    assert _ok(leak, "xgs3300")
    assert not _ok(leak, "xgs136")
    assert _ok(mbufs_plus(baseline(), **{key: slack136}), "xgs136")


def test_a_lab_file_may_override_the_slack_and_bad_values_name_the_field():
    p = profile_for("xgs136", {"health": {"mbuf_slack": 300}})
    assert p.health.mbuf_slack == 300 and p.health.cluster_slack == REGISTRY.get("xgs136").health.cluster_slack
    with pytest.raises(ProfileError, match="health.mbuf_slack"):
        profile_for("xgs136", {"health": {"mbuf_slack": -1}})
    with pytest.raises(ProfileError, match="profile.health.mbufs"):
        profile_for("xgs136", {"health": {"mbufs": 1}})
