"""PendingCounts: the loops' per-packet counts, summed in a list and stored at a flush.

What must hold for the counters to stay exact: a flush stores every pending count once
(named counters and SA records), leaves nothing behind, writes the record's last use and
sequence number; a discard (the block was reset) stores nothing. That the loops' hot sets
cover every count they make is shown by the lab tests (sent equals received on both sides,
offloaded or not)."""

from dataclasses import dataclass

import pytest

from ipsec_hil_twin.engine.counters import INDEX, SA_BYTES, SA_FIELDS, SA_PACKETS, SA_SEQ, CounterBlock, PendingCounts


@dataclass
class _Sa:
    base: int
    seq: int | None

    def record_seq(self):
        return self.seq


@pytest.fixture
def block(tmp_path):
    c = CounterBlock(tmp_path / "engine.counters", create=True)
    yield c
    c.close()


def test_flush_stores_every_pending_count_once(block):
    hot = (INDEX["tx_encrypt"], INDEX["esp:sent-bytes"])
    pend = PendingCounts(block.a, hot + (-1,))  # -1: a counter the driver lacks, ignored
    assert pend.hot == tuple(sorted(hot))
    sa1, sa2 = _Sa(block.sa_slot(3), 17), _Sa(block.sa_slot(900), None)
    p = pend.p
    block.a[sa2.base + SA_SEQ] = 5  # an inbound SA without a window keeps its seq slot
    for sa, n in ((sa1, 100), (sa1, 200), (sa2, 50)):
        p[INDEX["tx_encrypt"]] += 1
        p[INDEX["esp:sent-bytes"]] += n
        if not p[sa.base + SA_PACKETS]:
            pend.records.append(sa)
        p[sa.base + SA_PACKETS] += 1
        p[sa.base + SA_BYTES] += n
    assert block["tx_encrypt"] == 0  # nothing stored before the flush
    pend.flush(wall=1234)
    assert (block["tx_encrypt"], block["esp:sent-bytes"]) == (3, 350)
    assert block.sa_record(3) == {"packets": 2, "bytes": 300, "last_use": 1234, "seq": 17}
    assert block.sa_record(900) == {"packets": 1, "bytes": 50, "last_use": 1234, "seq": 5}
    assert not any(p) and not pend.records
    pend.flush(wall=9999)  # a second flush adds nothing
    assert block["tx_encrypt"] == 3
    assert block.sa_record(3) == {"packets": 2, "bytes": 300, "last_use": 1234, "seq": 17}
    block.clear_sa(3)
    assert block.sa_record(3) == dict.fromkeys(SA_FIELDS, 0)
    assert block.sa_record(900)["packets"] == 1  # the neighbour's record untouched


def test_discard_stores_nothing(block):
    pend = PendingCounts(block.a, (INDEX["eng:rx_frames"],))
    i = pend.hot[0]
    sa = _Sa(block.sa_slot(0), 9)
    pend.p[i] += 4
    pend.records.append(sa)
    pend.p[sa.base + SA_PACKETS] += 4
    pend.discard()
    pend.flush(wall=1)
    assert block.a[i] == 0 and block.sa_record(0) == dict.fromkeys(SA_FIELDS, 0)
    assert not any(pend.p)
