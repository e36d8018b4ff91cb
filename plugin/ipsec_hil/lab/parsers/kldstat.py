"""`kldstat [-v]` (FreeBSD sbin/kldstat) -> KldstatResult.

FreeBSD 14 right-aligns the hex size to width 8, older releases left-aligned it: rows are
matched by whitespace-separated fields, never by column. `-v` adds ` (path)` to each
row and `\tContains modules:` / `\t\t Id Name` / `\t\t<id> <name>` blocks. Output always
starts with the header (the kernel itself is file 1), so empty output is an error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ._lines import LineTable

COMMAND = "kldstat"
_LINES = LineTable(COMMAND, {
    "header": r"Id\s+Refs\s+Address\s+Size\s+Name",
    "contains": r"\tContains modules:",
    "mod_header": r"\t\t\s*Id Name",
    "mod": r"\t\t\s*(?P<id>[0-9]+) (?P<name>\S+)",
    "row": r"\s*(?P<id>[0-9]+)\s+(?P<refs>[0-9]+)\s+(?P<addr>0x[0-9a-f]+)\s+(?P<size>[0-9a-f]+)\s+"
           r"(?P<name>[^\s()]+)(?: \((?P<path>[^()]+)\))?\s*",
})


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
    _, lines = _LINES.after_header(text, "expected the header 'Id Refs Address Size Name'",
                                   "empty output (kldstat always lists at least the kernel)")
    files: list[dict] = []
    state = "rows"
    for no, line in lines:
        if _LINES.match(line, "contains"):
            if not files or files[-1]["modules"]:
                _LINES.fail(no, line, "'Contains modules' without a file row")
            state = "modheader"
        elif state == "modheader":
            _LINES.expect("mod_header", no, line, "expected '\\t\\t Id Name'")
            state = "mods"
        elif state == "mods" and (m := _LINES.match(line, "mod")):
            files[-1]["modules"].append((int(m["id"]), m["name"]))
        else:
            m = _LINES.expect("row", no, line, "expected a row 'id refs address size name'")
            if any(f["id"] == int(m["id"]) for f in files):
                _LINES.fail(no, line, f"file id {m['id']} listed twice")
            files.append(dict(id=int(m["id"]), refs=int(m["refs"]), address=m["addr"], size=int(m["size"], 16),
                              name=m["name"], path=m["path"], modules=[]))
            state = "rows"
    if state == "modheader":
        _LINES.fail(0, text.splitlines()[-1], "module list header missing")
    return KldstatResult(files=tuple(KldFile(**{**f, "modules": tuple(f["modules"])}) for f in files))
