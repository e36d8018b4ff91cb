"""Hardware profiles: the DESIGN.md OID scheme, counter lists, limits and overrides."""

from __future__ import annotations

import pytest

from plugin.lab.errors import ProfileError
from plugin.lab.hardware import profile_for

OCTEP = """tx_encrypt out_taken out_orig rx_v6 rx_done rx_queuefail rx_bad rx_blocked
FROM_KN_TO_IPSEC_ENCR FROM_WIRE_TO_IPSEC_DECR CRYPTO_DROP_REPLAY_OOW TX_DROP_QUEUE_FULL
sa_count sa_inet sa_inet6""".split()
NPUEP = "tx_taken tx_accel rx_done rx_v6 rx_bad rx_nosa tx_nonhop tx_drop sa_count sa_inet sa_inet6".split()


def test_xgs3300_is_octep():
    p = profile_for("xgs3300")
    assert (p.driver, p.module_file) == ("octep", "/boot/modules/octep.ko")
    assert sorted(p.counters) == sorted(OCTEP)
    assert p.oid("rx_v6") == "dev.octep.0.ipsec.rx_v6"
    assert p.oid("FROM_KN_TO_IPSEC_ENCR") == "dev.octep.0.cop.FROM_KN_TO_IPSEC_ENCR"
    assert p.oid("sa_inet6") == "dev.octep.0.ipsec.sa_inet6"
    assert p.first_stream_issue is None


def test_xgs136_is_npuep_with_issue_531():
    p = profile_for("xgs136")
    assert (p.driver, p.module_file) == ("npuep", "/boot/modules/npuep.ko")
    assert sorted(p.counters) == sorted(NPUEP)
    assert p.oid("rx_v6") == "dev.npuep.0.ipsec.rx_v6"
    assert p.oid("sa_count") == "dev.npuep.0.ipsec.sa_count"
    assert p.first_stream_issue == 531


@pytest.mark.parametrize("model", ["xgs3300", "xgs136"])
def test_common_limits(model):
    p = profile_for(model)
    assert p.replay_window == 32
    assert p.kernel_esp_worst_case_block == 64
    assert p.accepts_ipv6_sa is True
    assert p.throughput_floor_mbit(1000) == pytest.approx(850)
    assert set(p.error_counters) <= set(p.counters)


def test_overrides_replace_oids_and_scalars():
    p = profile_for("xgs136", {"counters": {"rx_v6": "hw.npu.rxv6"}, "floor_margin": 0.9})
    assert p.oid("rx_v6") == "hw.npu.rxv6"
    assert p.oid("rx_done") == "dev.npuep.0.ipsec.rx_done"
    assert p.floor_margin == 0.9
    # the base profile is untouched
    assert profile_for("xgs136").oid("rx_v6") == "dev.npuep.0.ipsec.rx_v6"


def test_unit_override_renumbers_default_oids_only():
    p = profile_for("xgs3300", {"unit": 1, "oids": {"rx_bad": "dev.octep.7.ipsec.rx_bad"}})
    assert p.oid("tx_encrypt") == "dev.octep.1.ipsec.tx_encrypt"
    assert p.oid("TX_DROP_QUEUE_FULL") == "dev.octep.1.cop.TX_DROP_QUEUE_FULL"
    assert p.oid("rx_bad") == "dev.octep.7.ipsec.rx_bad"


@pytest.mark.parametrize(
    "model,overrides,needle",
    [
        ("xgs136", {"counters": {"tx_encrypt": "x.y"}}, "unknown counter 'tx_encrypt' for xgs136"),
        ("xgs3300", {"oids": {"rx_nosa": "x.y"}}, "profile.oids.rx_nosa: unknown counter"),
        ("xgs3300", {"colour": "red"}, "profile.colour: unknown key"),
        ("xgs3300", {"replay_window": "32"}, "profile.replay_window: expected an integer"),
        ("xgs3300", {"accepts_ipv6_sa": 1}, "expected true or false"),
        ("xgs3300", {"floor_margin": 1.5}, "expected a fraction"),
        ("xgs3300", {"counters": {"rx_v6": ""}}, "expected a sysctl OID"),
        ("xgs3300", {"counters": ["rx_v6"]}, "expected a mapping"),
        ("xgs4500", None, "unknown model 'xgs4500'"),
    ],
)
def test_bad_overrides_name_the_problem(model, overrides, needle):
    with pytest.raises(ProfileError, match=None) as info:
        profile_for(model, overrides)
    assert needle in str(info.value)


def test_unknown_counter_lookup_names_known_ones():
    with pytest.raises(ProfileError, match="no counter 'tx_encrypt'.*tx_taken"):
        profile_for("xgs136").oid("tx_encrypt")
