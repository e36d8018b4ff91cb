"""An appliance's kernel CPU time per packet over a window (issue 41).

Why this figure: at the link's rate a candidate driver that burns more CPU per packet still
fills the link, so every rate figure reads "no change" while the appliance has less CPU
left for everything else (the seed pages measured at the gigabit link's 951-982 Mbit/s).
What the kernel spends on the packets the offload engine carried shows it:

- CPU time: ``kern.cp_time`` (:mod:`ipsec_hil.lab.parsers.cputime`), sys + intr ticks
  only. The driver's work runs in interrupt threads and the kernel's forwarding in netisr
  and kernel threads, both counted there; user time is left out because the reads
  themselves (sshd, sh, sysctl) are user processes on the appliance. What they cost in the
  kernel stays in, a few ms per read against a trial's seconds.
- Packets: the engine's own counters of the model's profile, roles ``encrypted`` and
  ``decrypted`` (:class:`ipsec_hil.lab.expectations.hardware.CounterRoles`): the packets the
  driver handled, both ways, so a TCP stream's ACKs count as the packets they are.

A window with no packet is an error, not a figure: 0 s over 0 packets proves nothing.
Resolution: one statclock tick (1/stathz of a CPU, 7.9 ms at 127 Hz) at each end of the
window per CPU state summed: a trial must carry enough CPU time for that to be small
(:func:`CpuCost.resolution`).

Library code: works from a Python prompt with an :class:`ipsec_hil.lab.appliance.Appliance`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.parsers.cputime import CpuTimes

KERNEL_STATES = ("sys", "intr")


@dataclass(frozen=True)
class CpuReading:
    """One end of a window: the kernel's CPU ticks and the engine's packet count so far."""

    appliance: str
    times: CpuTimes
    packets: int


@dataclass(frozen=True)
class CpuCost:
    """What the window cost the appliance's kernel."""

    appliance: str
    kernel_seconds: float
    packets: int
    stathz: int

    @property
    def us_per_packet(self) -> float:
        """Microseconds of kernel CPU per packet the engine carried."""
        return 1e6 * self.kernel_seconds / self.packets

    def resolution(self) -> float:
        """The figure's relative uncertainty from the ticks alone: one tick per kernel
        state at each end of the window, against the window's kernel time."""
        if self.kernel_seconds <= 0:
            return float("inf")
        return 2 * len(KERNEL_STATES) / self.stathz / self.kernel_seconds


def packet_counters(app) -> dict[str, str]:
    """logical name -> OID of the counters whose deltas are the packets the engine carried."""
    roles = app.profile.roles
    oids = app.counter_oids
    return {name: oids[name] for name in (*roles.encrypted, *roles.decrypted)}


def read(app) -> CpuReading:
    """The appliance's CPU ticks, then its engine's packet counters (two commands)."""
    times = app.cpu_times()
    counters = packet_counters(app)
    values = app.sysctl_get(*counters.values())
    packets = 0
    for name, oid in counters.items():
        v = values[oid]
        if not isinstance(v, int):
            raise LabError(f"{app.name}: {oid} ({name}) read {v!r}, not a packet count")
        packets += v
    return CpuReading(app.name, times, packets)


def cost_between(before: CpuReading, after: CpuReading) -> CpuCost:
    """The kernel CPU time and the packets between two readings of one appliance; a
    LabError when nothing was carried or the counters went backwards (a reboot, a driver
    reload between them: the window's figure would be invented)."""
    if before.appliance != after.appliance:
        raise LabError(f"CPU readings of two appliances: {before.appliance} and {after.appliance}")
    try:
        seconds = after.times.seconds_since(before.times, KERNEL_STATES)
    except ValueError as exc:
        raise LabError(f"{after.appliance}: {exc}") from None
    packets = after.packets - before.packets
    if packets <= 0:
        raise LabError(f"{after.appliance}: the engine carried {packets} packets in the window "
                       f"({before.packets} -> {after.packets}): no CPU time per packet to measure")
    return CpuCost(after.appliance, seconds, packets, after.times.stathz)
