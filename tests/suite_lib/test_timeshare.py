"""timeshare: each second in one category (the innermost), categories + other = wall (issue 15).

On a scripted clock, so the figures are exact; then the instrumented boundaries of the
library (settle, iperf_run, the bench's probes, a shell command, a provisioner phase)
charge the category the page says they do.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ipsec_hil.lab import timeshare
from ipsec_hil.lab.measuring.measure import Snapshot, settle
from ipsec_hil.lab.remote import LocalHost
from ipsec_hil.lab.reporting.page import render_section
from ipsec_hil.lab.reporting.sections import time_share
from ipsec_hil.lab.timeshare import (BRING_UP, OTHER, PROBES, SETTLE, SSH, STREAM, TRAFFIC, Breakdown, TimeShare,
                                  terminal_lines)
from ipsec_hil.lab.traffic.bench import BenchHost, iperf_run


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def share(clock: Clock) -> TimeShare:
    return TimeShare(clock=clock)


def unclamped_other(b: Breakdown) -> float:
    return b.wall - sum(b.seconds.values())


def test_nested_time_goes_to_the_innermost_only(share, clock):
    with share.spent("a"):
        clock.advance(1)
        with share.spent("b"):
            clock.advance(2)
        clock.advance(3)
    b = share.snapshot()
    assert b.seconds == {"a": 4, "b": 2}
    assert b.inclusive == {"a": 6, "b": 2}
    assert unclamped_other(b) == 0


def test_categories_and_other_sum_to_the_wall(share, clock):
    clock.advance(5)  # before anything: other
    with share.spent("a"):
        clock.advance(2)
    clock.advance(1)
    with share.spent("b"):
        with share.spent("a"):
            clock.advance(4)
        clock.advance(0.5)
    clock.advance(2)
    b = share.snapshot()
    assert b.wall == 14.5
    assert b.seconds == {"a": 6, "b": 0.5}
    assert unclamped_other(b) == pytest.approx(8)  # never negative: nothing counted twice
    assert sum(s for _, s in b.rows()) == pytest.approx(b.wall)


def test_the_same_category_nested_counts_once_inclusive_and_once_as_a_call(share, clock):
    with share.spent("a"):
        clock.advance(1)
        with share.spent("a"):
            clock.advance(1)
    b = share.snapshot()
    assert b.seconds == {"a": 2} and b.inclusive == {"a": 2} and b.calls == {"a": 1}


def test_a_transport_joins_the_open_phase_and_counts_on_its_own_outside(share, clock):
    with share.spent(BRING_UP):
        with share.spent(SSH, within_phase=True):
            clock.advance(3)
        clock.advance(1)
    with share.spent(SSH, within_phase=True):
        clock.advance(2)
    b = share.snapshot()
    assert b.seconds == {BRING_UP: 4, SSH: 2}
    assert b.inclusive[SSH] == 5 and b.calls[SSH] == 2  # every command, phases included


def test_time_beyond_a_cap_goes_to_the_enclosing_category(share, clock):
    with share.spent(STREAM):
        clock.advance(0.3)
        with share.spent(TRAFFIC, cap=10):
            clock.advance(10.8)
        clock.advance(0.2)
    with share.spent(TRAFFIC, cap=5):  # no enclosing category: the excess is other
        clock.advance(5.5)
    with share.spent(TRAFFIC, cap=5):  # shorter than asked (iperf3 failed early): all of it
        clock.advance(1)
    b = share.snapshot()
    assert b.seconds[TRAFFIC] == pytest.approx(16)
    assert b.seconds[STREAM] == pytest.approx(1.3)
    assert unclamped_other(b) == pytest.approx(0.5)


def test_only_the_accounted_thread_is_counted(share, clock):
    seen: list[Breakdown] = []

    def helper() -> None:
        with share.spent(TRAFFIC):  # e.g. a ping stream beside a rekey
            clock.advance(7)
        seen.append(share.snapshot())

    with share.spent(SETTLE):
        t = threading.Thread(target=helper)
        t.start()
        t.join()
    b = share.snapshot()
    assert TRAFFIC not in seen[0].seconds
    assert b.seconds == {SETTLE: 7}  # the main thread waited inside settle


def test_a_decorated_function_can_call_itself_and_raise(share, clock):
    @share.spent("a")
    def down(n: int) -> None:
        clock.advance(1)
        if n == 0:
            raise ValueError("bottom")
        down(n - 1)

    with pytest.raises(ValueError):
        down(2)
    clock.advance(1)
    b = share.snapshot()
    assert b.seconds == {"a": 3} and b.calls == {"a": 1}
    assert unclamped_other(b) == 1  # the stack was unwound by the exception


def test_restart_keeps_decorators_bound_earlier(share, clock):
    timed = share.spent("a")
    with timed:
        clock.advance(2)
    share.restart()
    with timed:
        clock.advance(1)
    assert share.snapshot().seconds == {"a": 1}


def test_an_open_category_counts_up_to_the_snapshot(share, clock):
    with share.spent("a"):
        clock.advance(2)
        b = share.snapshot()
    assert b.seconds == {"a": 2} and b.inclusive == {"a": 2}


def test_workers_are_summed_and_survive_the_trip_as_plain_data():
    w1 = Breakdown(100, {TRAFFIC: 60, SSH: 10}, {SSH: 30}, {SSH: 40})
    w2 = Breakdown(80, {TRAFFIC: 50, BRING_UP: 20}, {SSH: 12}, {SSH: 9})
    total = Breakdown.total([Breakdown.from_dict(w1.to_dict()), Breakdown.from_dict(w2.to_dict())])
    assert total.wall == 180 and total.processes == 2
    assert total.seconds == {TRAFFIC: 110, SSH: 10, BRING_UP: 20}
    assert total.inclusive == {SSH: 42} and total.calls == {SSH: 49}
    assert total.other == 40


def test_the_section_lists_every_category_in_order_with_its_share_and_the_ratio():
    b = Breakdown(200, {TRAFFIC: 100, SSH: 30, BRING_UP: 20, SETTLE: 10, STREAM: 5, PROBES: 5}, {SSH: 70}, {SSH: 321})
    text = render_section(time_share(b, run_wall=200, traffic_asked=100))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split("|")[1].strip() for r in rows] == [TRAFFIC, BRING_UP, SSH, SETTLE, STREAM, PROBES, OTHER,
                                                      "**wall**"]
    assert "| traffic | 100.0 | 50.0 % |" in text
    assert "| other | 30.0 | 15.0 % |" in text
    assert "**2.00x**" in text
    assert "321, 70.0 s in all" in text
    lines = terminal_lines(b, run_wall=200, traffic_asked=100)
    assert lines[-1] == "wall 200.0 s / traffic asked 100.0 s = 2.00x"
    assert render_section(time_share(Breakdown(5), run_wall=5, traffic_asked=0)).count("n/a (no traffic asked)") == 1


# ----------------------------------------------------------------- the instrumented boundaries


@pytest.fixture
def scripted_share(monkeypatch, clock) -> TimeShare:
    """The process's own accumulator (the one the library's decorators are bound to) on the
    scripted clock, restarted for this test."""
    monkeypatch.setattr(timeshare.SHARE, "_clock", clock)
    timeshare.SHARE.restart(threading.current_thread())
    yield timeshare.SHARE
    monkeypatch.undo()
    timeshare.SHARE.restart()


#: a measured client's output (the golden file of one stream)
IPERF_JSON = (Path(__file__).resolve().parents[1] / "golden" / "iperf3" / "tcp-single.txt").read_text()


class ScriptedHost:
    """A transport whose commands take scripted time (and count as ssh, like the real ones)."""

    name = "scripted"

    def __init__(self, clock: Clock, seconds: dict[str, float]) -> None:
        self.clock = clock
        self.seconds = seconds

    @timeshare.spent(SSH, within_phase=True)
    def run(self, script: str, *, timeout=None, stdin=None):
        self.clock.advance(next((s for k, s in self.seconds.items() if k in script), 0.1))
        from ipsec_hil.lab.remote import RunResult
        out = "4242\n" if "iperf3 -s" in script else (IPERF_JSON if "iperf3 -c" in script else '{"ok": 1}\n')
        return RunResult(out, "", 0, 0.0, self.name)


def test_a_stream_is_traffic_for_the_seconds_asked_and_start_stop_for_the_rest(scripted_share, clock):
    host = ScriptedHost(clock, {"iperf3 -s": 0.4, "iperf3 -c": 10.6, "kill": 0.2})
    bench = BenchHost("bench", host)
    iperf_run(bench, bench, "192.0.2.2", seconds=10)
    b = scripted_share.snapshot()
    assert b.seconds[TRAFFIC] == pytest.approx(10)
    assert b.seconds[STREAM] == pytest.approx(1.2)
    assert SSH not in b.seconds and b.inclusive[SSH] == pytest.approx(11.2)


def test_probes_and_settle_charge_their_own_categories(scripted_share, clock):
    host = ScriptedHost(clock, {"probes.route": 0.8})
    BenchHost("bench", host).probe("route", action="get", dst="192.0.2.2")

    class App:
        name = "dut"

        def snapshot(self) -> Snapshot:
            host.run("snapshot")
            return Snapshot("dut", clock.now, {"a": 1})

    settle(App(), interval=0.5, sleep=clock.advance, clock=clock)
    host.run("ping")
    b = scripted_share.snapshot()
    assert b.seconds == {PROBES: pytest.approx(0.8), SETTLE: pytest.approx(0.7), SSH: pytest.approx(0.1)}


def test_a_provisioner_phase_is_bring_up(scripted_share, clock):
    from ipsec_hil.lab.provision.provisioner import TunnelProvisioner

    phase = TunnelProvisioner._phase
    holder = type("P", (), {"timings": {}})()
    with phase(holder, "install"):
        clock.advance(3)
    assert scripted_share.snapshot().seconds == {BRING_UP: 3}
    assert holder.timings == {"install": pytest.approx(3, abs=60)}  # its own timing is on the real clock


def test_a_real_shell_command_counts_as_ssh():
    timeshare.SHARE.restart(threading.current_thread())
    LocalHost().run("sleep 0.05").check("sleep")
    b = timeshare.SHARE.snapshot()
    assert 0.05 <= b.seconds[SSH] <= b.wall and b.calls[SSH] == 1


def test_a_udp_trial_and_a_latency_probe_are_traffic_for_their_seconds(scripted_share, clock):
    """The NDR/PDR search's trials and the latency probes offer load for the seconds asked:
    "traffic" up to them, their one-off server and the rest "stream start/stop"."""
    import json

    from ipsec_hil.lab.traffic.udp_load import RTT_LOAD_SECONDS, rtt_probe, udp_trial

    class UdpHost(ScriptedHost):
        def run(self, script, *, timeout=None, stdin=None):
            r = super().run(script, timeout=timeout, stdin=stdin)
            if "iperf3 -c" in script and "ping" not in script:
                udp = {"end": {"sum_sent": {"packets": 100}, "sum_received": {"packets": 100, "lost_packets": 0}}}
                return type(r)(json.dumps(udp), "", 0, 0.0, self.name)
            return r

    host = UdpHost(clock, {"iperf3 -s": 0.3, "ping": RTT_LOAD_SECONDS + 0.4, "iperf3 -c": 2.25, "kill": 0.1})
    bench = BenchHost("bench", host)
    assert udp_trial(bench, bench, "192.0.2.2")(50.0, 2.0).sent == 100
    rtt_probe(bench, bench, "192.0.2.2")(50.0)
    b = scripted_share.snapshot()
    assert b.seconds[TRAFFIC] == pytest.approx(2.0 + RTT_LOAD_SECONDS)
    assert b.seconds[STREAM] == pytest.approx(0.25 + 0.4 + 2 * (0.3 + 0.1))
    assert SSH not in b.seconds
