"""The paced send loop of the injections (ipsec_hil.lab.inject.scripts._PACED) after a stall
of its own: it starts its pacing again instead of catching up in a burst (issue 52).

Why: a sender that fell 15 ms behind at half of 100 Mbit/s caught up with ~94 KB at once,
most of the XGS 136 port's stated 128 KiB queue; with the port's own backlog the engine's
port model tail-dropped a run of consecutive sizes and counted them as the port's Drop
(12 lost, port8 Drop +12, in one of six sweeps with the sender stopped 15 ms every 100 ms).

The loop runs here in-process on a simulated clock (its ``time``) and a socket that records
each send, so a stall is exact and the test does not depend on this machine's load.
"""
from __future__ import annotations

import errno
import json
import types

import pytest

from ipsec_hil.lab.inject.scripts import _PACED

RATE_BPS = 50e6  # half of the 136's 100 Mbit/s port, as share_of_path gives the sweeps
MOST_BURST = 16384  # bytes a catch-up may send at one instant (the loop's bound)


class Clock:
    """time.monotonic/time.sleep on a simulated clock; ``stall(at, s)``: the process is
    descheduled for ``s`` seconds once the clock passes ``at`` (seen at its next look)."""

    def __init__(self) -> None:
        self.now, self.stalls = 0.0, []

    def monotonic(self) -> float:
        for at, s in list(self.stalls):
            if self.now >= at:
                self.stalls.remove((at, s))
                self.now += s
        return self.now

    def sleep(self, s: float) -> None:
        self.now += max(s, 0.0)


class Socket:
    def __init__(self, clock: Clock) -> None:
        self.clock, self.sends = clock, []

    def sendto(self, frame: bytes, addr) -> None:
        self.sends.append((self.clock.now, len(frame)))


def run_paced(stall_at: float, stall_s: float, size: int = 3000, count: int = 2000) -> list[tuple[float, int]]:
    clock = Clock()
    clock.stalls.append((stall_at, stall_s))
    sock = Socket(clock)
    ns = {"errno": errno, "json": json, "time": types.SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep),
          "s": sock, "addr": ("192.0.2.1", 9), "pps": 100000.0, "bps": RATE_BPS, "hdr": 28,
          "frames": lambda: (bytes(size) for _ in range(count)), "print": lambda *a, **k: None, "cut": 0}
    exec(compile(_PACED, "_PACED", "exec"), ns)
    return sock.sends


def largest_instant_burst(sends: list[tuple[float, int]]) -> int:
    """The most bytes sent at one instant of the clock (a burst: no time between them)."""
    by_time: dict[float, int] = {}
    for t, n in sends:
        by_time[t] = by_time.get(t, 0) + n
    return max(by_time.values())


@pytest.mark.parametrize("stall_ms", [5, 15, 19, 300])
def test_after_its_own_stall_the_sender_never_bursts_more_than_16_kib(stall_ms):
    sends = run_paced(stall_at=0.1, stall_s=stall_ms / 1000)
    assert len(sends) == 2000, "every frame sent"
    burst = largest_instant_burst(sends)
    assert burst <= MOST_BURST + 3000, (
        f"after a {stall_ms} ms stall the sender sent {burst:,} bytes at one instant "
        f"(at {RATE_BPS / 1e6:g} Mbit/s a catch-up of {stall_ms} ms is {RATE_BPS / 8 * stall_ms / 1000:,.0f} bytes)")


def test_without_a_stall_the_pace_is_the_rate():
    sends = run_paced(stall_at=1e9, stall_s=0.0)
    duration = sends[-1][0] - sends[0][0]
    sent_bits = sum(n + 28 for _t, n in sends[:-1]) * 8
    assert sent_bits / duration == pytest.approx(RATE_BPS, rel=0.01)
