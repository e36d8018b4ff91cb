"""ipsec_hil.lab.remote.together: one call per host at once, results in order, the wait is ssh."""

from __future__ import annotations

import threading
import time

import pytest

from ipsec_hil.lab import timeshare
from ipsec_hil.lab.remote.together import each_at_once
from ipsec_hil.lab.timeshare import SETTLE, SSH, spent


def test_the_calls_overlap_and_the_results_keep_the_order():
    inside, most = [0], [0]
    lock = threading.Lock()

    def call(x: int) -> int:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.2 if x == 1 else 0.05)  # the first ends last
        with lock:
            inside[0] -= 1
        return 10 * x

    assert each_at_once(call, [1, 2, 3]) == [10, 20, 30]
    assert most[0] == 3


def test_one_item_runs_in_the_caller_and_none_is_empty():
    assert each_at_once(lambda _: threading.current_thread(), ["only"]) == [threading.current_thread()]
    assert each_at_once(lambda x: x, []) == []


def test_every_call_ends_then_the_first_failure_in_order_is_raised():
    ended = []

    def call(x: str) -> str:
        time.sleep(0.1 if x == "slow" else 0)
        ended.append(x)
        if x.startswith("bad"):
            raise ValueError(x)
        return x

    with pytest.raises(ValueError, match="^bad1$"):
        each_at_once(call, ["bad1", "slow", "bad2"])
    assert sorted(ended) == ["bad1", "bad2", "slow"]  # none cancelled, none still running


def test_the_wait_is_ssh_or_the_phase_around_it():
    timeshare.SHARE.restart(threading.current_thread())
    each_at_once(lambda s: time.sleep(s), [0.05, 0.05])
    with spent(SETTLE):
        each_at_once(lambda s: time.sleep(s), [0.05, 0.05])
    b = timeshare.SHARE.snapshot()
    assert 0.05 <= b.seconds[SSH] <= b.wall  # the wait is ssh, not "other" (the overlap: the first test)
    assert 0.05 <= b.seconds[SETTLE]
    timeshare.SHARE.restart()
