"""The appliance's CPU time as FreeBSD counts it: `sysctl kern.cp_time`, `kern.clockrate`.

Why a model and not the Linux host's CPU: the twin's engine is a Python process sharing two
cores with every other lab on the machine, so its own CPU time says nothing about the
appliance's; a suite that reads an appliance's CPU (a build that reaches line rate but
costs more per packet is a regression too, issue 41) must read what the appliance would
spend. So the ticks are computed:

- FreeBSD's statclock charges one tick of stathz to the state the interrupted CPU was in
  (sys/kern/kern_clock.c statclock: CP_USER, CP_NICE, CP_SYS, CP_INTR -- an interrupt
  thread, where the drivers' and netisr's work runs -- or CP_IDLE); kern.cp_time is the
  CPUSTATES array summed over the CPUs (kern_clock.c sysctl_kern_cp_time), in that order;
- CP_INTR: the engine's work, `cpu_ns` of the engine's counters (each ESP packet sealed or
  opened adds the model's per-packet cost, ipsec_hil_twin.personality `cpu_ns`, times the
  loaded build's `twin-cpu-factor` and the lab file's noise: ipsec_hil_twin.engine.cost);
- CP_SYS: an idle appliance's background, BACKGROUND_SYS_SHARE of one CPU since boot
  (state.json boot_time, as kern.boottime), a stated assumption: no page gives it;
- CP_USER / CP_NICE: 0 -- the twin models no userland load (the commands the suite runs
  over SSH are not charged);
- CP_IDLE: the rest, ncpu x seconds since boot x stathz minus the busy ticks, never
  negative.

Each is floored to whole ticks, so two reads differ by the model's ticks within one tick.
stdlib only: the emulated sysctl imports this on every run.
"""
from __future__ import annotations

HZ = 1000
TICK = 1000000 // HZ  # microseconds a hardclock tick
PROFHZ = 8128
STATHZ = 127
"""amd64's usual clocks at hz 1000 (stathz and profhz are derived from the event timer by
sys/kern/kern_clocksource.c cpu_initclocks_bsp: 127 and 8128 = 64 x 127 on such a box), what
`sysctl kern.clockrate` prints there; the appliances' own were not read (no page shows them)."""

BACKGROUND_SYS_SHARE = 0.003
"""An idle appliance's kernel background (timers, pf's purge, the NIC's housekeeping) as a
share of ONE CPU, charged to CP_SYS: 0.3 %, a stated assumption (no page measures an idle
box); small enough never to hide an engine's cost, large enough that sys moves on its own."""

CP_NAMES = ("user", "nice", "sys", "intr", "idle")
"""CPUSTATES' order (sys/sys/resource.h CP_USER .. CP_IDLE), the order kern.cp_time prints."""


def clockrate() -> str:
    """`kern.clockrate`'s value as sysctl(8) prints a struct clockinfo (sbin/sysctl/sysctl.c
    S_clockinfo)."""
    return "{ hz = %d, tick = %d, profhz = %d, stathz = %d }" % (HZ, TICK, PROFHZ, STATHZ)


def cp_time(now: float, boot_time: float, ncpu: int, engine_ns: int) -> tuple[int, int, int, int, int]:
    """(user, nice, sys, intr, idle) ticks at ``now`` for an appliance booted at
    ``boot_time`` with ``ncpu`` CPUs whose engine has charged ``engine_ns`` ns (module
    docstring)."""
    up = max(0.0, now - boot_time)
    sys_ticks = int(BACKGROUND_SYS_SHARE * up * STATHZ)
    intr = int(engine_ns) * STATHZ // 1000000000
    total = int(max(1, ncpu) * up * STATHZ)
    idle = max(0, total - sys_ticks - intr)
    return 0, 0, sys_ticks, intr, idle
