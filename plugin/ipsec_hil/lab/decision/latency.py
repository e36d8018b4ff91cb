"""Latency at fractions of PDR: min / median / p99 from timestamped probes.

Why at fractions of PDR: latency at the throughput limit measures queue depth, not the
datapath; RFC 2544 style reports sample it below the limit (here 10 %, 50 %, 90 % of the
PDR's lower bound by default, so every probe load is one the search proved the tunnel
carries).

Exact definitions (so two reports can be compared):

* a probe's latency is ``received - sent`` of its two timestamps (same clock, seconds);
  a probe never received is *lost*: counted, excluded from the statistics;
* ``min`` and ``max`` are the extremes of the received probes' latencies;
* ``median`` is ``statistics.median`` (the middle value; the mean of the two middle values
  for an even count);
* ``p99`` is the **nearest-rank** 99th percentile: the value at 1-based rank
  ``ceil(0.99 x N)`` of the ascending latencies -- always an observed latency, never an
  interpolation (with fewer than 100 probes it is the maximum).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from ipsec_hil.lab.decision.errors import DecisionError, bad

DEFAULT_FRACTIONS = (0.1, 0.5, 0.9)


@dataclass(frozen=True)
class ProbeSample:
    """One probe: when it left and when it came back (None: lost), seconds on one clock."""

    sent: float
    received: float | None


@dataclass(frozen=True)
class LatencySummary:
    """The latency at one load; every latency in seconds."""

    fraction: float
    offered: float
    probes: int
    lost: int
    min: float
    median: float
    p99: float
    max: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)

    def summary(self) -> str:
        return (
            f"{self.fraction:.0%} of PDR ({self.offered:.6g}): min {self.min * 1e6:.1f} us, "
            f"median {self.median * 1e6:.1f} us, p99 {self.p99 * 1e6:.1f} us "
            f"({self.probes - self.lost} of {self.probes} probes received)"
        )


def nearest_rank(sorted_values: Sequence[float], percentile: float) -> float:
    """The nearest-rank percentile (0 < percentile <= 100) of ascending values."""
    if not sorted_values:
        raise bad("values", sorted_values, "at least one value")
    if not 0 < percentile <= 100:
        raise bad("percentile", percentile, "a number in (0, 100]")
    rank = math.ceil(percentile / 100.0 * len(sorted_values) - 1e-9)
    return sorted_values[max(1, rank) - 1]


def summarize(samples: Sequence[ProbeSample], *, fraction: float, offered: float) -> LatencySummary:
    """Min/median/p99/max of the received probes; lost probes counted. Errors name the probe."""
    latencies = []
    lost = 0
    for i, s in enumerate(samples):
        if not isinstance(s, ProbeSample):
            raise bad(f"samples[{i}]", s, "a ProbeSample")
        if s.received is None:
            lost += 1
            continue
        delay = s.received - s.sent
        if not math.isfinite(delay) or delay < 0:
            raise bad(f"samples[{i}] latency", delay, "a finite number >= 0 (received after sent, one clock)")
        latencies.append(delay)
    if not latencies:
        raise DecisionError(
            f"latency at {fraction:.0%} of PDR ({offered:g}): {len(samples)} probes, none received"
        )
    latencies.sort()
    return LatencySummary(
        fraction=fraction,
        offered=offered,
        probes=len(samples),
        lost=lost,
        min=latencies[0],
        median=statistics.median(latencies),
        p99=nearest_rank(latencies, 99),
        max=latencies[-1],
    )


def latency_profile(
    probe: Callable[[float], Sequence[ProbeSample]],
    pdr: float,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
) -> tuple[LatencySummary, ...]:
    """``probe(load)`` at each fraction of ``pdr`` (e.g. the PDR's proved lower bound)."""
    if not (isinstance(pdr, (int, float)) and math.isfinite(pdr) and pdr > 0):
        raise bad("pdr", pdr, "a finite load > 0 (the PDR's lower bound)")
    for f in fractions:
        if not 0 < f <= 1:
            raise bad("fractions", f, "fractions in (0, 1]")
    return tuple(summarize(probe(pdr * f), fraction=f, offered=pdr * f) for f in fractions)
