"""`sysctl` output (sbin/sysctl, FreeBSD 14) -> SysctlValues, and its stderr -> unknown OIDs.

Modes: "name" (`a.b: value`), "e" (`sysctl -e`, `a.b=value`), "n" (`sysctl -n`, values
only, one line per requested name, in order: the caller must pass `names`).
Values: decimal -> int (64-bit counters print in full), several space-separated
decimals (multi-element OIDs) -> tuple of ints, anything else -> str (kept verbatim).
A requested name that printed nothing is an error: FreeBSD prints nothing for opaque
leaves, and a missing counter must never read as 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Optional, Union

from ._base import fail, numbered_lines
from ._lines import content_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("sysctl")  # sysctl.COMMAND(*names), sysctl.COMMAND("-n", name)
Value = Union[int, str, tuple[int, ...]]
_NAME = re.compile(r"[A-Za-z0-9_%][A-Za-z0-9_.%+-]*")
_INT = re.compile(r"-?[0-9]+")
_UNKNOWN = re.compile(r"sysctl: unknown oid '([^']*)'(?: at line [0-9]+)?")


@dataclass(frozen=True)
class SysctlValues(Mapping[str, Value]):
    """Read-only mapping name -> value, in output order."""

    values: dict[str, Value]

    def __getitem__(self, name: str) -> Value:
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __hash__(self) -> int:  # frozen dataclass with a dict field
        return hash(tuple(self.values.items()))

    def get_int(self, name: str) -> int:
        """The value of NAME, which must be a single integer (KeyError/TypeError otherwise)."""
        value = self.values[name]
        if not isinstance(value, int):
            raise TypeError(f"sysctl {name} is {value!r}, not an integer")
        return value


def convert(raw: str) -> Value:
    """Decimal -> int, several decimals -> tuple, anything else verbatim."""
    tokens = raw.split(" ")
    if len(tokens) == 1 and _INT.fullmatch(tokens[0]):
        return int(tokens[0])
    if len(tokens) > 1 and all(_INT.fullmatch(t) for t in tokens):
        return tuple(int(t) for t in tokens)
    return raw


def parse(text: str, mode: str = "name", names: Optional[Iterable[str]] = None) -> SysctlValues:
    """Parse stdout of `sysctl [-e|-n] NAMES`. names is required for mode "n"."""
    wanted = list(names) if names is not None else None
    if mode not in ("name", "n", "e"):
        raise ValueError(f"sysctl parse mode must be 'name', 'n' or 'e', not {mode!r}")
    lines = list(numbered_lines(text))
    values: dict[str, Value] = {}
    if mode == "n":
        if wanted is None:
            raise ValueError("sysctl -n output carries no names: pass names=[...] in order")
        if len(lines) != len(wanted):
            no, line = lines[-1] if lines else (0, "")
            fail(COMMAND, no, line, f"expected {len(wanted)} value line(s) for {wanted}, found {len(lines)}")
        for (no, line), name in zip(lines, wanted):
            values[name] = convert(line)
        return SysctlValues(values)
    sep = ": " if mode == "name" else "="
    for no, line in lines:
        name, found, raw = line.partition(sep)
        if not found or not _NAME.fullmatch(name):
            fail(COMMAND, no, line, f"expected 'name{sep}value'")
        if name in values:
            fail(COMMAND, no, line, f"{name} printed twice")
        values[name] = convert(raw)
    for name in wanted or ():
        if name not in values and not any(k.startswith(name + ".") for k in values):
            fail(COMMAND, 0, text[-200:], f"requested {name} not in the output")
    return SysctlValues(values)


def parse_errors(stderr: str) -> list[str]:
    """Unknown OIDs named by `sysctl: unknown oid 'x'` lines; any other line is an error."""
    unknown: list[str] = []
    for no, line in content_lines(stderr):
        m = _UNKNOWN.fullmatch(line.strip())
        if not m:
            fail(COMMAND, no, line, "unexpected stderr line (only 'unknown oid' is understood)")
        unknown.append(m.group(1))
    return unknown


_SET = re.compile(r"([A-Za-z0-9_.%+-]+): (.*) -> (.*)")


def parse_set(text: str) -> dict[str, tuple[Value, Value]]:
    """`sysctl name=value` stdout: `name: old -> new` per line -> {name: (old, new)}."""
    out: dict[str, tuple[Value, Value]] = {}
    for no, line in numbered_lines(text):
        m = _SET.fullmatch(line)
        if not m:
            fail(COMMAND, no, line, "expected 'name: old -> new'")
        out[m.group(1)] = (convert(m.group(2)), convert(m.group(3)))
    return out
