"""Shared helpers for the command parsers.

Every parser turns one command's output into a frozen dataclass and raises
`ParseError` on anything it does not understand, naming the command, the 1-based
line number and quoting the line, so that a format drift on an appliance shows up
as a clear error instead of a silent zero.
"""
from __future__ import annotations

import json
import re
from typing import Iterator, NoReturn

from ipsec_hil.lab.errors import ParseError


__all__ = ["ParseError", "fail", "numbered_lines", "to_int", "load_json", "json_line_of"]


def fail(command: str, line_no: int, line: str, why: str) -> NoReturn:
    """Raise the ParseError for COMMAND at LINE_NO quoting LINE."""
    raise ParseError(command, line_no, line, why)


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield (1-based number, line without its newline) for every line of TEXT."""
    for no, line in enumerate(text.splitlines(), start=1):
        yield no, line


_DECIMAL = re.compile(r"[0-9]+")


def to_int(command: str, line_no: int, line: str, token: str, what: str) -> int:
    """Strict non-negative decimal (no signs, no separators) or ParseError naming WHAT."""
    if not _DECIMAL.fullmatch(token):
        fail(command, line_no, line, f"{what}: expected a decimal number, found {token!r}")
    return int(token)


def json_line_of(text: str, needle: str) -> tuple[int, str]:
    """Best-effort (line number, line) where NEEDLE first appears, for JSON error messages."""
    for no, line in numbered_lines(text):
        if needle in line:
            return no, line.strip()
    return 0, needle


def load_json(command: str, text: str) -> object:
    """json.loads with the decode error turned into a ParseError with its line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.splitlines() or [""]
        line = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else ""
        fail(command, exc.lineno, line[:200], f"invalid JSON: {exc.msg}")
    except RecursionError:
        fail(command, 0, text[:80], "invalid JSON: nested too deeply")
