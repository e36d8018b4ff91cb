"""What the wire tests (issue 12) share: the injection point of the tunnel under test,
restored after each test (fresh associations), and counter deltas read after they settle."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from ipsec_hil.lab.inject import NoInjectionPoint, TunnelWire
from ipsec_hil.lab.measuring.measure import settle


@pytest.fixture
def wire(tunnel) -> Iterator[TunnelWire]:
    try:
        w = TunnelWire.of(tunnel)
    except NoInjectionPoint as exc:
        pytest.skip(str(exc))
    try:
        yield w
    finally:
        w.restore()


@contextmanager
def deltas(app) -> Iterator[dict[str, dict[str, int]]]:
    """`with deltas(app) as d:` -> d["driver"][name], d["esp"][key] moved inside the block."""
    out: dict[str, dict[str, int]] = {"driver": {}, "esp": {}}
    before = settle(app)
    yield out
    after = settle(app)
    out["driver"].update({k: v - before.counters.get(k, 0) for k, v in after.counters.items()
                          if v != before.counters.get(k, 0)})
    out["esp"].update({k: v - before.esp.get(k, 0) for k, v in after.esp.items() if v != before.esp.get(k, 0)})


def moved(d: dict[str, dict[str, int]], where: tuple[str, str]) -> int:
    return d[where[0]].get(where[1], 0)


def assert_drops_counted(record, app, d: dict[str, dict[str, int]], counters: dict[str, tuple[str, str]],
                         want: dict[str, int]) -> None:
    """Each reason's counter (ipsec_hil.lab.inject.reasons.drop_counter) moved exactly as many
    times as frames were dropped for it; reasons sharing one counter are summed."""
    merged: dict[tuple[str, str], list] = {}
    for r, n in want.items():
        entry = merged.setdefault(counters[r], [0, []])
        entry[0] += n
        entry[1].append(r)
    for where, (n, reasons) in merged.items():
        record.figure(f"{where[1]} moved (expected {n})", moved(d, where))
        assert moved(d, where) == n, (f"{app.name}: {where[1]} moved {moved(d, where)}, expected {n} "
                                      f"({', '.join(reasons)}); deltas {d}")
