"""Simulated trials and devices: the inputs the decision library is tested and benchmarked on.

Why here and not in tests/: the benchmark (``python -m ipsec_hil.lab.decision.bench``) and
the tests must use the *same* noise model, or the hit rates the bench prints say nothing
about the tests. Everything is seeded (``numpy.random.Generator``), so a failing case
reproduces.

Noise model of a rate figure (what a bench trial looks like): each trial's value is
``mean x drift(t) x (1 + rel_sd x N(0, 1))`` where ``drift(t)`` is a slow multiplicative
change of the lab over the run: a linear trend of ``drift`` (total, e.g. -0.10 = the lab
loses 10 % from the first trial to the last) plus a random walk of ``walk_sd`` per trial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ipsec_hil.lab.decision.compare import CANDIDATE, PARENT
from ipsec_hil.lab.decision.errors import bad
from ipsec_hil.lab.decision.search import TrialResult


def drift_factors(rng: np.random.Generator, trials: int, *, drift: float = 0.0, walk_sd: float = 0.0) -> np.ndarray:
    """``trials`` multiplicative lab-state factors: linear trend plus a random walk."""
    if trials < 1:
        raise bad("trials", trials, "an integer >= 1")
    trend = 1.0 + drift * np.linspace(0.0, 1.0, trials)
    walk = np.cumsum(rng.normal(0.0, walk_sd, trials)) if walk_sd > 0 else np.zeros(trials)
    return trend * np.exp(walk)


def simulated_trials(
    rng: np.random.Generator,
    schedule: Sequence[str],
    *,
    parent_mean: float = 1000.0,
    candidate_ratio: float = 1.0,
    rel_sd: float = 0.03,
    drift: float = 0.0,
    walk_sd: float = 0.0,
) -> list[tuple[str, float]]:
    """One figure's trials for ``schedule`` (roles in measurement order) as ``(role, value)``."""
    if parent_mean <= 0:
        raise bad("parent_mean", parent_mean, "a number > 0")
    if candidate_ratio < 0:
        raise bad("candidate_ratio", candidate_ratio, "a number >= 0")
    lab = drift_factors(rng, len(schedule), drift=drift, walk_sd=walk_sd)
    noise = 1.0 + rel_sd * rng.normal(0.0, 1.0, len(schedule))
    out = []
    for role, state, n in zip(schedule, lab, noise):
        if role not in (PARENT, CANDIDATE):
            raise bad("schedule role", role, f"{PARENT!r} or {CANDIDATE!r}")
        mean = parent_mean * (candidate_ratio if role == CANDIDATE else 1.0)
        out.append((role, float(mean * state * max(n, 0.0))))
    return out


#: sharp: forwards exactly ``knee`` above it; livelock: forwards less the harder it is
#: overloaded (``2 knee - offered``, at least a fifth of the knee -- receive livelock, so the
#: forwarding rate at max load underestimates the knee); gradual: loss grows quadratically
#: from the knee to 20 % at ``full_loss_at``; lossless: never drops
KINDS = ("sharp", "livelock", "gradual", "lossless")


@dataclass
class SimulatedDut:
    """A device under test the search can drive: ``dut(offered_pps, duration) -> TrialResult``.

    ``loss_ratio(offered)`` is its true loss curve (no noise); the knee(s) of that curve are
    the true NDR/PDR the tests check the bounds against. Packets are counted as integers
    (``sent = round(offered x duration)``), like a traffic generator's counters.
    ``one_packet_loss`` is the probability that a trial loses one extra packet at any load
    (a rare stray drop: the case the goal exceed ratio is for). ``buffer`` (sharp kind
    only) is a queue of that many packets, empty at each trial's start, that absorbs the
    excess before anything is dropped: a short trial then passes a load a long one fails --
    why only final-duration trials may prove a bound. ``calls`` counts trials.
    """

    kind: str
    knee: float = 1e6
    full_loss_at: float = 2e6
    one_packet_loss: float = 0.0
    buffer: int = 0
    seed: int = 0
    calls: int = 0
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise bad("SimulatedDut.kind", self.kind, f"one of {KINDS}")
        if self.knee <= 0 or self.full_loss_at <= self.knee:
            raise bad("SimulatedDut.knee/full_loss_at", (self.knee, self.full_loss_at), "0 < knee < full_loss_at")
        if self.buffer < 0 or (self.buffer and self.kind != "sharp"):
            raise bad("SimulatedDut.buffer", self.buffer, "packets >= 0, only for kind 'sharp'")
        self._rng = np.random.default_rng(self.seed)

    def loss_ratio(self, offered: float) -> float:
        """The true loss ratio at ``offered`` (no counting, no noise)."""
        if self.kind == "lossless" or offered <= self.knee:
            return 0.0
        if self.kind == "sharp":
            return (offered - self.knee) / offered  # forwards exactly `knee`, drops the rest
        if self.kind == "livelock":
            return 1.0 - max(0.2 * self.knee, 2 * self.knee - offered) / offered
        x = min(1.0, (offered - self.knee) / (self.full_loss_at - self.knee))
        return 0.2 * x * x  # gradual: loss grows quadratically past the knee, 20 % at full_loss_at

    def true_rate(self, loss_ratio: float, duration: float | None = None) -> float:
        """The highest load whose loss ratio is <= ``loss_ratio`` (the true NDR/PDR).

        With a buffer the answer depends on the trial ``duration`` (required then):
        ``(o - knee) d - buffer <= loss o d``.
        """
        if self.kind == "lossless":
            return math.inf
        if self.buffer:
            if duration is None or duration <= 0:
                raise bad("duration", duration, "the trial duration (s) -- this DUT has a buffer")
            return (self.knee + self.buffer / duration) / (1.0 - loss_ratio)
        if loss_ratio <= 0.0:
            return self.knee
        if self.kind == "sharp":
            return self.knee / (1.0 - loss_ratio)
        if self.kind == "livelock":  # (2 knee - o) / o = 1 - loss, valid while 2 knee - o >= knee / 5
            return 2 * self.knee / (2.0 - loss_ratio)
        return self.knee + (self.full_loss_at - self.knee) * math.sqrt(min(1.0, loss_ratio / 0.2))

    def __call__(self, offered: float, duration: float) -> TrialResult:
        self.calls += 1
        sent = int(round(offered * duration))
        lost = max(0, math.ceil(sent * self.loss_ratio(offered) - self.buffer - 1e-9))
        if self.one_packet_loss and self._rng.random() < self.one_packet_loss:
            lost += 1
        return TrialResult(offered=offered, sent=sent, received=max(0, sent - min(lost, sent)), duration=duration)
