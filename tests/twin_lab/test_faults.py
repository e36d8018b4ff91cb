"""ipsec_hil_twin.faults: the registry and faults.json (no root needed)."""
from __future__ import annotations

import pytest

from ipsec_hil_twin import faults as F

EXPECTED = {"drop_every", "count_extra", "corrupt_icv", "replay", "wrong_next_header",
            "decline_ipv6_sa", "fragment_instead_of_ptb", "wrong_ptb_mtu",
            "own_too_big_fragmented", "slow_first_stream", "child_never_up", "peer_unreachable",
            # added for the fault matrix: tests no other fault could break
            "ipv4_df_gate", "leak_sa_on_delete",
            # issue 13: rekey and lifetimes
            "rekey_lost", "old_sa_kept", "counters_restart",
            # the appliance's health (issue 13)
            "mbuf_leak", "dmesg_error_under_traffic", "silent_reboot",
            # added for the strict matrix: each check of test_wire / test_all_children_established
            "esp_pad_extra", "gcm_nonce_swapped", "cleartext_leak", "one_end_child_not_installed",
            # issue 12: the wire as an adversary
            "replay_window_off_by_one", "replay_duplicates_accepted", "tampered_icv_delivered",
            "esn_high_bits_lost", "esn_rx_high_bits_lost", "pad_length_lost",
            # issue 43: the survey's teeth (a driver naming a counter otherwise)
            "counter_renamed",
            # issue 42: the SPD as part of a tunnel's state (provision.spd)
            "spd_policy_missing",
            # issue 41: page 003's bypass tax (a per-packet cost while the driver is loaded)
            "bypass_tax",
            # issue 43: a NIC that refuses an association (FreeBSD 15's offload framework)
            "nic_refuses_sa",
            # issue 42: a driver that forgets its associations when the outer port goes down
            "sa_forgotten_on_link_down",
            # issue 42: packets a hard-expired SA's policy frees without counting them
            "expired_drops_uncounted",
            # issue 52: a loss no counter sees, and one the doors count
            "wire_loss_uncounted", "oq_drop_counted"}


def test_registry_complete_and_documented():
    assert set(F.REGISTRY) == EXPECTED
    for f in F.REGISTRY.values():
        assert f.layer in ("engine", "ike", "fbsd")
        assert f.symptom and f.breaks, f.name


def test_defaults_and_types(tmp_path):
    assert F.active_faults(tmp_path) == {}
    assert F.set_fault(tmp_path, "drop_every") == {"n": 100}
    assert F.set_fault(tmp_path, "slow_first_stream", seconds="3") == {"mbit": 20, "seconds": 3}
    assert F.set_fault(tmp_path, "wrong_ptb_mtu", delta="-16") == {"delta": -16}
    assert F.set_fault(tmp_path, "child_never_up", child="c3") == {"child": "c3"}
    assert set(F.active_faults(tmp_path)) == {"drop_every", "slow_first_stream", "wrong_ptb_mtu",
                                              "child_never_up"}
    F.clear_fault(tmp_path, "drop_every")
    assert "drop_every" not in F.active_faults(tmp_path)
    F.clear_fault(tmp_path, None)
    assert F.active_faults(tmp_path) == {}


@pytest.mark.parametrize("name,params,message", [
    ("nope", {}, "unknown fault 'nope'; known: bypass_tax, child_never_up"),
    ("drop_every", {"m": 3}, "unknown parameter(s) m; known: n:int=100"),
    ("drop_every", {"n": "ten"}, "expected int, found 'ten'"),
    ("drop_every", {"n": 0}, "must be > 0"),
    ("child_never_up", {}, "'child' is required"),
])
def test_bad_input_names_the_problem(tmp_path, name, params, message):
    with pytest.raises(F.FaultError) as e:
        F.set_fault(tmp_path, name, **params)
    assert message in str(e.value)
    assert F.active_faults(tmp_path) == {}


def test_kv_and_table():
    assert F.parse_kv(["n=3", "child=a=b"]) == {"n": "3", "child": "a=b"}
    with pytest.raises(F.FaultError, match="key=value"):
        F.parse_kv(["n"])
    table = F.registry_table({"replay": {"every": 7}})
    for name in EXPECTED:
        assert name in table
    assert "every=7" in table


@pytest.mark.parametrize("entry,message", [
    ('layer = "kernel"\nsymptom = "s"\nbreaks = "b"', "[f]: expected layer (engine | ike | fbsd)"),
    ('layer = "engine"\nsymptom = "s"\nbreak = "b"', "[f]: expected layer"),
    ('layer = "engine"\nparams.n = { type = "integer" }\nsymptom = "s"\nbreaks = "b"', "[f]: parameter n"),
    ('layer = "engine"\nparams.n = { type = "int", default = "3" }\nsymptom = "s"\nbreaks = "b"',
     "[f]: parameter n"),
])
def test_registry_file_checked(tmp_path, entry, message):
    """A misspelt entry in fault_registry.toml fails naming it, not as a fault that does nothing."""
    path = tmp_path / "fault_registry.toml"
    path.write_text(f"[f]\n{entry}\n")
    with pytest.raises(F.FaultError) as e:
        F._load_registry(path)
    assert message in str(e.value)
