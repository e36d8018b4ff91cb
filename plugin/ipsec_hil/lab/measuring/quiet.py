"""How far apart a settle's two equal reads must be: the counters' lag, or a load's tail.

Why two causes, not one constant (issue 15: "settles that wait longer than the counters
need"): :func:`ipsec_hil.lab.measuring.measure.settle_all` calls the counters settled when two reads
at least an interval apart are equal. What may still move them after a block of work
depends on the work:

- **a load** (an iperf3 stream, TCP or UDP): the engines' queues drain after the client
  exits (the virtual lab's receive buffer holds a whole TCP window) and TCP sends late
  segments (Linux's smallest retransmission timeout is 200 ms). Reads :data:`LOAD_TAIL_S`
  apart span one backed-off retransmission -- the rule every meter used before;
- **anything else** (pings waited out to their replies or their timeout, injected frames
  up to the END frame the receiver saw): every packet has crossed the engines before the
  action returned, so the only thing between a packet and its count is the counters' own
  lag -- the appliance's ``counter_lag_s`` (ipsec_hil.lab.expectations.hardware: 0.5 s unless a lab file
  states what its appliances do).

:func:`load_ended` is called by whatever runs a load (ipsec_hil.lab.traffic.bench.iperf_run, the
UDP trials of ipsec_hil.lab.traffic.udp_load); the first settle of each appliance after it keeps the
load's interval (:func:`settled` records the appliances a settle found quiet), however
late it starts -- a rule "within 0.5 s of the load's end" would let a settle that began
late (a slow server stop) pass with reads 0.1 s apart while the tail still runs. Per
process: an xdist worker drives its own appliances.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from ipsec_hil.lab.expectations.hardware import DEFAULT_COUNTER_LAG_S

LOAD_TAIL_S = 0.5
"""Seconds of equal reads after a load: queues drained, TCP's late segments (RTO >= 200 ms) seen."""

_lock = threading.Lock()
_last_load_end = float("-inf")
_quiet_since_load: set[str] = set()


def load_ended(at: float | None = None) -> None:
    """Note that a load (iperf3 TCP or UDP) ended now (``time.monotonic()``) or ``at``:
    every appliance's next settle waits the load's tail."""
    global _last_load_end
    t = time.monotonic() if at is None else at
    with _lock:
        _last_load_end = max(_last_load_end, t)
        _quiet_since_load.clear()


def last_load_end() -> float:
    """When the last load of this process ended (``-inf``: none yet)."""
    return _last_load_end


def reset() -> None:
    """Forget every load (a run's start: ipsec_hil.context.ProcessRecords.begin)."""
    global _last_load_end
    with _lock:
        _last_load_end = float("-inf")
        _quiet_since_load.clear()


def settled(apps: Iterable[Any]) -> None:
    """``apps`` were found settled (by :func:`ipsec_hil.lab.measuring.measure.settle_all`): their next
    settle needs only their counter lag, until the next load."""
    with _lock:
        _quiet_since_load.update(_name(a) for a in apps)


def counter_lag(apps: Iterable[Any]) -> float:
    """The largest ``profile.counter_lag_s`` of ``apps`` (the default for one without a profile)."""
    lags = [getattr(getattr(a, "profile", None), "counter_lag_s", DEFAULT_COUNTER_LAG_S) for a in apps]
    return max(lags, default=DEFAULT_COUNTER_LAG_S)


def settle_interval(apps: Iterable[Any]) -> float:
    """The spacing a settle of ``apps`` needs: their counter lag, and at least
    :data:`LOAD_TAIL_S` while one of them has not settled since the last load."""
    apps = list(apps)
    lag = counter_lag(apps)
    if _last_load_end > float("-inf") and not all(_name(a) in _quiet_since_load for a in apps):
        return max(lag, LOAD_TAIL_S)
    return lag


def _name(app: Any) -> str:
    return str(getattr(app, "name", id(app)))
