"""`md5 [-q|-r] FILE...` (FreeBSD sbin/md5) -> Md5Result.

`MD5 (file) = <32 hex>`, `-r`: `<hex> file`, `-q`: `<hex>`; a missing file is
`md5: file: No such file or directory` on stderr with exit 1 (reported in `missing`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ._base import fail, numbered_lines
from ._lines import LineTable
from ipsec_hil.lab.command import Command

COMMAND = Command("md5")
_STDOUT = LineTable(COMMAND, {
    "bsd": r"MD5 \((?P<path>.*)\) = (?P<hex>[0-9a-f]{32})",
    "quiet": r"(?P<hex>[0-9a-f]{32})",  # -q and stdin: no name
    "reversed": r"(?P<hex>[0-9a-f]{32}) (?P<path>.+)",
})
_STDERR = LineTable(COMMAND, {
    "missing": r"md5: (?P<path>.+): No such file or directory",
    "other": r"md5: (?P<path>.+): (?P<why>.+)",
})


@dataclass(frozen=True)
class Md5Entry:
    path: Optional[str]  # None for `-q` / stdin
    digest: str  # 32 lowercase hex digits


@dataclass(frozen=True)
class Md5Result:
    entries: tuple[Md5Entry, ...]
    missing: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()  # other `md5: file: why` lines
    status: int = 0

    def digest(self, path: Optional[str] = None) -> str:
        """The digest of PATH (or the only one); KeyError when absent."""
        for e in self.entries:
            if path is None and len(self.entries) == 1 or e.path == path:
                return e.digest
        raise KeyError(path)


def parse(text: str, stderr: str = "", status: int = 0) -> Md5Result:
    entries: list[Md5Entry] = []
    for no, line in numbered_lines(text):
        kind, m = _STDOUT.read(no, line, "expected 'MD5 (file) = <hex>', '<hex> file' or '<hex>'")
        entries.append(Md5Entry(None if kind == "quiet" else m["path"], m["hex"]))
    missing: list[str] = []
    errors: list[str] = []
    for no, line in numbered_lines(stderr):
        kind, m = _STDERR.classify(line)
        if kind == "missing":
            missing.append(m["path"])
        elif kind == "other":
            errors.append(line)
        elif line.strip():
            fail(COMMAND, no, line, "stderr: unexpected line")
    if not entries and not missing and not errors:
        fail(COMMAND, 0, text, "no digest and no error")
    if bool(missing or errors) != (status != 0):
        fail(COMMAND, 0, f"status={status}", "exit status contradicts the output")
    return Md5Result(entries=tuple(entries), missing=tuple(missing), errors=tuple(errors), status=status)
