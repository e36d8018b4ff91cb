"""`netstat -i` / `netstat -I IF` (`-d`, `-b`, `-W`; text, or `--libxo json`) -> IfTable.

FreeBSD 14's usr.bin/netstat/if.c intpr() prints one row for each of an interface's
addresses: the link-layer row (`<Link#N>`) carries every counter, an address row only its
packet counts (`-` for errors, drops and collisions). Only the link rows are kept: they
are what the interface counted. What the suite reads here are the doors of a ledger
(issue 52): Idrop, the input drops (if_data.ifi_iqdrops: a full receive ring), and with
`-d` Drop, the output drops (ifi_oqdrops: a full send queue).

Quirks handled: with `-d` libxo's JSON emits both drop columns under one key,
"dropped-packets", twice in one object -- the input drops first, the output drops second
(if.c's two show_stat calls); a JSON reader that keeps only the last value would read the
output drops as the input drops, so the object's pairs are read in order. A `-` column is
no key at all in JSON. A name cut to 5 characters (no `-W`) is kept as printed: ask with
`-W` for the full name. Without `-d` the output drops are None, never 0.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from ._base import fail, json_line_of, numbered_lines, to_int
from ipsec_hil.lab.command import Command

#: the interfaces' drops a snapshot reads (issue 52): -d for the output drops, -W for whole
#: names (without it a name is cut to 5 characters), JSON for the input and the output drops
#: in order (the module docstring says why the order matters)
COMMAND = Command("netstat", "-i", "-d", "-W", "--libxo", "json")

#: the JSON keys of a link row, in if.c's order; "dropped-packets" twice with -d
_COUNTS = ("received-packets", "received-errors", "dropped-packets", "received-bytes", "sent-packets",
           "send-errors", "sent-bytes", "collisions")
_KEYS = {"name", "flags", "mtu", "network", "address", *_COUNTS}


@dataclass(frozen=True)
class IfCounters:
    """What one interface counted (its link-layer row)."""

    name: str
    mtu: int
    ipackets: int
    ierrors: int
    idrops: int
    opackets: int
    oerrors: int
    collisions: int
    odrops: Optional[int]  # None: the output had no Drop column (no -d)
    ibytes: Optional[int] = None  # None: no -b
    obytes: Optional[int] = None


@dataclass(frozen=True)
class IfTable:
    interfaces: tuple[IfCounters, ...]

    def get(self, name: str) -> Optional[IfCounters]:
        return next((i for i in self.interfaces if i.name == name), None)


def parse(text: str) -> IfTable:
    """Text or libxo JSON; empty output is an error (netstat -i always prints its header)."""
    if not text.strip():
        fail(COMMAND, 0, text, "empty output (netstat -i always prints a header)")
    return _parse_json(text) if text.lstrip().startswith("{") else _parse_text(text)


def _parse_json(text: str) -> IfTable:
    try:
        doc = json.loads(text, object_pairs_hook=lambda pairs: pairs)
    except json.JSONDecodeError as exc:
        lines = text.splitlines() or [""]
        fail(COMMAND, exc.lineno, (lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else "")[:200],
             f"invalid JSON: {exc.msg}")
    top = dict(doc) if isinstance(doc, list) else None
    if top is None or set(top) - {"__version"} != {"statistics"}:
        fail(COMMAND, 1, text.strip().splitlines()[0][:200], 'expected one top-level "statistics" object')
    stats = dict(top["statistics"]) if isinstance(top["statistics"], list) else None
    if stats is None or set(stats) != {"interface"} or not isinstance(stats["interface"], list):
        fail(COMMAND, *json_line_of(text, "statistics"), 'expected {"statistics": {"interface": [...]}}')
    out = []
    for pairs in stats["interface"]:
        if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
            fail(COMMAND, *json_line_of(text, '"interface"'), f"interface: expected objects, found {pairs!r}")
        keys = [k for k, _v in pairs]
        unknown = sorted(set(keys) - _KEYS)
        if unknown:
            fail(COMMAND, *json_line_of(text, f'"{unknown[0]}"'), f"interface: unknown key {unknown[0]!r}")
        one = dict(pairs)
        name = one.get("name")
        if not isinstance(name, str) or not name:
            fail(COMMAND, *json_line_of(text, '"interface"'), f"interface: expected a name, found {name!r}")
        if not str(one.get("network", "")).startswith("<Link#"):
            continue  # an address row: packets only
        drops = [v for k, v in pairs if k == "dropped-packets"]
        where = f"interface {name!r}"
        for k, v in pairs:
            if k in _COUNTS or k == "mtu":
                if type(v) is not int or v < 0:
                    fail(COMMAND, *json_line_of(text, f'"{k}"'), f"{where}: {k}: expected a non-negative integer, found {v!r}")
        for k in ("received-packets", "received-errors", "sent-packets", "send-errors", "collisions"):
            if k not in one:
                fail(COMMAND, *json_line_of(text, f'"{name}"'), f"{where}: key {k!r} missing")
        if not 1 <= len(drops) <= 2:
            fail(COMMAND, *json_line_of(text, f'"{name}"'),
                 f"{where}: expected \"dropped-packets\" once (input) or twice (input, output with -d), found {len(drops)}")
        out.append(IfCounters(name=name, mtu=int(one.get("mtu", 0)), ipackets=one["received-packets"],
                              ierrors=one["received-errors"], idrops=drops[0], opackets=one["sent-packets"],
                              oerrors=one["send-errors"], collisions=one["collisions"],
                              odrops=drops[1] if len(drops) == 2 else None,
                              ibytes=one.get("received-bytes"), obytes=one.get("sent-bytes")))
    return IfTable(tuple(out))


def _parse_text(text: str) -> IfTable:
    lines = list(numbered_lines(text))
    no, head = lines[0]
    cols = head.split()
    if cols[:4] != ["Name", "Mtu", "Network", "Address"] or "Ipkts" not in cols:
        fail(COMMAND, no, head, "expected the header Name Mtu Network Address Ipkts ...")
    counts = cols[4:]  # Ipkts Ierrs Idrop [Ibytes] Opkts Oerrs [Obytes] Coll [Drop]
    known = {"Ipkts", "Ierrs", "Idrop", "Ibytes", "Opkts", "Oerrs", "Obytes", "Coll", "Drop"}
    if set(counts) - known or len(set(counts)) != len(counts):
        fail(COMMAND, no, head, f"unknown or repeated column in {' '.join(counts)}")
    out = []
    for no, line in lines[1:]:
        if not line.strip():
            continue
        f = line.split()
        # the address column is blank on a link row of an interface without one (enc0 shows
        # its name, but an if_data-only row may not): the counters are the last columns
        if len(f) < 3 + len(counts):
            fail(COMMAND, no, line, f"expected {len(counts)} counter columns after name, mtu and network")
        if not f[2].startswith("<Link#"):
            continue
        vals = dict(zip(counts, f[-len(counts):]))
        num = {k: to_int(COMMAND, no, line, v, k) for k, v in vals.items()}
        name = f[0].rstrip("*")
        out.append(IfCounters(name=name, mtu=to_int(COMMAND, no, line, f[1], "Mtu"), ipackets=num["Ipkts"],
                              ierrors=num["Ierrs"], idrops=num["Idrop"], opackets=num["Opkts"],
                              oerrors=num["Oerrs"], collisions=num["Coll"], odrops=num.get("Drop"),
                              ibytes=num.get("Ibytes"), obytes=num.get("Obytes")))
    return IfTable(tuple(out))
