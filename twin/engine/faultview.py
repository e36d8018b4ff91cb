"""Cheap views of faults.json and sysctl.json for the engine's hot loops.

Why: faults are switched on and off while traffic runs (twin.faults writes
DIR/faults.json = {name: params}); the loops must notice within ~100 ms without a
stat() per packet.  `refresh(now)` stats the files at most every `period` seconds and
re-reads only when the mtime (or size) changed.  A malformed file is reported once on
stderr and treated as "no change" so a half-written file never flips behaviour.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


class JsonWatch:
    """A JSON object file re-read when its mtime/size changes."""

    def __init__(self, path: Path, period: float = 0.1) -> None:
        self.path = Path(path)
        self.period = period
        self._sig: tuple[int, int] | None = None
        self._next = 0.0
        self.data: dict[str, Any] = {}
        self.version = 0
        self.refresh(0.0, force=True)

    def refresh(self, now: float, force: bool = False) -> bool:
        """Re-read if due and changed; True when the content changed."""
        if not force and now < self._next:
            return False
        self._next = now + self.period
        try:
            st = os.stat(self.path)
            sig = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            sig = None
        if sig == self._sig and not force:
            return False
        if sig is None:
            new: dict[str, Any] = {}
        else:
            try:
                new = json.loads(self.path.read_text(encoding="utf-8") or "{}")
                if not isinstance(new, dict):
                    raise ValueError("expected a JSON object")
            except (OSError, ValueError) as exc:
                print(f"engine: {self.path}: ignored ({exc})", file=sys.stderr)
                self._sig = sig
                return False
        self._sig = sig
        changed = new != self.data
        self.data = new
        if changed:
            self.version += 1
        return changed

    def get(self, name: str) -> Any:
        return self.data.get(name)


def fault_params(watch: JsonWatch, name: str) -> dict[str, Any] | None:
    """Params of an active fault (a fault whose value is false/None is off)."""
    v = watch.data.get(name)
    if v is None or v is False:
        return None
    return v if isinstance(v, dict) else {}


def dfbit(watch: JsonWatch) -> int:
    """net.inet.ipsec.dfbit from sysctl.json (flat or nested), default 0 as on FreeBSD."""
    d = watch.data
    v = d.get("net.inet.ipsec.dfbit")
    if v is None:
        v = d.get("net", {}).get("inet", {}).get("ipsec", {}).get("dfbit", 0) if isinstance(d.get("net"), dict) else 0
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0
