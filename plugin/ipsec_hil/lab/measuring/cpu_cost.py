"""An appliance's kernel CPU time per data frame over a trial's streams (issues 41, 54).

Why this figure: at the link's rate a candidate driver that burns more CPU per frame still
fills the link, so every rate figure reads "no change" while the appliance has less CPU
left for everything else (the seed pages measured at the gigabit link's 951-982 Mbit/s).
What the kernel spends on the frames the offload engine carried shows it:

- **What it divides: data frames, not ACKs.** The pages' cost is per data frame (page 002:
  29 % of the XGS 136's two CPUs over the 2,358,711 frames its host handed the engine,
  the streams' ACKs coming back included in that CPU). A stream's data frames are the
  ones the DUT seals for an up stream (the profile's ``encrypted`` counters over the up
  stream's window) and opens for a down stream (``decrypted`` over the down stream's):
  the other direction's packets of a window are that stream's ACKs, whose count moves with
  TCP's delayed ACKs and the receiver's coalescing, not with the build. (Before issue 54
  the figure divided by both, ACKs as packets.)
- **Over which window: every stream of the trial.** One read before the trial's first
  stream and one after each (:func:`read`; consecutive windows share their read), the
  CPU time of all of them over the data frames of all of them (:func:`combine`): a trial
  of up and down streams counts twice the ticks of one stream.
- **Which clock: kern.cp_time, sys + intr, counted in ticks.** The driver's work runs in
  interrupt threads and the kernel's forwarding in netisr and kernel threads, both counted
  there; user time is left out because the reads themselves (sshd, sh, sysctl) are user
  processes on the appliance. Each of the two states is floored to whole statclock ticks
  (1/stathz of a CPU, 7.9 ms at 127 Hz) at each end of a window: the window's count is off
  by less than one tick per state, uniformly, an sd of sqrt(2/6) = 0.58 tick
  (:meth:`CpuCost.quantisation`); the figure carries its ticks so the caller can state it.
  On hardware statclock also *samples* (a tick is charged to the state the CPU was in when
  it fired): K ticks of a window are good to about sqrt(K) more, which no virtual lab
  models (the twin's ticks are its model's time, floored).
- **One command** (:mod:`ipsec_hil.lab.parsers.cpu_window`): the ticks and the counters of
  one end of a window in one ``sysctl``, at one instant, one parser with golden files; the
  same code reads the twin and the appliance.

A window with no data frame is an error, not a figure: 0 s over 0 frames proves nothing.

Library code: works from a Python prompt with an :class:`ipsec_hil.lab.appliance.Appliance`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.parsers import cpu_window
from ipsec_hil.lab.parsers.cputime import CpuTimes

KERNEL_STATES = ("sys", "intr")
#: the counter role whose delta is a stream's data frames, by the stream's direction
DATA_FRAMES = {"up": "encrypted", "down": "decrypted"}


@dataclass(frozen=True)
class CpuReading:
    """One end of a window: the kernel's CPU ticks and the engine's packet counts so far."""

    appliance: str
    times: CpuTimes
    encrypted: int
    decrypted: int = 0

    @property
    def packets(self) -> int:
        return self.encrypted + self.decrypted


@dataclass(frozen=True)
class CpuCost:
    """What a window (or a trial's windows, :func:`combine`) cost the appliance's kernel."""

    appliance: str
    kernel_seconds: float
    frames: int  # data frames (the stream's direction's counter), not ACKs
    stathz: int
    ticks: int  # sys + intr statclock ticks counted
    windows: int = 1

    @property
    def us_per_frame(self) -> float:
        """Microseconds of kernel CPU per data frame the engine carried."""
        return 1e6 * self.kernel_seconds / self.frames

    def quantisation(self) -> float:
        """The figure's relative sd from flooring alone: each window's count of each state is
        off by a uniform(-1, 1)-tick difference of two floors (sd 1/sqrt(6)); over the
        windows' states, against the ticks counted."""
        if self.ticks <= 0:
            return math.inf
        return math.sqrt(self.windows * len(KERNEL_STATES) / 6) / self.ticks

    def resolution(self) -> float:
        """The figure's worst-case relative error from the ticks alone: one tick per kernel
        state at each end of each window, against the window's kernel time."""
        if self.kernel_seconds <= 0:
            return math.inf
        return 2 * self.windows * len(KERNEL_STATES) / self.stathz / self.kernel_seconds


def counter_oids(app) -> tuple[dict[str, str], dict[str, str]]:
    """(encrypted, decrypted): logical name -> OID of the engine's counters by role."""
    roles, oids = app.profile.roles, app.counter_oids
    return ({n: oids[n] for n in roles.encrypted}, {n: oids[n] for n in roles.decrypted})


def read(app) -> CpuReading:
    """The appliance's CPU ticks and its engine's packet counters, one ``sysctl``."""
    enc, dec = counter_oids(app)
    cmd = cpu_window.command(tuple(enc.values()), tuple(dec.values()))
    r = app.host.run(cmd + "\n", timeout=app.command_timeout)
    r.check(cpu_window.COMMAND)
    got = cpu_window.parse(r.stdout, tuple(enc.values()), tuple(dec.values()))
    return CpuReading(app.name, got.times, got.encrypted, got.decrypted)


def cost_between(before: CpuReading, after: CpuReading, stream: str = "up") -> CpuCost:
    """The kernel CPU time and the data frames of one ``stream`` ("up": the DUT sealed them;
    "down": it opened them) between two readings of one appliance; a LabError when no data
    frame was carried or the counters went backwards (a reboot, a driver reload between
    them: the window's figure would be invented)."""
    if before.appliance != after.appliance:
        raise LabError(f"CPU readings of two appliances: {before.appliance} and {after.appliance}")
    try:
        seconds = after.times.seconds_since(before.times, KERNEL_STATES)
    except ValueError as exc:
        raise LabError(f"{after.appliance}: {exc}") from None
    role = DATA_FRAMES[stream]
    frames = getattr(after, role) - getattr(before, role)
    if frames <= 0:
        raise LabError(f"{after.appliance}: the engine carried {frames} data frames ({role}) in the {stream} "
                       f"stream's window ({getattr(before, role)} -> {getattr(after, role)}): no CPU time per "
                       "frame to measure")
    ticks = sum(getattr(after.times, s) - getattr(before.times, s) for s in KERNEL_STATES)
    return CpuCost(after.appliance, seconds, frames, after.times.stathz, ticks)


def combine(costs: Sequence[CpuCost]) -> CpuCost:
    """A trial's windows as one figure: their CPU time over their data frames."""
    if not costs:
        raise LabError("no CPU window to combine")
    return CpuCost(costs[0].appliance, sum(c.kernel_seconds for c in costs), sum(c.frames for c in costs),
                   costs[0].stathz, sum(c.ticks for c in costs), sum(c.windows for c in costs))
