"""What a packet costs the emulated appliance and the stated noise (ipsec_hil_twin.engine.cost),
and the CPU time FreeBSD shows from it (ipsec_hil_twin.fbsd.cptime), without a lab.

Why apart from the lab test (tests/twin_lab/test_cpu_and_noise.py): the epochs' edges, a
noise that is off, the factors of a refused association and the tick arithmetic are each
one line here, and each would take seconds of traffic there.
"""
from __future__ import annotations

import math
import random

import pytest

from ipsec_hil_twin.engine.cost import Cost, Noise, charge_in, charge_out
from ipsec_hil_twin.fbsd import cptime


class Sa:
    def __init__(self, offloaded: bool, rate_Bps: float = 0.0) -> None:
        self.offloaded, self.rate_Bps, self.pace, self.cpu_ns = offloaded, rate_Bps, -1.0, -1


def documented(seed: int, host: str, epoch: int, rate_sd: float, cpu_sd: float) -> tuple[float, float]:
    """The lab file's draw as NoiseModel's docstring states it."""
    r = random.Random(f"{seed}:{host}:{epoch}")
    return min(1.0, math.exp(r.gauss(0.0, rate_sd))), math.exp(r.gauss(0.0, cpu_sd))


def test_without_noise_a_packet_costs_the_model_times_the_builds_factor():
    c = Cost(7377)
    c.configure(1.25, None, now=1000.0)
    assert (c.off_ns, c.sw_ns, c.n_rate, c.until) == (9221, 7377, 1.0, math.inf)
    out = [Sa(True, 2.5e6), Sa(False, 2.5e6), Sa(True, 0.0)]
    charge_out(out, c)
    assert [(s.pace, s.cpu_ns) for s in out] == [(2.5e6, 9221), (2.5e6, 7377), (0.0, 9221)]
    inn = [Sa(True), Sa(False)]
    charge_in(inn, c)
    assert [s.cpu_ns for s in inn] == [9221, 7377]
    assert c.at(5000.0) is False  # nothing moves with time


def test_noise_draws_each_epoch_as_documented_and_holds_it_to_the_epochs_end():
    noise = Noise(0.05, 0.02, 0.5, 3, "noisy136")
    c = Cost(3618)
    c.configure(1.0, noise, now=100.2)
    n_rate, n_cpu = documented(3, "noisy136", 200, 0.05, 0.02)
    assert (c.epoch, c.n_rate, c.n_cpu, c.until) == (200, n_rate, n_cpu, 100.5)
    assert c.off_ns == c.sw_ns == round(3618 * n_cpu)
    assert c.at(100.49) is False  # the same epoch
    c.at(100.5)
    assert (c.epoch, c.n_rate) == (201, documented(3, "noisy136", 201, 0.05, 0.02)[0])
    rates = [noise.factors(e)[0] for e in range(2000)]
    assert max(rates) == 1.0 and min(rates) < 0.9, "a link never carries more than its rate; the draws spread"
    assert 0.45 < sum(r == 1.0 for r in rates) / len(rates) < 0.55
    assert noise.factors(7) != Noise(0.05, 0.02, 0.5, 3, "quiet136").factors(7), "seeded by the appliance too"
    sa = Sa(True, 2.5e6)
    charge_out([sa], c)
    assert sa.pace == pytest.approx(2.5e6 * c.n_rate)


@pytest.mark.parametrize("data,why", [
    ({"rate_sd": 0.05}, "expected an object with rate_sd, cpu_sd, epoch_s, seed"),
    ({"rate_sd": -1, "cpu_sd": 0, "epoch_s": 1, "seed": 0}, "expected rate_sd >= 0"),
    ({"rate_sd": 0, "cpu_sd": 0, "epoch_s": 0, "seed": 0}, "epoch_s > 0"),
])
def test_a_host_json_noise_the_engine_cannot_use_is_named(data, why):
    assert Noise.of(None, "h") is None
    with pytest.raises(ValueError, match=why):
        Noise.of(data, "h")


def test_cp_time_ticks_are_the_model_floored():
    boot = 1_000_000.0
    # an hour up on 2 CPUs, 10 s of engine work: intr 1270, sys 0.3 % of one CPU, idle the rest
    assert cptime.cp_time(boot + 3600, boot, 2, 10 * 10**9) == (
        0, 0, int(0.003 * 3600 * 127), 1270, 2 * 3600 * 127 - int(0.003 * 3600 * 127) - 1270)
    assert cptime.cp_time(boot + 1, boot, 2, 7377 * 1000)[3] == 0  # 7.4 ms: under one tick (7.87 ms)
    assert cptime.cp_time(boot + 1, boot, 2, 10**12)[4] == 0, "idle never negative"
    assert cptime.clockrate() == "{ hz = 1000, tick = 1000, profhz = 8128, stathz = 127 }"


def test_a_packet_costs_the_pages_cpu_share_at_the_links_rate():
    """cost.scaled_ns: on a port ten times slower than the page's link a packet costs ten
    times the page's ns, so the CPU share at line rate stays the page's (29 % of an XGS
    136's two CPUs at 915 Mbit/s); without rated ports, the page's ns as it is."""
    from ipsec_hil_twin.engine.cost import scaled_ns
    from ipsec_hil_twin.personality import PERSONALITIES

    p = PERSONALITIES["xgs136"]
    assert scaled_ns(p, [91.5, 1000.0]) == pytest.approx(p.cpu_ns * 10)
    frames_per_s = 91.5e6 / 8 / 1455  # page 002's 1,455 bytes of stream a frame, at the slowest port's rate
    assert scaled_ns(p, [91.5]) * 1e-9 * frames_per_s / p.ncpu == pytest.approx(0.29, rel=0.01)
    assert scaled_ns(p, []) == p.cpu_ns
