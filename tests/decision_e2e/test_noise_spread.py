"""The virtual lab's noise as the suite's own trials see it (issue 54): identical builds,
measured with the comparison's trial code, spread as the pages say a real lab does.

The lab: topologies/virtual.yaml with ``noise: {}`` on every appliance (the schema's
defaults: ipsec_hil_twin.engine.cost derives them from the pages), every link at
``QUIET_STREAM_RATE_MBIT`` (the stream is the link's figure, not the neighbour's CPU's) and
every port at MTU 1500, the frames of page 002's CPU reading (1,455 bytes of stream a frame):
at the default lab's jumbo frames a 2 s trial counts ~24 ticks of CPU, and the ticks'
quantisation would hide the CPU model's spread (cpu_cost says why).
``TRIALS`` trials of ``SECONDS`` s of one build, back to back (decision_power.trial_spread:
build_comparison._measure_trial, the up stream and the DUT's CPU per packet over it).

What the pages say a trial of T seconds should show (written here from the pages, not read
from the twin):

- rate: page 001's back-to-back 15 s runs (encrypting 979, 985; decrypting 985, 984) differ
  by 0.31 % a run (pooled: sqrt(mean(d^2) / 2)); a fast part that is independent per 1 s
  epoch shows sqrt(w(T) / w(15)) times that in a T-second trial, w(T) = (1/T)(1 - 1/(3T))
  the variance share of a mean of 1 s draws at a random phase: 0.78 % at 2 s;
- CPU: the stated assumption (no page repeats a CPU reading), 2 % per 1 s draw: 2 % x
  sqrt(w(T)), plus the statclock's quantisation the trial counts: two floored reads of
  two states (sys, intr) differ from the truth by sqrt(2/6) of a tick in sd, over the
  trial's K ticks.

Measured: from successive trials' log differences (the drift, 1.6 % across a day, moves
< 0.1 % between neighbours), their sd / sqrt(2), trimmed: the largest tenth of the
differences left out and the rest's rms scaled back to a normal's (/ 0.789). Why trimmed: a
stall of the shared machine takes a trial's stream 1-3 % down, and each makes two large
differences (a noise-off lab's 30 trials: plain 0.55 %, trimmed 0.19 %); the outlier epochs
(0.2 % of epochs) go the same way.

Two checks, each within its stated tolerance:

1. **The spread**: measured / stated within [1/1.5, 2]. Loose, and wider above: the twin
   adds a floor of its own to the rate (TCP and the shared machine: a noise-off lab's trials
   0.19 % at MTU 9000; with the model on at MTU 1500, 1.13 % measured against 0.78 % stated,
   a floor of ~0.8 %), and with 39 differences a trimmed sd is good to ~13-15 %.
2. **The model's amplitude in the trials**: the pages' draw (the documented formula,
   ``Random(f"{seed}:{host}:{epoch}")``: the rate's gauss, the CPU's gauss, the outlier's
   random; the parameters written here from the pages, not read from the twin) predicts
   each trial's mean factor over its stream's window (the trial's last ``SECONDS`` before
   its closing read); the slope of log(measured) on log(predicted) over the trials with no
   outlier epoch must lie within [0.75, 1.33]. A floor adds scatter, not slope, so this is
   what a model off by a factor of two fails (slope 0.5 or 2). The slope is Theil-Sen's (the
   median of the slopes between every two trials): a stall of the shared machine that takes
   a few trials' streams down (two busy loops beside the lab took one run's rate spread to
   3 %) moves the median little. The drift moves < 0.1 % in the test's two minutes: the
   intercept takes it.

Proof that it fails when the model is off by two: ``NOISE_SPREAD_SCALE=0.5`` / ``=2`` runs
the lab with the model's sds halved / doubled against the same pages (the commit that added
this module says what those runs printed).
"""
from __future__ import annotations

import json
import math
import os
import random
import statistics

import pytest
import yaml

from tests.lab_factory import QUIET_STREAM_RATE_MBIT, VIRTUAL_TOPOLOGY, start_lab
from ipsec_hil.lab.comparing.decision_power import trial_spread

pytestmark = pytest.mark.needs_root

TRIALS, SECONDS = 40, 2.0
SPREAD_TOLERANCE = (1 / 1.5, 2.0)
SLOPE_TOLERANCE = (0.75, 1.33)
HOST, SEED = "xgs136", 0
CLOSE_S = 0.04  # the closing cpu read after a trial's stream (one sysctl over SSH)
SCALE = float(os.environ.get("NOISE_SPREAD_SCALE", "1"))
"""The model's sds times this in the lab file (1: as stated); 0.5 and 2 must fail the test."""

FAST_15S = math.sqrt((math.log(985 / 979) ** 2 + math.log(984 / 985) ** 2) / 4)
CPU_PER_DRAW = 0.02
QUANTUM = math.sqrt(2 / 6)
CLIP = math.sqrt(0.5 - 0.5 / math.pi)  # sd of min(0, Z): the link clips half of each draw
OUTLIER_SHARE, OUTLIER_RATE, OUTLIER_CPU = 0.002, 0.8, 1.25


def w(t: float) -> float:
    return (1 / t) * (1 - 1 / (3 * t))


def rate_draw_sd() -> float:
    """The per-epoch draw that shows the pages' 15 s spread: FAST_15S / sqrt(w(15)) / CLIP."""
    return FAST_15S / math.sqrt(w(15.0)) / CLIP


def draw(epoch: int) -> tuple[float, float, bool]:
    """The pages' draw of one epoch as the lab file documents it (rate, cpu, outlier)."""
    r = random.Random(f"{SEED}:{HOST}:{epoch}")
    n_rate, n_cpu = min(1.0, math.exp(r.gauss(0.0, rate_draw_sd()))), math.exp(r.gauss(0.0, CPU_PER_DRAW))
    out = r.random() < OUTLIER_SHARE
    return (n_rate * OUTLIER_RATE, n_cpu * OUTLIER_CPU, True) if out else (n_rate, n_cpu, False)


def predicted(wall: list[float]) -> tuple[float, float, bool]:
    """A trial's mean rate and CPU factors over its stream (the last SECONDS before the
    closing read), time-weighted (the CPU's by the rate: frames), and whether it met an
    outlier epoch."""
    t, end = wall[1] - CLOSE_S - SECONDS, wall[1] - CLOSE_S
    rate = cpu = 0.0
    hit = False
    while t < end:
        e = math.floor(t)
        nxt = min(end, e + 1.0)
        nr, nc, out = draw(e)
        rate += (nxt - t) * nr
        cpu += (nxt - t) * nr * nc
        hit |= out
        t = nxt
    return rate / SECONDS, cpu / rate, hit


def slope(xs: list[float], ys: list[float]) -> float:
    """Theil-Sen: the median of the slopes between every two points."""
    return statistics.median((ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
                             if abs(xs[j] - xs[i]) > 1e-6)


def stated_rate(t: float) -> float:
    return FAST_15S * math.sqrt(w(t) / w(15.0))


def stated_cpu(t: float, ticks: float) -> float:
    return math.sqrt(CPU_PER_DRAW ** 2 * w(t) + (QUANTUM / ticks) ** 2)


KEEP = 0.9
_Z = statistics.NormalDist().inv_cdf(0.5 + KEEP / 2)
TRIM = math.sqrt(1 - 2 * _Z * statistics.NormalDist().pdf(_Z) / KEEP)  # rms of a normal's central 90 %: 0.789


def spread(values: list[float]) -> tuple[float, int]:
    """(sd of one trial from its successive differences, trimmed; differences left out)."""
    d = sorted(abs(math.log(b / a)) for a, b in zip(values, values[1:]))
    kept = d[:round(KEEP * len(d))]
    return math.sqrt(statistics.fmean(x * x for x in kept)) / TRIM / math.sqrt(2), len(d) - len(kept)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (the virtual lab: network namespaces, TUN)")
    data = yaml.safe_load(VIRTUAL_TOPOLOGY.read_text())
    for host in data["hosts"].values():
        for port in host["ports"].values():
            port["mtu"] = min(port.get("mtu", 1500), 1500)
        if host.get("role") == "appliance":
            host["noise"] = {} if SCALE == 1 else {"rate_sd": 0.0208 * SCALE, "cpu_sd": 0.02 * SCALE}
    path = tmp_path_factory.mktemp("noisy") / "virtual-noise.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    lab = start_lab(tmp_path_factory, topology=path, rate_mbit=QUIET_STREAM_RATE_MBIT)
    try:
        yield lab
    finally:
        lab.close()


def test_identical_builds_trials_spread_as_the_pages_say(lab, tmp_path):
    rows = trial_spread(lab.resolved, model=HOST, trials=TRIALS, seconds=SECONDS)
    (tmp_path / "trials.json").write_text(json.dumps(rows))
    ticks = statistics.fmean(r["ticks"] for r in rows)
    want = {"up": stated_rate(SECONDS), "cpu": stated_cpu(SECONDS, ticks)}
    got = {f: spread([r[f] for r in rows])[0] for f in want}
    pred = [predicted(r["wall"]) for r in rows]
    clean = [(r, p) for r, p in zip(rows, pred) if not p[2]]
    slopes = {f: slope([math.log(p[i]) for _, p in clean], [math.log(r[f]) for r, _ in clean])
              for i, f in enumerate(want)}
    report = "; ".join(f"{f}: measured {100 * got[f]:.2f} %, stated {100 * want[f]:.2f} % (x{got[f] / want[f]:.2f}), "
                       f"slope on the pages' draw {slopes[f]:.2f}" for f in want)
    print(f"{TRIALS} trials of {SECONDS:g} s ({len(rows) - len(clean)} with an outlier epoch), {ticks:.0f} ticks "
          f"a trial, model scale {SCALE:g}: {report} (trials: {tmp_path / 'trials.json'})")
    for f in want:
        assert SPREAD_TOLERANCE[0] <= got[f] / want[f] <= SPREAD_TOLERANCE[1], report
        assert SLOPE_TOLERANCE[0] <= slopes[f] <= SLOPE_TOLERANCE[1], report
