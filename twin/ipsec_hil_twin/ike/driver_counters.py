"""Fault `counters_restart`: the driver forgets a deleted association's packets.

Why here and not in the engine: the fault models a driver that keeps its statistics per
association and reports the sum over the live ones, so its aggregate counters drop by
the old association's packets when a rekey deletes it -- the defect the suite's
rekey ledger (old + new associations against the driver's counters) must catch.  The
IKE daemon is the one that knows an association is the old half of a rekey, so it
applies the drop itself, on the engine's shared counter block (ipsec_hil_twin.engine.counters).

The block has one writer per slot (the tx loop, the rx loop); this second writer does
one read-modify-write per deleted association.  If a loop's increment lands between
the read and the write, the loop's store wins and the drop is lost: the write is
checked and repeated until the counter reads below the value it started from.
"""
from __future__ import annotations

import time
from pathlib import Path

from ipsec_hil_twin.engine.counters import CounterBlock
from ipsec_hil_twin.personality import for_driver

def packet_groups(driver: str, direction: str) -> list[tuple[str, ...]]:
    """The driver's counters that count every packet of one direction, in groups: each
    group counts a packet once, split over its counters (npuep: forwarded packets in
    tx_taken, own ones in tx_accel) -- from the driver's counting rules (ipsec_hil_twin.personality)."""
    c = for_driver(driver).counting
    if direction == "out":
        return [tuple(dict.fromkeys(pair)) for pair in zip(c.tx_forwarded, c.tx_own)]
    groups = [(c.rx_frame,)] if c.rx_frame else []
    return groups + [tuple(dict.fromkeys((c.rx_delivered_v4, c.rx_delivered_v6)))]


def _subtract(block: CounterBlock, name: str, n: int, tries: int = 5) -> int:
    """Lower one counter by up to n (never below 0); returns what was taken."""
    i = block.idx(name)
    for _ in range(tries):
        before = block.a[i]
        take = min(n, before)
        if not take:
            return 0
        block.a[i] = before - take
        time.sleep(0.001)
        if block.a[i] < before:
            return take
    return 0


def forget_packets(counters_file: Path, driver: str, direction: str, packets: int) -> dict[str, int]:
    """Drop `packets` from the driver's counters of one direction; returns {counter: taken}."""
    groups = packet_groups(driver, direction)
    taken: dict[str, int] = {}
    block = CounterBlock(counters_file)
    try:
        for group in groups:
            left = packets
            for name in group:
                got = _subtract(block, name, left)
                if got:
                    taken[name] = got
                left -= got
                if not left:
                    break
    finally:
        block.close()
    return taken
