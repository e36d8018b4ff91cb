"""The published SA table (ipsec_hil_twin.engine.satable): what the datapath loops read equals the
control process's table after any sequence of adds, replacements and deletes, and the
journal stays bounded by the live table (O(1) amortised per change, issue 15)."""
from __future__ import annotations

import json
import random

from ipsec_hil_twin.engine.control import EngineState
from ipsec_hil_twin.engine.counters import CounterBlock
from ipsec_hil_twin.engine.hostcfg import HostConfig, PortCfg
from ipsec_hil_twin.engine.satable import COMPACT_SLACK, JOURNAL, SaJournalReader, SaJournalWriter

HOST = HostConfig(name="gA", model="xgs3300", driver="octep", counters={},
                  ports=(PortCfg("wan", "eth0", ("192.0.2.1/24",), mtu=1500),))


def sa(i: int, direction: str, port: int | None = None) -> dict:
    return {"spi": 0x1000 + 2 * i + (direction == "in"), "direction": direction, "src": "192.0.2.1",
            "dst": "192.0.2.2", "cipher": "aes-gcm-16", "enc_key": f"{i:072x}",
            "local_ts": ["198.51.100.0/26[udp]"], "remote_ts": [f"203.0.113.0/24[udp/{port or 6000 + i}]"]}


def state(tmp_path) -> EngineState:
    return EngineState(tmp_path, HOST, CounterBlock(tmp_path / "engine.counters", create=True), None)


def call(st: EngineState, **req) -> dict:
    res = st.handle(json.dumps(req).encode())
    assert res["ok"], res
    return res


def table(reader: SaJournalReader) -> list[tuple[int, str, str]]:
    return [(e["spi"], e["dst"], e["enc_key"]) for e in reader.load()["sas"]]


def live(st: EngineState) -> list[tuple[int, str, str]]:
    return [(i.spec.spi, i.spec.dst, i.spec.enc_key) for i in st.sas.values()]


def test_readers_follow_adds_replacements_deletes_and_resets(tmp_path):
    st = state(tmp_path)
    early, late = SaJournalReader(tmp_path), SaJournalReader(tmp_path)
    rng = random.Random(15)
    installed: set[int] = set()
    for step in range(500):
        i = rng.randrange(300)
        if i in installed and rng.random() < 0.5:
            call(st, op="del_sa", spi=sa(i, "out")["spi"], dst="192.0.2.2")
            installed.discard(i)
        else:  # an add, or a replacement of the same (spi, dst) with new keys (it moves last)
            entry = sa(i, "out")
            entry["enc_key"] = f"{step:072x}"
            call(st, op="add_sa", sa=entry)
            installed.add(i)
        if step % 7 == 0:  # one reader keeps up, the other catches up rarely
            assert table(early) == live(st)
        if step == 300:
            call(st, op="flush")
            installed.clear()
    assert table(early) == live(st) and table(late) == live(st)
    lines = (tmp_path / JOURNAL).read_text().count("\n")
    assert lines <= 2 * len(st.sas) + COMPACT_SLACK  # dead lines are compacted away
    call(st, op="reset")
    assert table(early) == [] and table(late) == []


def test_256_children_publish_appends_one_line_per_change(tmp_path):
    st = state(tmp_path)
    reader = SaJournalReader(tmp_path)
    sizes = []
    for i in range(256):
        for d in ("in", "out"):
            call(st, op="add_sa", sa=sa(i, d))
        reader.load()
        sizes.append(reader.offset)
    assert len(reader.load()["sas"]) == 512 and table(reader) == live(st)
    # each child appends about one child's worth of bytes, whatever is already installed
    # (the old publish rewrote the whole table: the 256th child cost 256 times the first)
    grows = [b - a for a, b in zip(sizes, sizes[1:]) if b > a]
    assert max(grows) < 2 * min(grows), (min(grows), max(grows))
    assert call(st, op="status")["sa_count"] == 512


def test_torn_line_is_left_for_the_next_read(tmp_path):
    writer, reader = SaJournalWriter(tmp_path), SaJournalReader(tmp_path)
    writer.put(sa(1, "in"))
    writer.flush({(0x1003, "192.0.2.2"): sa(1, "in")})
    assert reader.load()["sas"] and writer.lines == 1
    with open(tmp_path / JOURNAL, "a") as fh:  # a write caught half-way
        fh.write('{"drop": [4099, ')
    assert [e["spi"] for e in reader.load()["sas"]] == [0x1003]
    with open(tmp_path / JOURNAL, "a") as fh:
        fh.write('"192.0.2.2"]}\n')
    assert reader.load()["sas"] == []


def test_each_rewrite_is_replayed_from_its_start(tmp_path):
    """A reader that missed rewrites (a compaction, a reset) replays the newest snapshot,
    even where the new file is as long as the one it had read (same offset)."""
    writer, reader = SaJournalWriter(tmp_path), SaJournalReader(tmp_path)
    first = {(e["spi"], e["dst"]): e for e in (sa(1, "in"), sa(2, "in"))}
    writer.rewrite(first)
    assert [e["spi"] for e in reader.load()["sas"]] == [0x1003, 0x1005]
    second = {(e["spi"], e["dst"]): e for e in (sa(3, "in"), sa(4, "in"))}  # same byte length
    writer.rewrite({})
    writer.rewrite(second)
    assert [e["spi"] for e in reader.load()["sas"]] == [0x1007, 0x1009]
