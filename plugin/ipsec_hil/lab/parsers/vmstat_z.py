"""`vmstat -z` (text, or `--libxo json`) -> UmaZones.

Source: usr.bin/vmstat/vmstat.c:domemstat_zone() of FreeBSD 14. The header is printed
with `{T:/%8s}{T:/%4s}` for FAIL and SLEEP, so it reads `... REQ     FAILSLEEP XDOMAIN`
with no space between FAIL and SLEEP, followed by an empty line; each row is
`{d:name/%-20s}` (the zone name plus ':', padded to 20, longer names run on) then
`size, limit,used,free,requests,fail,sleep,xdomain` separated by commas. Zone names may
contain spaces ("UMA Slabs 0", "64 Bucket"), so a row is read from its end: the last
':' before the numbers ends the name. Releases before 13 had no XDOMAIN column: accepted
(xdomain None) only when the header says so. Zone names may repeat (one zone per
keg/domain in some builds): rows are kept in order, `by_name` sums them.
JSON: `{"__version": "1", "memory-zone-statistics": {"zone": [{name, size, limit,
used, free, requests, fail, sleep, xdomain}]}}` (vmstat sets libxo version "1").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from . import _libxo
from ._base import fail, json_line_of
from ._lines import LineTable
from ipsec_hil.lab.command import Command

COMMAND = Command("vmstat", "-z", "--libxo", "json")
#: the text form, for a kernel without libxo's JSON (the health snapshot's fallback)
TEXT = Command("vmstat", "-z")
CONTAINER = "memory-zone-statistics"
_LINES = LineTable(COMMAND, {
    "header": r"ITEM\s+SIZE\s+LIMIT\s+USED\s+FREE\s+REQ\s+FAIL\s*SLEEP(?P<xdomain>\s+XDOMAIN)?",
    "row": r"(?P<name>.+):\s+(?P<numbers>[0-9]+,(?:\s*[0-9]+,){5,6}\s*[0-9]+)",
})
_NUMBERS = ("size", "limit", "used", "free", "requests", "fail", "sleep", "xdomain")


@dataclass(frozen=True)
class UmaZone:
    """One UMA zone: `used` items allocated now, `requests`/`fail`/`sleep` since boot."""

    name: str
    size: int  # bytes per item
    limit: int  # 0 = no limit
    used: int
    free: int  # cached in the zone, not in use
    requests: int
    fail: int
    sleep: int
    xdomain: Optional[int] = None  # cross-NUMA-domain frees (FreeBSD 13+)


@dataclass(frozen=True)
class UmaZones:
    zones: tuple[UmaZone, ...]
    libxo_version: Optional[str] = None  # JSON only: libxo's "__version" ("1" for vmstat)

    def by_name(self) -> dict[str, UmaZone]:
        """Zones keyed by name; repeated names summed field by field (size/limit of the first)."""
        out: dict[str, UmaZone] = {}
        for z in self.zones:
            old = out.get(z.name)
            out[z.name] = z if old is None else UmaZone(
                name=z.name, size=old.size, limit=old.limit, used=old.used + z.used, free=old.free + z.free,
                requests=old.requests + z.requests, fail=old.fail + z.fail, sleep=old.sleep + z.sleep,
                xdomain=None if old.xdomain is None or z.xdomain is None else old.xdomain + z.xdomain)
        return out

    def matching(self, prefixes: tuple[str, ...]) -> dict[str, UmaZone]:
        """by_name() restricted to names starting with one of PREFIXES (a driver's zones)."""
        return {n: z for n, z in self.by_name().items() if n.startswith(prefixes)}


def parse(text: str) -> UmaZones:
    """Parse the text or the libxo JSON form (JSON when the output starts with '{')."""
    return _libxo.text_or_json(COMMAND, text, "vmstat -z lists at least UMA's own zones", _parse_text, _parse_json)


def _parse_text(text: str) -> UmaZones:
    header, rows = _LINES.after_header(
        text, "expected the header 'ITEM SIZE LIMIT USED FREE REQ FAIL SLEEP [XDOMAIN]'", "no header line")
    width = 8 if header["xdomain"] is not None else 7
    zones: list[UmaZone] = []
    for no, line in rows:
        m = _LINES.match(line.rstrip(), "row")
        if m is None or not m["name"].strip():
            fail(COMMAND, no, line, "expected a row 'name: size, limit, used, free, req, fail, sleep[, xdomain]'")
        numbers = [int(n) for n in re.split(r",\s*", m["numbers"])]
        if len(numbers) != width:
            fail(COMMAND, no, line, f"{len(numbers)} numbers, the header announces {width}")
        zones.append(UmaZone(m["name"].strip(), *numbers))
    return UmaZones(tuple(zones))


def _parse_json(text: str) -> UmaZones:
    listed, version = _libxo.items(COMMAND, text, CONTAINER, "zone", "name", {"name", *_NUMBERS}, "zone")
    zones: list[UmaZone] = []
    for item in listed:
        # xdomain (FreeBSD 13+) is read only when printed: an older vmstat's JSON has no such key
        keys = _NUMBERS if "xdomain" in item else _NUMBERS[:-1]
        zones.append(UmaZone(item["name"], *_libxo.counts(COMMAND, text, item, keys, item["name"])))
    return UmaZones(tuple(zones), libxo_version=version)
