"""Waiting for the IKE daemons' asynchronous work (a queued rekey, an overlap, an expiry),
and the MiniLab with daemons the engine-backed tests share.

Why: `swanctl --rekey` answers before the rekey runs (as vici's rekey command) and a
rekeyed child's inbound association lingers for delete_rekeyed_delay, so a test waits
for the state it asserts instead of sleeping a guessed time.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest

from ipsec_hil_twin.engine.minilab import MiniLab

T = TypeVar("T")


def wait_until(probe: Callable[[], T], what: str, timeout: float = 15.0, every: float = 0.05) -> T:
    """The first truthy value of probe(); AssertionError naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: T = probe()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout}s (last: {last!r})")
        time.sleep(every)
        last = probe()
    return last


def set_ike_options(host_dir: Path, **options: float) -> None:
    """Merge DIR/host.json `ike` options (read by the daemon when it starts)."""
    path = Path(host_dir) / "host.json"
    host = json.loads(path.read_text())
    host.setdefault("ike", {}).update(options)
    path.write_text(json.dumps(host, indent=1))


REKEYED_DELAY = 0.3
"""host.json ike.delete_rekeyed_delay in the test labs: charon's 5 s would slow every test."""


@contextmanager
def minilab_with_daemons() -> Iterator[Any]:
    """The engine's MiniLab (hostA | gwA | gwB | hostB) with an IKE daemon on each gateway,
    rekeyed children lingering REKEYED_DELAY; skips where it cannot run, always closed."""
    why = MiniLab.unavailable(tools=("ip", "ping"))
    if why:
        pytest.skip(why)
    lab = MiniLab()
    lab.build()
    try:
        for gw in ("gA", "gB"):
            set_ike_options(lab.host_dir(gw), delete_rekeyed_delay=REKEYED_DELAY)
            lab.start_ike(gw)
        yield lab
    finally:
        lab.close()
