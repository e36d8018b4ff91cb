"""`vmstat -m` (text, or `--libxo json`) -> MallocTypes.

Source: usr.bin/vmstat/vmstat.c:domemstat_malloc(). Header `Type InUse MemUse
[HighUse] Requests  Size(s)`: the HighUse column (always "-") is in the releases the
code index holds; the brief for FreeBSD 14 names the header without it. Both are read,
chosen by the header. Rows: `{k:type/%13s}` right-aligned (names may contain spaces:
"CAM dev queue"), InUse, MemUse in KiB with a `K` unit, ["-"], Requests, then the
allocation sizes as a comma list (empty for a type with no size class recorded). Types
with no allocation ever are not printed.
JSON: `{"__version": "1", "malloc-statistics": {"memory": [{type, in-use, memory-use
(KiB, as printed), [high-use "-"], requests, size: [..]}]}}`. Whether FreeBSD 14's JSON
memory-use is still KiB is not verified here (a humanised vmstat would emit bytes): the
health checks compare `in_use`, whose unit is a count in every release.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import _libxo
from ._base import fail, json_line_of
from ._lines import LineTable
from ipsec_hil.lab.command import Command

COMMAND = Command("vmstat", "-m", "--libxo", "json")
#: the text form, for a kernel without libxo's JSON (the health snapshot's fallback)
TEXT = Command("vmstat", "-m")
CONTAINER = "malloc-statistics"
_COUNTS = ("in-use", "memory-use", "requests")  # MallocType's numbers, as the JSON names them
_LINES = LineTable(COMMAND, {
    "header": r"Type\s+InUse\s+MemUse(?P<high>\s+HighUse)?\s+Requests\s+Size\(s\)",
    "row": r"\s*(?P<type>\S.*?)\s+(?P<in_use>[0-9]+)\s+(?P<mem>[0-9]+)K(?P<high>\s+-)?\s+(?P<req>[0-9]+)"
           r"(?:\s+(?P<sizes>[0-9]+(?:,[0-9]+)*))?\s*",
})


@dataclass(frozen=True)
class MallocType:
    """One malloc(9) type: `in_use` allocations now, `memory_kib` rounded up, requests since boot."""

    type: str
    in_use: int
    memory_kib: int
    requests: int
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class MallocTypes:
    types: tuple[MallocType, ...]
    libxo_version: Optional[str] = None  # JSON only: libxo's "__version" ("1" for vmstat)

    def by_name(self) -> dict[str, MallocType]:
        return {t.type: t for t in self.types}

    def matching(self, prefixes: tuple[str, ...]) -> dict[str, MallocType]:
        """Types whose name starts with one of PREFIXES (a driver's malloc types)."""
        return {t.type: t for t in self.types if t.type.startswith(prefixes)}


def parse(text: str) -> MallocTypes:
    """Parse the text or the libxo JSON form (JSON when the output starts with '{')."""
    return _libxo.text_or_json(COMMAND, text, "vmstat -m always lists the kernel's malloc types",
                               _parse_text, _parse_json)


def _add(types: list[MallocType], entry: MallocType, no: int, line: str) -> None:
    if any(t.type == entry.type for t in types):
        fail(COMMAND, no, line, f"malloc type {entry.type!r} listed twice")
    types.append(entry)


def _parse_text(text: str) -> MallocTypes:
    header, rows = _LINES.after_header(text, "expected the header 'Type InUse MemUse [HighUse] Requests Size(s)'",
                                       "no header line")
    high = header["high"] is not None
    types: list[MallocType] = []
    for no, line in rows:
        m = _LINES.expect("row", no, line, "expected a row 'type inuse memuseK requests sizes'")
        if (m["high"] is not None) != high:
            fail(COMMAND, no, line, "HighUse column " + ("missing" if high else "not in the header"))
        sizes = tuple(int(s) for s in m["sizes"].split(",")) if m["sizes"] else ()
        _add(types, MallocType(m["type"], int(m["in_use"]), int(m["mem"]), int(m["req"]), sizes), no, line)
    return MallocTypes(tuple(types))


def _parse_json(text: str) -> MallocTypes:
    listed, version = _libxo.items(COMMAND, text, CONTAINER, "memory", "type",
                                   {"type", *_COUNTS, "high-use", "size"}, "type")
    types: list[MallocType] = []
    for item in listed:
        name = item["type"]
        if "high-use" in item and item["high-use"] != "-":
            fail(COMMAND, *json_line_of(text, '"high-use"'),
                 f"{name}: high-use is always \"-\", found {item['high-use']!r}")
        sizes = item.get("size", [])
        if not isinstance(sizes, list) or any(type(s) is not int or s <= 0 for s in sizes):
            fail(COMMAND, *json_line_of(text, f'"{name}"'), f"{name}: size: expected a list of positive integers")
        no, line = json_line_of(text, f'"{name}"')
        _add(types, MallocType(name, *_libxo.counts(COMMAND, text, item, _COUNTS, name), sizes=tuple(sizes)), no, line)
    return MallocTypes(tuple(types), libxo_version=version)
