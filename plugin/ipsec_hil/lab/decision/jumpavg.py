"""The alternative rule: FD.io CSIT's per-patch "jumpavg" decision, for comparison only.

Why it is here: the issue names it, and the choice of the bootstrap rule
(:mod:`ipsec_hil.lab.decision.compare`) should rest on numbers, not taste -- the bench prints
both rules' hit rates on the same simulated trials.

The idea (minimum description length, after CSIT's ``jumpavg`` library): samples are
treated as independent normal values; a *group* of samples costs bits to transmit --
its length, its average, its standard deviation and the samples' position on the sphere
those two leave free. Samples that really come from two populations are cheaper to send
as two groups (each with a small spread) than as one group with a wide spread, despite
paying for a second average. The per-patch use: the parent's samples and the candidate's
samples are two groups if and only if that split is cheaper than one group of all of
them; then the candidate's average decides regression or progression. No threshold, no
interval: that is its appeal and, for a page that must say *how much* slower, its limit.

This is a re-implementation of the model as CSIT describes it, not its code:

* length of a group of k samples: ``log2(k (k + 1))`` bits (P(k) = 1 / (k (k + 1)));
* average: uniform over ``[0, max]`` for the first group (``log2(max + 1)``); for a later
  group an "opposite triangle" around the previous group's average, so a second group
  whose average is close to the first costs more (``log2(max (max + 1) / (|delta| + 1))``);
* standard deviation: uniform over ``[0, max]`` (``log2(max + 1)``), for k >= 2;
* the samples given average and deviation lie on a (k-2)-sphere of radius
  ``stdev * sqrt(k)``: its surface area in the resolution's units, in bits.

Values are scaled to units of ``resolution`` (default: one millionth of the largest
value -- what 1 packet/s is to a 1 Mpps rate, the scale CSIT applies it at).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ipsec_hil.lab.decision.compare import Direction, Verdict
from ipsec_hil.lab.decision.errors import bad

DEFAULT_RELATIVE_RESOLUTION = 1e-6


@dataclass(frozen=True)
class JumpVerdict:
    """The jumpavg decision on one figure: verdict, ratio of means, and the two bit counts."""

    figure: str
    verdict: Verdict
    ratio: float
    bits_one_group: float
    bits_two_groups: float


def group_bits(values: Sequence[float], *, max_value: float, prev_avg: float | None = None) -> float:
    """Bits to transmit ``values`` (already in resolution units) as one group."""
    k = len(values)
    if k < 1:
        raise bad("values", values, "at least one value")
    avg = sum(values) / k
    bits = math.log2(k * (k + 1))
    if prev_avg is None:
        bits += math.log2(max_value + 1.0)
    else:
        bits += math.log2(max_value * (max_value + 1.0) / (abs(avg - prev_avg) + 1.0))
    if k < 2:
        return bits
    stdev = math.sqrt(sum((v - avg) ** 2 for v in values) / k)
    bits += math.log2(max_value + 1.0)
    # surface of the (k-2)-sphere of radius stdev*sqrt(k): 2 pi^((k-1)/2) / Gamma((k-1)/2) r^(k-2)
    area_ln = math.log(2.0) + math.log(math.pi) * (k - 1) / 2.0 - math.lgamma((k - 1) / 2.0)
    area_ln += (k - 2) * (math.log(stdev + 1.0) + 0.5 * math.log(k))
    return bits + area_ln / math.log(2.0)


def compare_jumpavg(
    figure: str,
    parent: Sequence[float],
    candidate: Sequence[float],
    *,
    direction: Direction = Direction.HIGHER_IS_BETTER,
    relative_resolution: float = DEFAULT_RELATIVE_RESOLUTION,
) -> JumpVerdict:
    """Two groups (parent | candidate) cheaper than one -> a jump; its sign gives the verdict."""
    if len(parent) < 2 or len(candidate) < 2:
        raise bad(f"{figure}: trials", (len(parent), len(candidate)), ">= 2 parent and >= 2 candidate values")
    if not 0 < relative_resolution < 1:
        raise bad("relative_resolution", relative_resolution, "a fraction in (0, 1)")
    values = [float(v) for v in (*parent, *candidate)]
    if any(not math.isfinite(v) or v < 0 for v in values) or max(values) <= 0:
        raise bad(f"{figure}: values", values, "finite numbers >= 0, not all 0")
    unit = max(values) * relative_resolution
    p = [v / unit for v in parent]
    c = [v / unit for v in candidate]
    top = max(values) / unit
    one = group_bits(p + c, max_value=top)
    p_avg = sum(p) / len(p)
    two = group_bits(p, max_value=top) + group_bits(c, max_value=top, prev_avg=p_avg)
    ratio = (sum(c) / len(c)) / p_avg
    if two >= one:
        verdict = Verdict.NO_CHANGE
    elif (ratio < 1.0) == (direction is Direction.HIGHER_IS_BETTER):
        verdict = Verdict.REGRESSION
    else:
        verdict = Verdict.PROGRESSION
    return JumpVerdict(figure, verdict, ratio, one, two)
