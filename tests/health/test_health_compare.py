"""compare(): each finding trips on exactly its change and stays quiet within its tolerance."""
from __future__ import annotations

import pytest

from ipsec_hil.lab.measuring.health import DriverScope, HealthPolicy, compare

from .samples import GOLDEN, baseline, malloc_set, mbufs_plus, snapshot, zone_set

OCTEP = DriverScope(name="octep", module="octep.ko")
POLICY = HealthPolicy()


def _report(after_capture: dict[str, str], policy: HealthPolicy = POLICY, driver: DriverScope = OCTEP):
    return compare(snapshot(baseline()), snapshot(after_capture), policy, driver=driver)


def _defects(report) -> list[tuple[str, str]]:  # noqa: ANN001
    return [(row.check, row.subject) for row in report.findings]


def test_identical_snapshots_are_healthy() -> None:
    report = _report(baseline())
    assert report.ok and report.findings == ()
    assert report.dmesg_added == () and report.dmesg_anchored
    subjects = {(row.check, row.subject) for row in report.rows}
    assert {("UMA zone items in use", "octep_sa_ctx"), ("UMA zone items in use", "octep_cmd"),
            ("malloc allocations in use", "octep"), ("malloc allocations in use", "octep_sa"),
            ("module loaded", "octep.ko")} <= subjects
    assert not any(s == "mbuf" for _, s in subjects), "a kernel zone is not the driver's"
    assert "healthy" in report.table()


@pytest.mark.parametrize("key, slack", [("mbuf-current", POLICY.mbuf_slack),
                                        ("cluster-current", POLICY.cluster_slack)])
def test_mbufs_and_clusters_back_to_baseline_within_the_slack(key: str, slack: int) -> None:
    assert _report(mbufs_plus(baseline(), **{key: slack})).ok
    report = _report(mbufs_plus(baseline(), **{key: slack + 1}))
    check = {"mbuf-current": "mbufs in use", "cluster-current": "mbuf clusters in use"}[key]
    assert _defects(report) == [(check, "-")]
    assert f"+{slack + 1}" in report.table() and "DEFECT" in report.table()


@pytest.mark.parametrize("key, check", [
    ("mbuf-failures", "mbuf requests denied"), ("cluster-failures", "mbuf requests denied"),
    ("jumbo9-failures", "mbuf requests denied"), ("sfbufs-alloc-failed", "mbuf requests denied"),
    ("packet-sleeps", "mbuf requests delayed"), ("jumbop-sleeps", "mbuf requests delayed"),
])
def test_any_denied_or_delayed_request_added_is_a_defect(key: str, check: str) -> None:
    assert _defects(_report(mbufs_plus(baseline(), **{key: 1}))) == [(check, "-")]


def test_driver_zone_growth_and_failures() -> None:
    assert _report(zone_set(baseline(), "octep_sa_ctx", used=4 + POLICY.zone_items_slack)).ok
    grown = _report(zone_set(baseline(), "octep_sa_ctx", used=5 + POLICY.zone_items_slack))
    assert _defects(grown) == [("UMA zone items in use", "octep_sa_ctx")]
    failed = _report(zone_set(baseline(), "octep_cmd", fail=1))
    assert _defects(failed) == [("UMA zone allocation failures", "octep_cmd")]
    assert _report(zone_set(baseline(), "UMA Slabs 0", used=10**6, fail=3)).ok  # not the driver's zone


def test_zone_new_after_the_baseline_counts_from_zero_and_a_gone_zone_is_not_growth() -> None:
    cap = baseline()
    without = zone_set(cap, "octep_cmd", used=0)
    without["vmstat_z"] = without["vmstat_z"].replace('"octep_cmd"', '"other_cmd"')
    new_zone = compare(snapshot(without), snapshot(zone_set(cap, "octep_cmd", used=17)), POLICY, driver=OCTEP)
    assert _defects(new_zone) == [("UMA zone items in use", "octep_cmd")]
    gone = compare(snapshot(cap), snapshot(without), POLICY, driver=OCTEP)
    assert gone.ok and any(r.subject == "octep_cmd" and r.after == "gone" for r in gone.rows)


def test_driver_malloc_types_grown_beyond_the_slack() -> None:
    assert _report(malloc_set(baseline(), "octep", **{"in-use": 12 + POLICY.malloc_in_use_slack})).ok
    report = _report(malloc_set(baseline(), "octep_sa", **{"in-use": 5 + POLICY.malloc_in_use_slack}))
    assert _defects(report) == [("malloc allocations in use", "octep_sa")]
    assert _report(malloc_set(baseline(), "acpica", **{"in-use": 10**6})).ok
    assert _report(malloc_set(baseline(), "octep", **{"memory-use": 10**6})).ok  # unit differs by release


def test_scope_prefixes_choose_the_driver_zones_and_types() -> None:
    scope = DriverScope(name="octep", module="octep.ko", zone_prefixes=("ipsec_",), malloc_prefixes=("ipsec-",))
    report = _report(zone_set(baseline(), "ipsec_secasvar_long_name", used=100), driver=scope)
    assert _defects(report) == [("UMA zone items in use", "ipsec_secasvar_long_name")]
    assert not any(r.subject.startswith("octep_") for r in report.rows)


def test_module_no_longer_loaded() -> None:
    cap = baseline()
    cap["kldstat"] = "".join(line for line in cap["kldstat"].splitlines(keepends=True) if "octep" not in line)
    report = _report(cap)
    assert _defects(report) == [("module loaded", "octep.ko")]
    assert compare(snapshot(baseline()), snapshot(baseline()), POLICY,
                   driver=DriverScope(name="octep", module="octep")).ok  # without .ko


def test_a_reboot_nobody_asked_for() -> None:
    cap = {**baseline(), "boottime": "{ sec = 1700003600, usec = 5 } Tue Nov 14 23:13:20 2023\n"}
    report = _report(cap)
    assert _defects(report) == [("boot time", "-")]
    assert "REBOOTED" in report.table() and "Tue Nov 14 23:13:20 2023" in report.table()


def test_lock_order_reversal_and_the_driver_error_line_added() -> None:
    cap = {**baseline(), "dmesg": (GOLDEN / "dmesg" / "lor-and-driver-error.txt").read_text()}
    report = _report(cap)
    assert _defects(report) == [("kernel log: panic/witness/LOR lines", "-"),
                                ("kernel log: driver error lines", "octep")]
    assert len(report.dmesg_added) == 5 and report.dmesg_anchored
    assert [why for why, _ in report.flagged_lines] == [
        "kernel: /lock order reversal/", "kernel: /lock order reversal/", "octep error"]
    table = report.table()
    assert "octep0: SA install failed: error 5, slot 17    <- octep error" in table
    assert "kernel log lines added: 5\n" in table


def test_benign_and_other_drivers_lines_are_not_the_drivers_errors() -> None:
    tail = "octep0: link state changed to UP\nix0: TX timeout on queue 3, resetting\noctep: SA 17 installed\n"
    report = _report({**baseline(), "dmesg": baseline()["dmesg"] + tail})
    assert report.ok and len(report.dmesg_added) == 3 and report.flagged_lines == ()
    bad = _report({**baseline(), "dmesg": baseline()["dmesg"] + "octep1: firmware command timed out\n"})
    assert _defects(bad) == [("kernel log: driver error lines", "octep")]
    panic = _report({**baseline(), "dmesg": baseline()["dmesg"] + "panic: vm_fault: fault on nofault entry\n"})
    assert _defects(panic) == [("kernel log: panic/witness/LOR lines", "-")]


def test_policy_and_scope_reject_bad_values_naming_the_field() -> None:
    with pytest.raises(ValueError, match="HealthPolicy.mbuf_slack"):
        HealthPolicy(mbuf_slack=-1)
    with pytest.raises(ValueError, match="HealthPolicy.dmesg_anchor_lines"):
        HealthPolicy(dmesg_anchor_lines=0)
    with pytest.raises(ValueError, match="bad pattern"):
        HealthPolicy(kernel_trouble=("panic(",))
    with pytest.raises(ValueError, match="DriverScope.name"):
        DriverScope(name="octep0:", module="octep.ko")
    with pytest.raises(ValueError, match="different hosts"):
        compare(snapshot(baseline(), "fw-a"), snapshot(baseline(), "fw-b"), POLICY, driver=OCTEP)


def test_a_tighter_policy_from_the_profile_is_honoured() -> None:
    strict = HealthPolicy(mbuf_slack=0, cluster_slack=0, zone_items_slack=0, malloc_in_use_slack=0)
    report = _report(mbufs_plus(baseline(), **{"mbuf-current": 1}), policy=strict)
    assert _defects(report) == [("mbufs in use", "-")]
