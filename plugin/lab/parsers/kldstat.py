"""`kldstat [-v]` (FreeBSD sbin/kldstat) -> KldstatResult.

FreeBSD 14 right-aligns the hex size to width 8, older releases left-aligned it: rows are
matched by whitespace-separated fields, never by column. `-v` adds ` (path)` to each
row and `\tContains modules:` / `\t\t Id Name` / `\t\t<id> <name>` blocks. Output always
starts with the header (the kernel itself is file 1), so empty output is an error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ._base import fail, numbered_lines

COMMAND = "kldstat"
_HEADER = re.compile(r"Id\s+Refs\s+Address\s+Size\s+Name")
_ROW = re.compile(
    r"\s*(?P<id>[0-9]+)\s+(?P<refs>[0-9]+)\s+(?P<addr>0x[0-9a-f]+)\s+(?P<size>[0-9a-f]+)\s+"
    r"(?P<name>[^\s()]+)(?: \((?P<path>[^()]+)\))?\s*"
)
_CONTAINS = re.compile(r"\tContains modules:")
_MOD_HEADER = re.compile(r"\t\t\s*Id Name")
_MOD = re.compile(r"\t\t\s*(?P<id>[0-9]+) (?P<name>\S+)")


@dataclass(frozen=True)
class KldFile:
    id: int
    refs: int
    address: str
    size: int  # bytes (printed in hex)
    name: str  # e.g. "ipsec.ko"
    path: Optional[str] = None  # with -v
    modules: tuple[tuple[int, str], ...] = ()  # with -v


@dataclass(frozen=True)
class KldstatResult:
    files: tuple[KldFile, ...]

    def find(self, name: str) -> Optional[KldFile]:
        """The file called NAME, with or without the `.ko` suffix."""
        for f in self.files:
            if f.name in (name, f"{name}.ko") or f.name.removesuffix(".ko") == name:
                return f
        return None


def parse(text: str) -> KldstatResult:
    files: list[dict] = []
    seen_header = False
    state = "rows"
    for no, line in numbered_lines(text):
        if not line.strip():
            continue
        if not seen_header:
            if not _HEADER.fullmatch(line.strip()):
                fail(COMMAND, no, line, "expected the header 'Id Refs Address Size Name'")
            seen_header = True
            continue
        if _CONTAINS.fullmatch(line):
            if not files or files[-1]["modules"]:
                fail(COMMAND, no, line, "'Contains modules' without a file row")
            state = "modheader"
            continue
        if state == "modheader":
            if not _MOD_HEADER.fullmatch(line):
                fail(COMMAND, no, line, "expected '\\t\\t Id Name'")
            state = "mods"
            continue
        if state == "mods" and (m := _MOD.fullmatch(line)):
            files[-1]["modules"].append((int(m["id"]), m["name"]))
            continue
        m = _ROW.fullmatch(line)
        if not m:
            fail(COMMAND, no, line, "expected a row 'id refs address size name'")
        if any(f["id"] == int(m["id"]) for f in files):
            fail(COMMAND, no, line, f"file id {m['id']} listed twice")
        files.append(dict(id=int(m["id"]), refs=int(m["refs"]), address=m["addr"], size=int(m["size"], 16),
                          name=m["name"], path=m["path"], modules=[]))
        state = "rows"
    if not seen_header:
        fail(COMMAND, 0, text, "empty output (kldstat always lists at least the kernel)")
    if state == "modheader":
        fail(COMMAND, 0, text.splitlines()[-1], "module list header missing")
    return KldstatResult(files=tuple(KldFile(**{**f, "modules": tuple(f["modules"])}) for f in files))
