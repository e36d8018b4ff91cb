"""A ping stream of a known rate through a tunnel, running while the caller acts (issue 13).

Why pings: a rekey or an expiry test needs traffic whose every loss is one counted packet
at a known offered rate -- ping's schedule is that rate, and transmitted - received is the
loss -- so the loss reads as "blocked time" (lost packets over the offered rate, as FD.io
CSIT reports reconfiguration tests). The stream is the appliance's own echoes from its
inner address to the remote LAN address, so it takes the tunnel without the bench.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from ipsec_hil.lab.appliance import Appliance
from ipsec_hil.lab.timeshare import TRAFFIC, spent
from ipsec_hil.lab.parsers.ping import PingResult

__all__ = ["PingStream", "TrafficRecord", "ping_stream"]


class TrafficRecord(Protocol):
    """What a stream adds its seconds to (the plugin's test record): the traffic the test asked."""

    traffic_seconds: float


class Tunnel(Protocol):
    """What a stream needs of a tunnel (an :class:`ipsec_hil.lab.tunnel.ActiveTunnel`): its
    local appliance and each end's inner address. A protocol, not the class: traffic sits
    below the tunnel layer (the layers: tests/plugin/test_import_graph.py)."""

    local: Appliance

    def inner_address(self, end: str) -> str: ...


@dataclass
class PingStream:
    """A ping stream of a known rate from ``app``, running in a thread while the caller acts."""

    app: Appliance
    target: str
    source: str
    seconds: float
    interval: float
    result: PingResult | None = None
    error: BaseException | None = None
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def rate_pps(self) -> float:
        """The offered rate: ping's schedule (one echo per interval)."""
        return 1.0 / self.interval

    def _run(self) -> None:
        count = int(self.seconds / self.interval)
        try:  # the deadline leaves room for a loaded machine; transmitted is what was offered
            self.result = self.app.ping(self.target, count=count, interval=self.interval, source=self.source,
                                        timeout=count * self.interval * 2 + 5)
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller's thread, raised there
            self.error = exc

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"ping {self.target}", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the stream's end (its result or error stays for :meth:`finish`)."""
        if self._thread is not None:
            self._thread.join()

    def finish(self) -> PingResult:
        """The stream's result once it ended; its thread's exception raised here; a stream
        that sent nothing is an AssertionError naming the appliance."""
        assert self._thread is not None, "finish() before start()"
        self._thread.join()
        if self.error is not None:
            raise self.error
        assert self.result is not None and self.result.transmitted, \
            f"{self.app.name}: ping {self.target} sent nothing: {self.result.errors if self.result else None}"
        return self.result

    def lost(self) -> int:
        assert self.result is not None, "lost() before finish()"
        return self.result.transmitted - self.result.received

    def blocked_ms(self) -> float:
        """Lost packets over the offered rate (FD.io CSIT's blocked time), in ms."""
        return 1000.0 * self.lost() / self.rate_pps


@contextmanager
def ping_stream(tunnel: Tunnel, seconds: float, interval: float, record: TrafficRecord) -> Iterator[PingStream]:
    """The local appliance's own echoes to the remote LAN address, for the block's length.

    The stream is the test's traffic: its seconds are added to the record's traffic asked,
    and the block's time with the wait for the stream's end is "traffic" up to them
    (ipsec_hil.lab.timeshare; the wait was "other" before, 6.4 s of a 9 s stream)."""
    s = PingStream(tunnel.local, tunnel.inner_address("remote"), tunnel.inner_address("local"), seconds, interval)
    record.traffic_seconds += seconds
    s.start()
    with spent(TRAFFIC, cap=seconds):
        try:
            yield s
        finally:
            s.join()
