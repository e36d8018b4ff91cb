"""quiet: a settle's spacing is the appliances' counter lag, or a load's tail right after a load."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipsec_hil.lab.measuring import quiet
from ipsec_hil.lab.errors import ProfileError
from ipsec_hil.lab.expectations.hardware import DEFAULT_COUNTER_LAG_S, profile_for
from ipsec_hil.lab.measuring.measure import SettleTimeout, Snapshot, settle_all
from ipsec_hil.lab.expectations.profiles_file import load_profiles_file
from ipsec_hil.lab.topology.load import load_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def sleep(self, s: float) -> None:
        self.now += s

    def __call__(self) -> float:
        return self.now


class App:
    """An appliance whose counters stopped moving, with a profile's counter lag."""

    def __init__(self, name: str, lag: float | None) -> None:
        self.name = name
        if lag is not None:
            self.profile = profile_for("xgs136").with_overrides({"counter_lag_s": lag})
        self.reads = 0

    def snapshot(self) -> Snapshot:
        self.reads += 1
        return Snapshot(self.name, 0.0, {"tx_taken": 7}, {})


@pytest.fixture(autouse=True)
def no_load_yet(monkeypatch):
    monkeypatch.setattr(quiet, "_last_load_end", float("-inf"))
    monkeypatch.setattr(quiet, "_quiet_since_load", set())


def test_without_a_load_the_spacing_is_the_largest_counter_lag():
    assert quiet.settle_interval([App("a", 0.1)]) == pytest.approx(0.1)
    assert quiet.settle_interval([App("a", 0.1), App("b", 0.3)]) == pytest.approx(0.3)
    assert quiet.settle_interval([App("bare", None)]) == DEFAULT_COUNTER_LAG_S


def test_each_appliances_first_settle_after_a_load_keeps_its_tail():
    a, b = App("a", 0.1), App("b", 0.1)
    quiet.load_ended()
    assert quiet.settle_interval([a, b]) == quiet.LOAD_TAIL_S
    assert quiet.settle_interval([App("slow", 2.0)]) == 2.0  # a longer lag still wins
    quiet.settled([a])
    assert quiet.settle_interval([a]) == pytest.approx(0.1)
    assert quiet.settle_interval([a, b]) == quiet.LOAD_TAIL_S  # b has not settled since
    quiet.settled([b])
    assert quiet.settle_interval([a, b]) == pytest.approx(0.1)
    quiet.load_ended()  # the next load: every appliance waits its tail again
    assert quiet.settle_interval([a]) == quiet.LOAD_TAIL_S


def test_load_ended_keeps_the_latest_end():
    quiet.load_ended(at=50.0)
    quiet.load_ended(at=40.0)  # a thread that ended earlier reports later
    assert quiet.last_load_end() == 50.0


def test_settle_all_spaces_its_reads_by_the_computed_interval_and_records_the_quiet():
    clock = Clock()
    app = App("npu", 0.1)
    settle_all([app], timeout=10, sleep=clock.sleep, clock=clock)
    assert app.reads == 2 and clock.now == pytest.approx(100.1)
    quiet.load_ended()
    app2 = App("npu2", 0.1)
    settle_all([app2], timeout=10, sleep=clock.sleep, clock=clock)
    assert clock.now == pytest.approx(100.1 + quiet.LOAD_TAIL_S)
    settle_all([App("npu2", 0.1)], timeout=10, sleep=clock.sleep, clock=clock)  # settled once since the load
    assert clock.now == pytest.approx(100.1 + quiet.LOAD_TAIL_S + 0.1)


def test_a_settle_that_times_out_records_nothing():
    class Moving(App):
        def snapshot(self) -> Snapshot:
            self.reads += 1
            return Snapshot(self.name, 0.0, {"tx_taken": self.reads}, {})

    clock = Clock()
    quiet.load_ended()
    with pytest.raises(SettleTimeout):
        settle_all([Moving("busy", 0.1)], timeout=2, sleep=clock.sleep, clock=clock)
    assert quiet.settle_interval([App("busy", 0.1)]) == quiet.LOAD_TAIL_S


def test_an_explicit_interval_is_kept():
    clock = Clock()
    settle_all([App("npu", 0.1)], interval=0.7, timeout=10, sleep=clock.sleep, clock=clock)
    assert clock.now == pytest.approx(100.7)


@pytest.mark.parametrize("value", [0, -1, 11, "fast", True])
def test_a_bad_counter_lag_override_names_the_field(value):
    with pytest.raises(ProfileError, match="profile.counter_lag_s"):
        profile_for("xgs3300").with_overrides({"counter_lag_s": value})


def test_the_hardware_default_is_unchanged_and_the_virtual_lab_states_its_own():
    assert profile_for("xgs136").counter_lag_s == DEFAULT_COUNTER_LAG_S == 0.5
    topo = load_topology(REPO / "topologies" / "virtual.yaml", models=REGISTRY)
    lags = {n: profile_for(h.model).with_overrides(h.profile).counter_lag_s
            for n, h in topo.hosts.items() if h.is_appliance}
    assert lags and set(lags.values()) == {0.1}, lags


def test_a_profiles_file_may_state_the_lag(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("models:\n  xgs4500:\n    driver: fooep\n    module_file: /boot/modules/fooep.ko\n"
                 "    counters: [tx_enc, rx_dec, rx_bad]\n"
                 "    roles: {encrypted: [tx_enc], decrypted: [rx_dec], errors: [rx_bad]}\n"
                 "    counter_lag_s: 0.25\n")
    assert load_profiles_file(f)[0].counter_lag_s == 0.25
    f.write_text(f.read_text().replace("0.25", "0"))
    with pytest.raises(ProfileError, match=r"models\.xgs4500\.counter_lag_s"):
        load_profiles_file(f)
