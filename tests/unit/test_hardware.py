"""Hardware profiles: the DESIGN.md OID scheme, counter lists, limits and overrides."""

from __future__ import annotations

import pytest

from ipsec_hil.lab.errors import ProfileError
from ipsec_hil.lab.expectations.hardware import profile_for

OCTEP = """tx_encrypt out_taken out_orig rx_v6 rx_done rx_queuefail rx_bad rx_blocked
FROM_KN_TO_IPSEC_ENCR FROM_WIRE_TO_IPSEC_DECR CRYPTO_DROP_REPLAY_OOW TX_DROP_QUEUE_FULL
sa_count sa_inet sa_inet6""".split()
NPUEP = "tx_taken tx_accel rx_done rx_v6 rx_bad rx_nosa tx_nonhop tx_drop sa_count sa_inet sa_inet6".split()


@pytest.mark.parametrize("model,driver,counters,oids,first_stream_issue", [
    pytest.param("xgs3300", "octep", OCTEP,
                 {"rx_v6": "dev.octep.0.ipsec.rx_v6", "FROM_KN_TO_IPSEC_ENCR": "dev.octep.0.cop.FROM_KN_TO_IPSEC_ENCR",
                  "sa_inet6": "dev.octep.0.ipsec.sa_inet6"}, None, id="xgs3300-octep"),
    pytest.param("xgs136", "npuep", NPUEP,
                 {"rx_v6": "dev.npuep.0.ipsec.rx_v6", "sa_count": "dev.npuep.0.ipsec.sa_count"}, 531,
                 id="xgs136-npuep-issue-531"),
])
def test_model_driver_counters_and_oids(model, driver, counters, oids, first_stream_issue):
    p = profile_for(model)
    assert (p.driver, p.module_file) == (driver, f"/boot/modules/{driver}.ko")
    assert sorted(p.counters) == sorted(counters)
    assert {name: p.oid(name) for name in oids} == oids
    assert p.first_stream_issue == first_stream_issue


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


# ----------------------------------------------------------------- the registry


def test_roles_name_counters_of_the_model():
    from ipsec_hil.lab.expectations.hardware import REGISTRY

    for model in REGISTRY.names():
        p = profile_for(model)
        for role, names in p.roles.items():
            assert set(names) <= set(p.counters), (model, role)
    assert profile_for("xgs3300").roles.encrypted == ("tx_encrypt",)
    assert profile_for("xgs136").roles.decrypted == ("rx_done", "rx_v6")
    assert profile_for("xgs136").roles.no_sa_drops == ("rx_nosa",)
    assert profile_for("xgs3300").roles.replay_drops == ("CRYPTO_DROP_REPLAY_OOW",)


def test_expectations_derive_from_the_roles():
    from ipsec_hil.lab.expectations.expect import decrypted_refs, encrypted_refs

    assert encrypted_refs("npu", profile_for("xgs136")) == ["npu:tx_taken", "npu:tx_accel"]
    assert decrypted_refs("dut", profile_for("xgs3300")) == ["dut:rx_done", "dut:rx_queuefail"]
    assert encrypted_refs("dut", profile_for("xgs3300"), kernel_cipher=True) == ["dut:esp.sent-packets"]


def test_issue_531_is_a_known_issue_of_the_136_and_a_lab_may_say_its_build_lacks_it():
    issue = profile_for("xgs136").known_issue("first_stream_after_boot")
    assert (issue.number, issue.label) == (531, "issue 531")
    assert profile_for("xgs136", {"first_stream_issue": None}).known_issue("first_stream_after_boot") is None
    assert profile_for("xgs3300", {"first_stream_issue": 9}).first_stream_issue == 9


def test_a_role_naming_an_unknown_counter_is_refused():
    from ipsec_hil.lab.expectations.hardware import CounterRoles, HardwareProfile

    with pytest.raises(ProfileError, match=r"x: roles.errors names unknown counter\(s\) nope"):
        HardwareProfile("x", "xd", "/boot/modules/xd.ko", {"a": "dev.xd.0.ipsec.a"},
                        CounterRoles(encrypted=("a",), decrypted=("a",), errors=("nope",), sa_counts=()))


def test_models_is_live_and_a_second_definition_is_refused():
    from ipsec_hil.lab.expectations.hardware import MODELS, REGISTRY, CounterRoles, HardwareProfile, default_oids

    p = HardwareProfile("xgs9", "nineep", "/boot/modules/nineep.ko", default_oids("nineep", 0, ("tx", "rx")),
                        CounterRoles(encrypted=("tx",), decrypted=("rx",), errors=()))
    REGISTRY.register(p, source="test")
    try:
        assert "xgs9" in MODELS and profile_for("xgs9").driver == "nineep"
        assert REGISTRY.marker_lines()[-1] == "xgs9: needs an appliance of model xgs9 (driver nineep)"
        with pytest.raises(ProfileError, match="model 'xgs9' is already defined by test"):
            REGISTRY.register(p, source="elsewhere.yaml")
    finally:
        REGISTRY.unregister("xgs9")
    assert "xgs9" not in MODELS


@pytest.mark.parametrize("text,needle", [
    ("models: {m: {driver: d, module_file: f, counters: [a], roles: {encrypted: [a]}}}", "models.m.roles.decrypted: Field required"),
    ("models: {m: {driver: D!, module_file: f, counters: [a], roles: {encrypted: [a], decrypted: [a]}}}", "models.m.driver"),
    ("models: {m: {driver: d, module_file: f, counters: [a], roles: {encrypted: [a], decrypted: [a]}, colour: red}}",
     "models.m.colour: Extra inputs are not permitted"),
    ("models: [", "not YAML"),
])
def test_a_bad_profiles_file_names_file_and_field(tmp_path, text, needle):
    from ipsec_hil.lab.expectations.profiles_file import load_profiles_file

    f = tmp_path / "profiles.yaml"
    f.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profiles_file(f)
    assert str(info.value).startswith(f"{f}: ") and needle in str(info.value)


def test_the_default_gate_is_a_registered_model():
    """tools/run-acceptance selects ``-m <default_gate>``: a gate naming no model is refused
    when the registry is built, naming the models it could be."""
    from ipsec_hil.lab.expectations.hardware import REGISTRY, ModelRegistry

    assert REGISTRY.default_gate in REGISTRY.names()
    with pytest.raises(ProfileError, match=r"default_gate 'xgs9' is no model of the registry; expected one of xgs136"):
        ModelRegistry([REGISTRY.get("xgs136")], default_gate="xgs9")
