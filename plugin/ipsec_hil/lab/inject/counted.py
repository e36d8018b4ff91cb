"""What the wire tests (issue 12) count: an appliance's counters moved by the frames a block
injected, and the check that each drop reason's counter moved once per dropped frame.

Why settled reads: an injected frame is counted as the engine handles it, and a read
taken while the last frames are in flight would show fewer drops than were sent
(ipsec_hil.lab.measuring.measure.settle reads until two reads agree). Which counter a
reason moves is the model's (ipsec_hil.lab.inject.reasons.drop_counter); reasons that share
one counter are summed before the comparison.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from ipsec_hil.lab.appliance import Appliance
from ipsec_hil.lab.measuring.measure import settle

__all__ = ["Deltas", "Where", "assert_drops_counted", "deltas", "moved"]

#: {"driver": {counter: moved}, "esp": {FreeBSD ESP statistic: moved}}: what moved only
Deltas = dict[str, dict[str, int]]
#: ("driver", counter) or ("esp", statistic): where a drop reason is counted
Where = tuple[str, str]


class Figures(Protocol):
    """Where readings go on the measurement page (the plugin's test record)."""

    def figure(self, label: str, value: Any, unit: str = "") -> Any: ...


@contextmanager
def deltas(app: Appliance) -> Iterator[Deltas]:
    """``with deltas(app) as d:`` -> d["driver"][name], d["esp"][key] moved inside the block
    (both ends read settled; counters that did not move are absent)."""
    out: Deltas = {"driver": {}, "esp": {}}
    before = settle(app)
    yield out
    after = settle(app)
    out["driver"].update({k: v - before.counters.get(k, 0) for k, v in after.counters.items()
                          if v != before.counters.get(k, 0)})
    out["esp"].update({k: v - before.esp.get(k, 0) for k, v in after.esp.items() if v != before.esp.get(k, 0)})


def moved(d: Deltas, where: Where) -> int:
    """How far the counter at ``where`` moved (0 when it did not)."""
    return d[where[0]].get(where[1], 0)


def assert_drops_counted(record: Figures, app: Appliance, d: Deltas, counters: Mapping[str, Where],
                         want: Mapping[str, int]) -> None:
    """Each reason's counter (ipsec_hil.lab.inject.reasons.drop_counter) moved exactly as many
    times as frames were dropped for it; reasons sharing one counter are summed. Each
    counter's movement goes on the page; AssertionError naming the appliance, the counter,
    the reasons and every delta otherwise."""
    merged: dict[Where, tuple[int, list[str]]] = {}
    for r, n in want.items():
        total, reasons = merged.get(counters[r], (0, []))
        merged[counters[r]] = (total + n, [*reasons, r])
    for where, (n, reasons) in merged.items():
        record.figure(f"{where[1]} moved (expected {n})", moved(d, where))
        assert moved(d, where) == n, (f"{app.name}: {where[1]} moved {moved(d, where)}, expected {n} "
                                      f"({', '.join(reasons)}); deltas {d}")
