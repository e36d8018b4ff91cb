"""One call per host, all at once: a read of every end costs one end's round trip.

Why: a meter's settle reads both ends' counters, a health check both ends' health; read
one after the other, each pair cost the sum of two SSH round trips (issue 15). Each host
has its own connection (SshHost is safe to use from several threads), so the calls run
in one thread each and the caller waits for the slowest. The wait is charged as a shell
command (``ssh``, or the phase open around it) in the run's breakdown: the helper threads
are not the accounted one (ipsec_hil.lab.timeshare).

Library code: no pytest.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, Sequence, TypeVar

from ipsec_hil.lab.timeshare import SSH, spent

T = TypeVar("T")
R = TypeVar("R")


@spent(SSH, within_phase=True)
def each_at_once(call: Callable[[T], R], items: Sequence[T], *, name: str = "hil-each") -> list[R]:
    """``[call(item) for item in items]``, run concurrently, results in the order given.
    Every call runs to its end even when another failed (no host is left mid-command);
    then the first exception, in the order given, is raised."""
    items = list(items)
    if len(items) <= 1:
        return [call(i) for i in items]
    with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix=name) as pool:
        futures = [pool.submit(call, i) for i in items]
        wait(futures)
    return [f.result() for f in futures]
