"""The published SA table: an append-only journal the control process writes and each
datapath loop replays from where it stopped.

Why a journal: the control process used to rewrite every SA into engine.state.json for
each SA added or removed, so bringing up N children cost O(N^2) (issue 15: the per-child
initiate time grew from 0.16 s to 0.67 s between 32 and 256 children).  Now an add or a
delete appends one line; a reader reads only the lines after its offset.  When dead lines
outnumber live ones the writer rewrites the file as a fresh snapshot with a new epoch in its
first line (os.replace), which a reader notices and replays from the start -- O(1)
amortised per change.  (An epoch, not the inode: a freed inode number comes back.)
engine.state.json still holds the small, table-wide state (own addresses,
output-step destinations, driver), rewritten per publish.

File DIR/engine.sas.jsonl (mode 0600: entries carry keys), one JSON object a line:
first {"epoch": N} (N unique per rewrite), then {"put": ENTRY} adds or replaces the SA
ENTRY["spi"], ENTRY["dst"]; {"drop": [SPI, DST]}
removes it.  A batch of lines is written with one write() and the generation counter is
bumped after it, so a reader woken by the counter sees whole lines.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

JOURNAL = "engine.sas.jsonl"
STATE = "engine.state.json"
COMPACT_SLACK = 64
"""Dead lines tolerated before a rewrite, on top of one per live SA."""

SaKey = tuple[int, str]


def _key(entry: dict[str, Any]) -> SaKey:
    return int(entry["spi"]), str(entry["dst"])


class SaJournalWriter:
    """The control process's side: queue changes, then flush() them as one append."""

    def __init__(self, host_dir: Path) -> None:
        self.path = Path(host_dir) / JOURNAL
        self.pending: list[str] = []
        self.lines = 0
        self.epochs = itertools.count(time.time_ns())  # a restarted writer never repeats one
        self.rewrite({})

    def put(self, entry: dict[str, Any]) -> None:
        self.pending.append(json.dumps({"put": entry}))

    def drop(self, key: SaKey) -> None:
        self.pending.append(json.dumps({"drop": list(key)}))

    def flush(self, live: dict[SaKey, dict[str, Any]]) -> None:
        """Append the queued changes; rewrite as a snapshot of `live` once dead lines
        exceed the live count plus COMPACT_SLACK."""
        if self.lines + len(self.pending) > 2 * len(live) + COMPACT_SLACK:
            self.rewrite(live)
            return
        if not self.pending:
            return
        data = ("\n".join(self.pending) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self.lines += len(self.pending)
        self.pending.clear()

    def rewrite(self, live: dict[SaKey, dict[str, Any]]) -> None:
        """A fresh file holding exactly `live` (a reset, a flush, a compaction)."""
        tmp = self.path.with_name("." + JOURNAL + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps({"epoch": next(self.epochs)}) + "\n")
            fh.write("".join(json.dumps({"put": e}) + "\n" for e in live.values()))
        os.replace(tmp, self.path)
        self.lines = len(live)
        self.pending.clear()


class SaJournalReader:
    """A datapath loop's side: the current table, read incrementally."""

    def __init__(self, host_dir: Path) -> None:
        self.dir = Path(host_dir)
        self.path = self.dir / JOURNAL
        self.epoch: int | None = None
        self.offset = 0
        self.sas: dict[SaKey, dict[str, Any]] = {}

    def load(self) -> dict[str, Any]:
        """engine.state.json's table-wide state plus "sas": every live SA entry, in the
        order they were added (first added, first matched by the transmit loop)."""
        try:
            state = json.loads((self.dir / STATE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            state = {"own_addrs": []}
        self._replay()
        state["sas"] = list(self.sas.values())
        return state

    def _replay(self) -> None:
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            self.sas.clear()
            self.epoch, self.offset = None, 0
            return
        with fh:
            head = fh.readline()
            epoch = json.loads(head)["epoch"] if head.endswith(b"\n") else None
            if epoch != self.epoch:  # rewritten: replay the snapshot from its start
                self.sas.clear()
                self.epoch, self.offset = epoch, fh.tell()
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1  # whole lines only
        for line in data[:end].splitlines():
            self._apply(line)
        self.offset += end

    def _apply(self, line: bytes) -> None:
        try:
            rec = json.loads(line)
        except ValueError as exc:
            print(f"engine: {self.path}: bad journal line skipped: {exc}", file=sys.stderr)
            return
        if "put" in rec:
            entry = rec["put"]
            key = _key(entry)
            self.sas.pop(key, None)  # a replaced SA moves to the end, as a fresh add
            self.sas[key] = entry
        elif "drop" in rec:
            spi, dst = rec["drop"]
            self.sas.pop((int(spi), str(dst)), None)
