"""The comparison phase's CPU figure and its sequential design (issues 41, 54), without a lab:
the appliance, the streams and the swaps are stand-ins; what is checked is the phase's
own logic -- what a window's CPU time per data frame is (not per ACK), over which streams,
read by which one command, when the phase stops, and that a decided figure is no longer
measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipsec_hil.lab.decision.sequential import SequentialRule
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.comparing import build_comparison as bc
from ipsec_hil.lab.measuring import cpu_cost
from ipsec_hil.lab.parsers.cputime import CpuTimes


def _times(sys: int, intr: int, user: int = 0) -> CpuTimes:
    return CpuTimes(hz=1000, stathz=127, ncpu=2, user=user, nice=0, sys=sys, intr=intr, idle=10_000)


def test_cpu_per_frame_is_kernel_ticks_over_the_streams_data_frames_not_their_acks():
    """Issue 54: an up stream's data frames are the ones the DUT sealed; the 40,000 it opened
    in the same window are the stream's ACKs, not counted. A down stream's are the opened ones."""
    before = cpu_cost.CpuReading("xgs136", _times(100, 50, user=7), 1_000, 500)
    after = cpu_cost.CpuReading("xgs136", _times(100 + 127, 50 + 127, user=900), 1_000 + 80_000, 500 + 40_000)
    cost = cpu_cost.cost_between(before, after, "up")
    assert cost.kernel_seconds == pytest.approx(2.0)  # user time (the reads' own processes) left out
    assert (cost.frames, cost.ticks) == (80_000, 254)
    assert cost.us_per_frame == pytest.approx(25.0)
    assert cost.resolution() == pytest.approx(4 / 127 / 2.0)
    assert cost.quantisation() == pytest.approx((2 / 6) ** 0.5 / 254)
    end = cpu_cost.CpuReading("xgs136", _times(227 + 127, 177 + 127, user=900), 81_000 + 30_000, 40_500 + 60_000)
    down = cpu_cost.cost_between(after, end, "down")
    assert (down.frames, down.us_per_frame) == (60_000, pytest.approx(2e6 / 60_000))
    both = cpu_cost.combine([cost, down])
    assert (both.frames, both.ticks, both.windows) == (140_000, 508, 2)
    assert both.us_per_frame == pytest.approx(4e6 / 140_000)
    assert both.quantisation() == pytest.approx((4 / 6) ** 0.5 / 508)


@pytest.mark.parametrize("after, why", [
    (cpu_cost.CpuReading("xgs136", _times(200, 60), 1_000, 9_000), "carried 0 data frames"),
    (cpu_cost.CpuReading("xgs136", _times(90, 60), 2_000), "sys went backwards"),
    (cpu_cost.CpuReading("dut3300", _times(200, 60), 2_000), "two appliances"),
])
def test_a_window_that_proves_nothing_is_an_error(after, why):
    before = cpu_cost.CpuReading("xgs136", _times(100, 50), 1_000)
    with pytest.raises(LabError, match=why):
        cpu_cost.cost_between(before, after, "up")


class _App:
    """An appliance as cpu_cost.read sees it: one sysctl over its host, the golden case's output."""

    name, command_timeout = "xgs136", 60.0

    def __init__(self) -> None:
        from ipsec_hil.lab.expectations.hardware import host_profile  # noqa: F401 (profile shape below)

        self.profile = type("P", (), {"roles": type("R", (), {"encrypted": ("tx_taken", "tx_accel"),
                                                              "decrypted": ("rx_done", "rx_v6")})})()
        self.counter_oids = {n: f"dev.npuep.0.ipsec.{n}" for n in ("tx_taken", "tx_accel", "rx_done", "rx_v6")}
        self.asked: list[str] = []
        outer = self

        class Host:
            def run(self, script, timeout=None):
                outer.asked.append(script)
                text = (Path(__file__).parents[1] / "golden" / "cpu_window" / "xgs136.txt").read_text()
                return type("R", (), {"stdout": text, "check": lambda self, what: self})()

        self.host = Host()


def test_one_sysctl_reads_the_ticks_and_the_counters_of_one_end():
    app = _App()
    r = cpu_cost.read(app)
    assert app.asked == ["sysctl kern.clockrate hw.ncpu kern.cp_time dev.npuep.0.ipsec.tx_taken "
                         "dev.npuep.0.ipsec.tx_accel dev.npuep.0.ipsec.rx_done dev.npuep.0.ipsec.rx_v6\n"]
    assert (r.encrypted, r.decrypted, r.times.intr, r.times.stathz) == (2_913_915, 712_543, 3446, 127)


def test_the_cpu_window_spans_every_stream_of_the_trial(monkeypatch):
    """The CPU figure of a trial of up and down streams: one read before, one after each
    stream, the up window's sealed frames and the down window's opened ones."""
    reads = iter([cpu_cost.CpuReading("xgs136", _times(0, 0), 0, 0),
                  cpu_cost.CpuReading("xgs136", _times(0, 127), 1_000, 400),
                  cpu_cost.CpuReading("xgs136", _times(0, 381), 1_300, 2_400)])
    monkeypatch.setattr(cpu_cost, "read", lambda app: next(reads))
    monkeypatch.setattr(bc, "_measure", lambda active, figure, seconds: {"up": 95.0, "down": 90.0}[figure])
    Active = type("Active", (), {"name": "t", "local": None})
    costs: list = []
    got = bc._measure_trial(Active(), ("up", "down", bc.CPU), 2.0, costs)
    assert got == {"up": 95.0, "down": 90.0, bc.CPU: pytest.approx(1e6 * 3.0 / 3_000)}
    assert costs[0].windows == 2 and costs[0].ticks == 381
    assert bc.cpu_streams(("cpu",)) == ("up",) and bc.cpu_streams(("down", "cpu")) == ("down",)


class _Phase:
    """Stand-in streams: the candidate's CPU per packet is ``cpu_ratio`` times the parent's,
    its rate the same; a little alternating noise so the intervals have a width."""

    def __init__(self, monkeypatch, cpu_ratio: float, up_noise: float = 0.004) -> None:
        self.loaded = "candidate"
        self.up_noise = up_noise
        self.measured: list[tuple[str, ...]] = []
        self.n = 0
        self.cpu_ratio = cpu_ratio
        monkeypatch.setattr(bc, "_switch", lambda deps, path: setattr(self, "loaded", path.stem))
        monkeypatch.setattr(bc, "_measure", lambda active, figure, seconds: 95.0)
        monkeypatch.setattr(bc, "_measure_trial", self.trial)

    def trial(self, active, figures, seconds, streams=None):
        self.measured.append(tuple(figures))
        self.n += 1
        sign = 1.0 if self.n % 3 else -1.0
        cpu = 8.0 * (self.cpu_ratio if self.loaded == "candidate" else 1.0) * (1.0 + 0.004 * sign)
        return {f: (cpu if f == bc.CPU else 95.0 * (1.0 + self.up_noise * sign)) for f in figures}


def _run(phase_rule: SequentialRule, figures=("up", "cpu")) -> bc.BuildComparison:
    builds = bc.Builds("xgs136", Path("/x/parent.ko"), Path("/x/candidate.ko"))

    class Active:
        name = "npu-v4in4-gcm"

    return bc.compare_builds(Active(), [], builds, pairs=0, seconds=1.0, figures=figures, sequential=phase_rule)


def test_a_costlier_build_is_a_cpu_regression_and_the_phase_stops_when_both_figures_are_decided(monkeypatch):
    phase = _Phase(monkeypatch, cpu_ratio=1.10)
    out = _run(SequentialRule(max_pairs=12))
    by = {c.figure: c for c in out.comparisons}
    cpu = by[bc.figure_name(bc.CPU, 1.0)]
    up = by[bc.figure_name("up", 1.0)]
    assert cpu.verdict.value == "regression" and cpu.direction.value == "lower is better", cpu.summary()
    assert up.verdict.value == "no change" and up.equivalence_proved, up.summary()
    assert out.pairs < 12 and len(phase.measured) == 2 * out.pairs, "the phase ran on after both were decided"
    assert "sequential" in out.design and cpu.reason


def test_a_decided_figure_is_no_longer_measured(monkeypatch):
    """The CPU figure decided early (a 30 % costlier build) stops riding on the up stream;
    the up figure, undecided until later, goes on alone."""
    phase = _Phase(monkeypatch, cpu_ratio=1.30, up_noise=0.03)
    out = _run(SequentialRule(max_pairs=12))
    first_alone = phase.measured.index(("up",))
    assert set(phase.measured[:first_alone]) == {("up", "cpu")} and set(phase.measured[first_alone:]) == {("up",)}
    assert first_alone == 2 * SequentialRule().min_pairs  # decided at the first look, measured no more
    cpu_trials = [t for t in out.trials if t.unit == "us/frame"]
    assert len(cpu_trials) == first_alone < len(phase.measured)


def test_the_budget_ends_a_phase_that_cannot_decide(monkeypatch):
    _Phase(monkeypatch, cpu_ratio=1.0, up_noise=0.2)  # +-20 %: no interval narrows to +-2.5 % in 4 pairs
    out = _run(SequentialRule(max_pairs=4), figures=("up",))
    (up,) = out.comparisons
    assert out.pairs == 4 and up.verdict.value == "unresolved" and not up.equivalence_proved
    assert up in out.unresolved and not out.regressions
    assert "budget" in (up.reason or "")


def _tcp4(payload: int, doff: int = 5) -> bytes:
    ihl = 20
    total = ihl + 4 * doff + payload
    hdr = bytes([0x45, 0]) + total.to_bytes(2, "big") + bytes(5) + bytes([6]) + bytes(10)
    tcp = bytes(12) + bytes([doff << 4]) + bytes(4 * doff - 13)
    return hdr + tcp + bytes(payload)


def _tcp6(payload: int, doff: int = 8) -> bytes:
    hdr = bytes([0x60]) + bytes(3) + (4 * doff + payload).to_bytes(2, "big") + bytes([6, 64]) + bytes(32)
    return hdr + bytes(12) + bytes([doff << 4]) + bytes(4 * doff - 13) + bytes(payload)


def test_the_twin_charges_data_frames_and_not_pure_acks():
    """ipsec_hil_twin.engine.cost.data_frame: the pages' CPU is per data frame, the ACKs' cost
    in it; a pure ACK (TCP, no payload, with or without options) is not charged again,
    anything else is (a ping, a SYN's options are headers: not charged; a segment with data)."""
    from ipsec_hil_twin.engine.cost import data_frame

    assert not data_frame(_tcp4(0), True) and not data_frame(_tcp4(0, doff=8), True)
    assert data_frame(_tcp4(1), True) and data_frame(_tcp4(8948, doff=8), True)
    assert not data_frame(_tcp6(0), False) and data_frame(_tcp6(1440), False)
    ping = bytes([0x45, 0, 0, 84]) + bytes(5) + bytes([1]) + bytes(74)
    assert data_frame(ping, True)
    udp6 = bytes([0x60]) + bytes(5) + bytes([17, 64]) + bytes(60)
    assert data_frame(udp6, False)
