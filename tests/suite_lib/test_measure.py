"""measure: settle over a scripted sequence of snapshots, ledgers, invariant messages."""

from __future__ import annotations

import csv
import io
import threading
import time

import pytest

from ipsec_hil.lab.errors import InvariantError
from ipsec_hil.lab.measuring.measure import (
    Ledger,
    SettleTimeout,
    Snapshot,
    collect_checks,
    expect_at_least,
    expect_conserved,
    expect_equal,
    expect_within,
    expect_zero,
    settle,
    settle_all,
    unchanged_since,
)


def snap(app: str, t: float, esp_in: int = 0, **counters: int) -> Snapshot:
    return Snapshot(app, t, dict(counters), {"received-packets": esp_in, "dropped-bad-auth": 0})


class ScriptedAppliance:
    """A scripted sequence of reads: the logic of settle is what is tested, not a transport."""

    def __init__(self, name: str, seq: list[Snapshot]) -> None:
        self.name = name
        self.seq = list(seq)
        self.reads = 0

    def snapshot(self) -> Snapshot:
        self.reads += 1
        return self.seq.pop(0) if len(self.seq) > 1 else self.seq[0]


class MovingAppliance:
    """An end whose ``counter`` grows at every read beside ``still`` counters that stay: it
    never settles, and only ``counter`` may be named as moving."""

    def __init__(self, name: str, counter: str, **still: int) -> None:
        self.name, self.counter, self.still, self.reads = name, counter, still, 0

    def snapshot(self) -> Snapshot:
        self.reads += 1
        return snap(self.name, self.reads, **{self.counter: self.reads}, **self.still)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, s: float) -> None:
        self.now += s

    def __call__(self) -> float:
        return self.now


def test_settle_returns_after_two_equal_reads():
    seq = [snap("dut", i, tx_encrypt=v) for i, v in enumerate([10, 20, 25, 25, 99])]
    app = ScriptedAppliance("dut", seq)
    clock = FakeClock()
    s = settle(app, interval=0.5, timeout=10, sleep=clock.sleep, clock=clock)
    assert s.counters["tx_encrypt"] == 25
    assert app.reads == 4
    assert clock.now == pytest.approx(1.5)


def test_settle_esp_counters_count_too():
    seq = [snap("dut", 0, esp_in=1, a=1), snap("dut", 1, esp_in=2, a=1), snap("dut", 2, esp_in=2, a=1)]
    app = ScriptedAppliance("dut", seq)
    clock = FakeClock()
    settle(app, sleep=clock.sleep, clock=clock)
    assert app.reads == 3


def test_settle_times_out_naming_the_moving_counter():
    clock = FakeClock()
    with pytest.raises(SettleTimeout, match=r"dut: counters did not settle.*still moving: tx_encrypt$"):
        settle(MovingAppliance("dut", "tx_encrypt", rx_bad=0), interval=0.5, timeout=2, sleep=clock.sleep, clock=clock)


def test_settle_all_each_end_done_at_its_own_equal_pair():
    quiet = ScriptedAppliance("dut", [snap("dut", 0, a=5)])
    busy = ScriptedAppliance("peer", [snap("peer", i, b=v) for i, v in enumerate([1, 2, 3, 3, 9])])
    clock = FakeClock()
    got = settle_all([quiet, busy], interval=0.5, timeout=10, sleep=clock.sleep, clock=clock)
    assert [s.appliance for s in got] == ["dut", "peer"]
    assert got[1].counters["b"] == 3
    assert (quiet.reads, busy.reads) == (2, 4)  # the settled end is not read again
    assert clock.now == pytest.approx(1.5)


def test_settle_all_reads_the_ends_concurrently():
    """Two ends whose snapshot takes 0.3 s each: settled in about two reads' time, not four."""
    inside, most = [0], [0]
    lock = threading.Lock()

    class Slow:
        def __init__(self, name):
            self.name = name

        def snapshot(self):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.3)
            with lock:
                inside[0] -= 1
            return snap(self.name, 0, a=1)

    settle_all([Slow("a"), Slow("b")], interval=0.01)
    assert most[0] == 2, "the two ends' snapshots never overlapped"


def test_settle_all_timeout_names_only_the_moving_end():
    clock = FakeClock()
    with pytest.raises(SettleTimeout) as err:
        settle_all([ScriptedAppliance("dut", [snap("dut", 0, a=1)]), MovingAppliance("peer", "rx")], interval=0.5, timeout=2,
                   sleep=clock.sleep, clock=clock)
    assert str(err.value).startswith("peer: counters did not settle") and "dut" not in str(err.value)


class Remembering(ScriptedAppliance):
    """A scripted appliance that keeps its last read as Appliance.snapshot does."""

    def __init__(self, name: str, seq: list[Snapshot], clock: "FakeClock", last: tuple[float, Snapshot] | None):
        super().__init__(name, seq)
        self.clock = clock
        self.last_read = last

    def snapshot(self) -> Snapshot:
        s = super().snapshot()
        self.last_read = unchanged_since(self.last_read, s, self.clock())
        return s


def test_the_last_read_keeps_since_when_its_values_held():
    a, b, c = snap("dut", 0, a=5), snap("dut", 1, a=5), snap("dut", 2, a=6)
    assert unchanged_since(None, a, 1.0) == (1.0, a)
    assert unchanged_since((1.0, a), b, 2.0) == (1.0, b)  # equal: the run goes on since 1.0
    assert unchanged_since((1.0, b), c, 3.0) == (3.0, c)  # moved: a new run


def test_a_meter_right_after_another_settles_with_one_read_and_no_wait():
    """The previous settle's equal pair already spans the interval; one equal read now
    extends it (before: one more read and the interval's wait)."""
    clock = FakeClock()
    app = Remembering("dut", [snap("dut", i, a=v) for i, v in enumerate([1, 2, 2, 2])], clock, None)
    settle_all([app], interval=0.5, timeout=10, sleep=clock.sleep, clock=clock)
    assert (app.reads, clock.now) == (3, pytest.approx(1.0))
    settle_all([app], interval=0.5, timeout=10, sleep=clock.sleep, clock=clock)
    assert (app.reads, clock.now) == (4, pytest.approx(1.0))


def test_settle_all_starts_from_a_read_older_than_the_interval():
    """The previous meter's settled read, 2 s old, equals the first read: settled at once."""
    clock = FakeClock()
    clock.now = 10.0
    app = Remembering("dut", [snap("dut", 1, a=5)], clock, (8.0, snap("dut", 0, a=5)))
    got = settle_all([app], interval=0.5, timeout=10, sleep=clock.sleep, clock=clock)
    assert got[0].counters["a"] == 5
    assert app.reads == 1 and clock.now == 10.0


def test_settle_all_waits_out_the_rest_of_the_interval_after_a_recent_read():
    clock = FakeClock()
    clock.now = 10.0
    app = Remembering("dut", [snap("dut", 1, a=5)], clock, (9.8, snap("dut", 0, a=5)))
    settle_all([app], interval=0.5, timeout=10, sleep=clock.sleep, clock=clock)
    assert app.reads == 1 and clock.now == pytest.approx(10.3)


def test_settle_all_an_old_read_that_differs_is_only_the_first_of_the_series():
    """Counters moved since the remembered read: the usual pair of equal reads decides."""
    clock = FakeClock()
    app = Remembering("dut", [snap("dut", i, a=v) for i, v in enumerate([7, 8, 8])], clock,
                      (-5.0, snap("dut", 0, a=5)))
    got = settle_all([app], interval=0.5, timeout=10, sleep=clock.sleep, clock=clock)
    assert got[0].counters["a"] == 8
    assert app.reads == 3 and clock.now == pytest.approx(1.0)


def test_settle_all_mixes_remembered_and_fresh_ends():
    clock = FakeClock()
    old = Remembering("dut", [snap("dut", 1, a=5)], clock, (-3.0, snap("dut", 0, a=5)))
    new = ScriptedAppliance("peer", [snap("peer", 0, b=1)])
    got = settle_all([old, new], interval=0.5, timeout=10, sleep=clock.sleep, clock=clock)
    assert [s.appliance for s in got] == ["dut", "peer"]
    assert (old.reads, new.reads) == (1, 2) and clock.now == pytest.approx(0.5)


def ledger() -> Ledger:
    before = [snap("dut3300", 0, esp_in=0, tx_encrypt=100, out_taken=100, rx_bad=0),
              snap("peer3300", 0, esp_in=50, tx_encrypt=0)]
    after = [snap("dut3300", 1, esp_in=0, tx_encrypt=7_397_269, out_taken=7_397_269, rx_bad=0),
             snap("peer3300", 1, esp_in=7_397_219, tx_encrypt=0)]
    return Ledger.from_snapshots(before, after, title="000 outbound")


def test_ledger_values_table_csv():
    lg = ledger()
    assert lg.delta("dut3300:tx_encrypt") == 7_397_169
    assert lg.delta("peer3300:esp.received-packets") == 7_397_169
    assert lg.value(["dut3300:tx_encrypt", "peer3300:tx_encrypt"]) == 7_397_169
    t = lg.table()
    assert "ledger: 000 outbound" in t
    assert "+7,397,169" in t and "7,397,269" in t
    rows = list(csv.DictReader(io.StringIO(lg.csv())))
    assert {"appliance": "dut3300", "counter": "tx_encrypt", "before": "100", "after": "7397269",
            "delta": "7397169"} in rows
    assert len(rows) == (3 + 2) + (1 + 2)  # driver counters + two esp keys per end
    assert lg.markdown().count("\n") == len(rows) + 1


def test_missing_counter_is_a_clear_error():
    with pytest.raises(Exception, match="dut3300 has no counter 'nope'"):
        ledger().delta("dut3300:nope")
    with pytest.raises(Exception, match="must be '<appliance>:<counter>'"):
        ledger().delta("tx_encrypt")


def test_expect_equal_holds_and_records():
    lg = ledger()
    with collect_checks() as checks:
        v = expect_equal(lg, "dut3300:tx_encrypt", "peer3300:esp.received-packets", "the peer's ESP input exactly")
    assert v == 7_397_169
    assert checks[0].held and lg.checks[0].held
    assert "dut3300:tx_encrypt = peer3300:esp.received-packets" in checks[0].text


def test_expect_equal_broken_message_has_words_and_whole_ledger():
    lg = ledger()
    with collect_checks() as checks, pytest.raises(InvariantError) as ei:
        expect_equal(lg, "dut3300:tx_encrypt", 7_000_000, "tx_encrypt = out_taken")
    msg = str(ei.value)
    assert msg.startswith("invariant broken: tx_encrypt = out_taken: dut3300:tx_encrypt = 7,000,000")
    assert "differ by +397,169" in msg
    assert lg.table() in msg
    assert isinstance(ei.value, AssertionError)
    assert checks and not checks[0].held


def test_expect_zero_bare_name_expands_to_every_appliance():
    lg = ledger()
    expect_zero(lg, ["rx_bad", "esp.dropped-bad-auth"], "no drops")
    assert "peer3300:esp.dropped-bad-auth" in lg.checks[-1].text
    with pytest.raises(InvariantError, match=r"moved: dut3300:tx_encrypt \+7,397,169"):
        expect_zero(lg, "dut3300:tx_encrypt")


def test_expect_at_least_and_within():
    expect_at_least(935.3, 850, "four streams at the port's rate", unit="Mbit/s")
    with pytest.raises(InvariantError, match="measured 396 Mbit/s, below the floor 850 Mbit/s"):
        expect_at_least(396, 850, "first stream after boot", unit="Mbit/s")
    lg = ledger()
    expect_within("dut3300:tx_encrypt", "peer3300:esp.received-packets", 0.001, "handed vs decrypted", ledger=lg)
    with pytest.raises(InvariantError) as ei:
        expect_within(2_358_711, 2_000_000, 0.001, "handed vs decrypted", ledger=lg)
    assert "allowed" in str(ei.value) and "ledger: 000 outbound" in str(ei.value)


def test_no_secret_in_invariant_messages():
    from ipsec_hil.lab.provision import Secret

    psk = Secret("hunter2-very-secret")
    lg = ledger()
    with pytest.raises(InvariantError) as ei:
        expect_equal(lg, "dut3300:tx_encrypt", 1, f"keyed with {psk}")
    assert "hunter2" not in str(ei.value)


def _doors_ledger(sent: int, received: int, tx_drop: int, idrop: int, odrop: int = 0) -> Ledger:
    """The 136 sent ``sent``, the peer decrypted ``received``; the doors between moved so."""
    before = [Snapshot("xgs136", 0.0, {"tx_taken": 0, "tx_drop": 0}, {}, ifs={"port8": (0, 0)}),
              Snapshot("peer3300", 0.0, {"rx_done": 0}, {}, ifs={"port8": (0, 0)})]
    after = [Snapshot("xgs136", 1.0, {"tx_taken": sent, "tx_drop": tx_drop}, {}, ifs={"port8": (0, odrop)}),
             Snapshot("peer3300", 1.0, {"rx_done": received}, {}, ifs={"port8": (idrop, 0)})]
    return Ledger.from_snapshots(before, after, "six streams")


DOORS = ["xgs136:tx_drop", "peer3300:if.port8.idrop"]


def test_the_ledger_closes_on_counts_exactly_and_counted_loss_is_judged_by_the_loss_rule():
    """Issue 52: sent = received + every door, exactly; what the doors counted is loss, at most
    the tolerance of what was sent, recorded with its counters for the page."""
    with collect_checks() as checks:
        assert expect_conserved(_doors_ledger(10_000, 9_995, 3, 2), "xgs136:tx_taken", "peer3300:rx_done", "six",
                                drops=DOORS, tolerance=0.001, at_least=100) == 10_000
    loss = [c for c in checks if c.loss]
    assert len(loss) == 1 and loss[0].held and loss[0].loss == 5
    assert "xgs136:tx_drop +3, peer3300:if.port8.idrop +2" in loss[0].text and "5 of 10,000 frames lost" in loss[0].detail
    with collect_checks() as checks:  # nothing lost: no counted-loss check at all
        expect_conserved(_doors_ledger(10_000, 10_000, 0, 0), "xgs136:tx_taken", "peer3300:rx_done", "six",
                         drops=DOORS, tolerance=0.001, at_least=100)
    assert not [c for c in checks if c.loss]


def test_a_frame_lost_uncounted_fails_even_where_a_door_moved():
    """The old rule took an inexact equality within the tolerance once a drop counter moved:
    one counted drop hid any number of vanished frames. Now the ledger must close."""
    with pytest.raises(InvariantError, match=r"differ by \+6"):
        expect_conserved(_doors_ledger(10_000, 9_993, 1, 0), "xgs136:tx_taken", "peer3300:rx_done", "six",
                         drops=DOORS, tolerance=0.01, at_least=100)


def test_counted_loss_above_the_loss_rule_fails_naming_its_doors():
    with collect_checks() as checks, pytest.raises(InvariantError, match=r"30 of 10,000 frames lost \(0.3000%\)"):
        expect_conserved(_doors_ledger(10_000, 9_970, 30, 0), "xgs136:tx_taken", "peer3300:rx_done", "six",
                         drops=DOORS, tolerance=0.001, at_least=100)
    assert checks[-1].loss == 30 and not checks[-1].held


def test_a_port_without_a_drop_column_has_no_output_door():
    s = Snapshot("a", 0.0, {}, {}, ifs={"port8": (4, None)})
    assert s.values() == {"if.port8.idrop": 4}
