"""The comparison phase's CPU figure and its sequential design (issue 41), without a lab:
the appliance, the streams and the swaps are stand-ins; what is checked is the phase's
own logic -- what a window's CPU time per packet is, when the phase stops, and that a
decided figure is no longer measured."""

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


def test_cpu_per_packet_is_kernel_ticks_over_the_engines_packets():
    before = cpu_cost.CpuReading("xgs136", _times(100, 50, user=7), 1_000)
    after = cpu_cost.CpuReading("xgs136", _times(100 + 127, 50 + 127, user=900), 1_000 + 80_000)
    cost = cpu_cost.cost_between(before, after)
    assert cost.kernel_seconds == pytest.approx(2.0)  # user time (the reads' own processes) left out
    assert cost.us_per_packet == pytest.approx(25.0)
    assert cost.resolution() == pytest.approx(4 / 127 / 2.0)


@pytest.mark.parametrize("after, why", [
    (cpu_cost.CpuReading("xgs136", _times(200, 60), 1_000), "carried 0 packets"),
    (cpu_cost.CpuReading("xgs136", _times(90, 60), 2_000), "sys went backwards"),
    (cpu_cost.CpuReading("dut3300", _times(200, 60), 2_000), "two appliances"),
])
def test_a_window_that_proves_nothing_is_an_error(after, why):
    before = cpu_cost.CpuReading("xgs136", _times(100, 50), 1_000)
    with pytest.raises(LabError, match=why):
        cpu_cost.cost_between(before, after)


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

    def trial(self, active, figures, seconds):
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
    cpu_trials = [t for t in out.trials if t.unit == "us/packet"]
    assert len(cpu_trials) == first_alone < len(phase.measured)


def test_the_budget_ends_a_phase_that_cannot_decide(monkeypatch):
    _Phase(monkeypatch, cpu_ratio=1.0, up_noise=0.2)  # +-20 %: no interval narrows to +-2.5 % in 4 pairs
    out = _run(SequentialRule(max_pairs=4), figures=("up",))
    (up,) = out.comparisons
    assert out.pairs == 4 and up.verdict.value == "unresolved" and not up.equivalence_proved
    assert up in out.unresolved and not out.regressions
    assert "budget" in (up.reason or "")
