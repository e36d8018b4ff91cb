"""`kldstat [-hv]` (FreeBSD sbin/kldstat) -> KldstatResult.

FreeBSD 14 right-aligns the hex size to width 8, older releases left-aligned it: rows are
matched by whitespace-separated fields, never by column. `-h` prints the size through
libutil's humanize_number (5-byte buffer, HN_AUTOSCALE, HN_DECIMAL | HN_NOSPACE: `5.8K`,
`364K`, `31M`, `812`): such a size is not exact, so a row keeps the text (size_human) and
the byte range it stands for (size_range), and size is None. One output never mixes the
two forms (the flag is global), and a header's `Size` column decides nothing: the rows do. `-v` adds ` (path)` to each
row and `\tContains modules:` / `\t\t Id Name` / `\t\t<id> <name>` blocks. Output always
starts with the header (the kernel itself is file 1), so empty output is an error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ._lines import LineTable
from ipsec_hil.lab.command import Command

COMMAND = Command("kldstat")
_LINES = LineTable(COMMAND, {
    "header": r"Id\s+Refs\s+Address\s+Size\s+Name",
    "contains": r"\tContains modules:",
    "mod_header": r"\t\t\s*Id Name",
    "mod": r"\t\t\s*(?P<id>[0-9]+) (?P<name>\S+)",
    "row": r"\s*(?P<id>[0-9]+)\s+(?P<refs>[0-9]+)\s+(?P<addr>0x[0-9a-f]+)\s+"
           r"(?P<size>[0-9a-f]+|[0-9]+(?:\.[0-9]+)?[KMGTPE])\s+"
           r"(?P<name>[^\s()]+)(?: \((?P<path>[^()]+)\))?\s*",
})


_PREFIX_POWER = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
# humanize_number's output in a 5-byte buffer: 1-3 digits, or one digit and one decimal, then
# a prefix; a number without prefix is below 1000 (larger ones are scaled)
_HUMAN = re.compile(r"[0-9]\.[0-9][KMGTPE]|[0-9]{1,3}[KMGTPE]|[0-9]{1,3}")


def human_size_range(text: str) -> tuple[int, int]:
    """The byte counts humanize_number(5, HN_AUTOSCALE, HN_DECIMAL | HN_NOSPACE) prints as
    TEXT, as (low, high) inclusive: rounding is half up at the shown digit (1024-based), so
    `5.8K` is 5939 +- 51 and `364K` is 372736 +- 512 (to within 1/1024 of the prefix's unit:
    humanize_number rounds the remainder of its last division, not the exact fraction).
    A plain number (no prefix) is exact."""
    prefix = text[-1] if text[-1] in _PREFIX_POWER else ""
    number = text[: -1] if prefix else text
    unit = 1024 ** _PREFIX_POWER[prefix]
    if not prefix:
        return int(number), int(number)
    step = unit // 10 if "." in number else unit
    centre = round(float(number) * unit)
    return max(0, centre - step // 2), centre + step // 2 - (0 if step % 2 else 1)


@dataclass(frozen=True)
class KldFile:
    id: int
    refs: int
    address: str
    size: Optional[int]  # bytes (printed in hex); None when printed humanized (-h)
    name: str  # e.g. "ipsec.ko"
    path: Optional[str] = None  # with -v
    modules: tuple[tuple[int, str], ...] = ()  # with -v
    size_human: Optional[str] = None  # with -h: the size as printed (`364K`)

    @property
    def size_range(self) -> tuple[int, int]:
        """(low, high) bytes this row's size stands for: exact (size, size) for hex."""
        if self.size is not None:
            return self.size, self.size
        return human_size_range(self.size_human or "0")


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
            files.append(dict(id=int(m["id"]), refs=int(m["refs"]), address=m["addr"], size=m["size"],
                              size_human=None, name=m["name"], path=m["path"], modules=[], _at=(no, line)))
            state = "rows"
    if state == "modheader":
        _LINES.fail(0, text.splitlines()[-1], "module list header missing")
    _sizes(files)
    return KldstatResult(files=tuple(KldFile(**{**f, "modules": tuple(f["modules"])}) for f in files))


def _sizes(files: list[dict]) -> None:
    """Read every row's size token in the output's one form: humanized when any token has a
    prefix letter (the kernel's row always has one under -h: it is megabytes), else hex."""
    human = any(f["size"][-1] in "KMGTPE" for f in files)
    for f in files:
        no, line = f.pop("_at")
        token = f["size"]
        if not human:
            f["size"] = int(token, 16)
        elif _HUMAN.fullmatch(token):
            f["size"], f["size_human"] = None, token
        else:
            _LINES.fail(no, line, f"size {token!r} is not what kldstat -h prints (at most 4 characters: "
                        "`812`, `5.8K`, `364K`, `31M`) while other rows are humanized")
