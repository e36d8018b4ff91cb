"""What a packet costs the emulated appliance, and the lab's stated run-to-run noise.

CPU (issue 41: a build that reaches line rate but costs more CPU per packet is a regression
a suite must be able to see): every ESP packet the engine seals (transmit loop) or opens
(receive loop) charges the model's CPU time (ipsec_hil_twin.personality `cpu_ns`, derived
from the pages there) to a shared-memory slot of that loop (engine.counters `cpu:ns_tx` /
`cpu:ns_rx`); the emulated sysctl turns their sum into kern.cp_time's CP_INTR ticks
(ipsec_hil_twin.fbsd.cptime). An offloaded association's packet costs `cpu_ns` times the
loaded build's `twin-cpu-factor` (ipsec_hil_twin.fbsd.kld; 1.0 for a normal build): the
driver's time. A packet of an association the kernel runs (offload off, refused, driver
not loaded) costs `cpu_ns` without the factor -- the build under test does not touch it.
That is a stated simplification: page 002 calls its 29 % "the host forwarding", work a
software association needs too, and no page measures the kernel's own cipher on these
CPUs, so its extra cost is not modelled (a lower bound).

Noise (the lab file's per-appliance `noise:`, ipsec_hil.lab.topology.parts.NoiseModel; off
when absent): a real lab's trials differ run to run (page 001: the same IPv4 tunnel carried
955, 979 and 985 Mbit/s). Time is cut into epochs of `epoch_s` seconds of the wall clock
(epoch = floor(time.time() / epoch_s)); each epoch draws, from
``random.Random(f"{seed}:{host}:{epoch}")``, first n_rate = min(1, exp(N(0, rate_sd))) and
then n_cpu = exp(N(0, cpu_sd)) (``Random.gauss``). The transmit loop paces offloaded
associations to their rate times n_rate (<= 1: a link cannot carry more than its rate) and
both loops charge each packet's CPU times n_cpu. Why epochs: the spread a trial shows is
that of the draws it spans -- a trial of T seconds averages T / epoch_s of them, so short
trials scatter more than long ones, as a real lab's do -- and why seeded by the epoch: the
transmit loop, the receive loop and the control process (three processes) see the same
factors at the same time without talking, and a run can be replayed from the lab file.
"""
from __future__ import annotations

import math
import random
import time
from typing import Any

NOISE_KEYS = ("rate_sd", "cpu_sd", "epoch_s", "seed")


def scaled_ns(personality: Any, port_mbit: list[float]) -> float:
    """What one packet costs on this host: the page's ``cpu_ns`` scaled by the page's link
    rate over the host's slowest rated port (``cpu_at_mbit`` / that rate).

    Why: the twin's links are a scale model of the pages' (the gigabit ports run at 100
    Mbit/s, a tenth), so at line rate a twin appliance handles a tenth of the packets a
    second. Charged at the hardware's ns a packet, its CPU would be a tenth of the page's
    and a 2 s trial's kernel time a few statclock ticks (at 127 Hz): no figure could see a
    5 % costlier build. Scaled, the twin keeps what the page measured -- the share of the
    appliance's CPUs the traffic takes at the link's rate (29 % of the XGS 136's two at
    its gigabit link) -- and a trial's ticks are as many as on the hardware. A host without
    rated ports (or a model without ``cpu_at_mbit``) pays ``cpu_ns`` as it is."""
    base = float(personality.cpu_ns)
    rates = [r for r in port_mbit if r]
    if not rates or not personality.cpu_at_mbit:
        return base
    return base * float(personality.cpu_at_mbit) / min(rates)


class Noise:
    """One appliance's stated noise (host.json `noise`, written from the lab file)."""

    __slots__ = ("rate_sd", "cpu_sd", "epoch_s", "seed", "host")

    def __init__(self, rate_sd: float, cpu_sd: float, epoch_s: float, seed: int, host: str) -> None:
        if not (rate_sd >= 0 and cpu_sd >= 0 and epoch_s > 0):
            raise ValueError(f"noise: expected rate_sd >= 0, cpu_sd >= 0, epoch_s > 0, found "
                             f"{rate_sd}, {cpu_sd}, {epoch_s}")
        self.rate_sd, self.cpu_sd, self.epoch_s = float(rate_sd), float(cpu_sd), float(epoch_s)
        self.seed, self.host = int(seed), str(host)

    @classmethod
    def of(cls, data: Any, host: str) -> "Noise | None":
        """The noise of a host.json `noise` value (None or absent: off). The lab file's
        schema filled in every key; a hand-written host.json must give them all too."""
        if data is None:
            return None
        if not isinstance(data, dict) or set(data) != set(NOISE_KEYS):
            raise ValueError(f"noise: expected an object with {', '.join(NOISE_KEYS)}, found {data!r}")
        return cls(data["rate_sd"], data["cpu_sd"], data["epoch_s"], data["seed"], host)

    def epoch(self, t: float) -> int:
        return math.floor(t / self.epoch_s)

    def factors(self, epoch: int) -> tuple[float, float]:
        """(n_rate, n_cpu) of one epoch: the module docstring's draws, in that order."""
        r = random.Random(f"{self.seed}:{self.host}:{epoch}")
        n_rate = min(1.0, math.exp(r.gauss(0.0, self.rate_sd)))
        n_cpu = math.exp(r.gauss(0.0, self.cpu_sd))
        return n_rate, n_cpu


class Cost:
    """A loop's current charges: ns a packet (offloaded, kernel-run) and the pace factor.

    Set by :meth:`configure` when the loop reloads (the control's state: the build's
    cpu factor, the noise), moved on by :meth:`at` at each epoch's end; `until` is the
    wall time the factors hold until (inf without noise), so a loop looks at the clock's
    epoch only when one ended."""

    def __init__(self, base_ns: float) -> None:
        self.base_ns = float(base_ns)
        self.cpu_factor = 1.0
        self.noise: Noise | None = None
        self.epoch: int | None = None
        self.n_rate = self.n_cpu = 1.0
        self.off_ns = self.sw_ns = int(round(self.base_ns))
        self.until = math.inf

    def configure(self, cpu_factor: float, noise: Noise | None, now: float | None = None) -> None:
        self.cpu_factor, self.noise, self.epoch = float(cpu_factor), noise, None
        self.at(time.time() if now is None else now)

    def at(self, now: float) -> bool:
        """Bring the charges to the epoch of wall time ``now``; True if they changed."""
        if self.noise is None:
            n_rate = n_cpu = 1.0
            self.until = math.inf
        else:
            e = self.noise.epoch(now)
            if e == self.epoch:
                return False
            self.epoch = e
            n_rate, n_cpu = self.noise.factors(e)
            self.until = (e + 1) * self.noise.epoch_s
        off = int(round(self.base_ns * self.cpu_factor * n_cpu))
        sw = int(round(self.base_ns * n_cpu))
        changed = (n_rate, off, sw) != (self.n_rate, self.off_ns, self.sw_ns)
        self.n_rate, self.n_cpu, self.off_ns, self.sw_ns = n_rate, n_cpu, off, sw
        return changed

    def status(self) -> dict[str, Any]:
        """For the control's `status`: what a packet costs now and why."""
        return {"cpu_ns_per_packet": self.base_ns, "cpu_factor": self.cpu_factor,
                "noise": None if self.noise is None else {
                    "epoch": self.epoch, "n_rate": self.n_rate, "n_cpu": self.n_cpu,
                    **{k: getattr(self.noise, k) for k in NOISE_KEYS}}}


def charge_out(sas, cost: Cost) -> None:
    """The transmit loop's SAs (sa_state.OutSa) at the current charges: an offloaded one
    paced to its rate times n_rate and charged the build's ns, a kernel-run one its rate
    and the base ns."""
    n_rate, off, sw = cost.n_rate, cost.off_ns, cost.sw_ns
    for sa in sas:
        sa.pace, sa.cpu_ns = (sa.rate_Bps * n_rate, off) if sa.offloaded else (sa.rate_Bps, sw)


def charge_in(sas, cost: Cost) -> None:
    """The receive loop's SAs (sa_state.InSa) at the current charges."""
    off, sw = cost.off_ns, cost.sw_ns
    for sa in sas:
        sa.cpu_ns = off if sa.offloaded else sw
