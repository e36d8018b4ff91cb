"""The datapath's pacers: an SA's port rate (the transmit loop) and issue 531's slow first
stream (fault `slow_first_stream`, both loops)."""
from __future__ import annotations

import time


class PortPacer:
    """An SA's port rate (`rate_mbit`): a token bucket of 64 KiB, 80 bytes of wire
    overhead a packet; sleeping here lets esp0's queue fill and drop, as a port would."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.last = time.monotonic()

    def pace(self, rate_Bps: float, n: int, now: float) -> None:
        self.tokens = min(65536.0, self.tokens + (now - self.last) * rate_Bps) - n - 80
        self.last = now
        if self.tokens < 0:
            time.sleep(-self.tokens / rate_Bps)


class FirstStreamPacer:
    """Issue 531 (fault `slow_first_stream`): after boot/reset, TCP through this
    direction of the engine is paced to `mbit` for `seconds` from the first TCP packet
    (that covers the first stream; iperf3's control connection opens the window).
    Both loops have one, so the fault slows the stream whether the appliance sends or
    receives it (the 001 page's slow run was the first stream *into* the XGS 136)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.first: float | None = None
        self.tokens = 0.0
        self.last = 0.0

    def pace(self, params: dict, n: int) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = self.last = now
            self.tokens = 0.0
        if now - self.first > float(params.get("seconds", 15)):
            return
        rate = max(0.01, float(params.get("mbit", 20))) * 125000.0
        self.tokens += (now - self.last) * rate
        self.last = now
        if self.tokens > 16384:
            self.tokens = 16384.0
        self.tokens -= n
        if self.tokens < 0:
            time.sleep(-self.tokens / rate)
