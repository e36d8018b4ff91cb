"""The one way the line-oriented parsers read a command's output: a table of whole-line patterns.

Every such parser did the same by hand: keep a regex per kind of line the command prints,
walk the numbered lines, try the regexes one after the other with fullmatch, and raise the
ParseError naming the command, the 1-based line number and the line when none of them fit.
A parser now states only what is specific to its command -- the kinds of line, their
patterns in the order they are tried, and what each kind means -- in one `LineTable`, and
asks the table which kind a line is. A line never matches by prefix: a format drift (a new
field, a renamed word) is a clear error at that line, never a silently half-read value.
"""
from __future__ import annotations

import re
from typing import Iterator, Mapping, NoReturn, Optional

from ._base import fail, numbered_lines

__all__ = ["LineTable", "content_lines"]


def content_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based number, line) for every line of TEXT that is not blank.

    The numbers are those of TEXT, so an error still names the line as the command printed it.
    """
    return ((no, line) for no, line in numbered_lines(text) if line.strip())


class LineTable:
    """The kinds of line one command prints: {kind: pattern}, tried in the order given.

    The order is the precedence: where two patterns fit the same line (md5's `md5: FILE: No
    such file or directory` is also any `md5: FILE: WHY`), the one listed first wins.
    """

    def __init__(self, command: str, patterns: Mapping[str, str]) -> None:
        self.command = command
        self._patterns = {kind: re.compile(p) for kind, p in patterns.items()}

    def fail(self, no: int, line: str, why: str) -> NoReturn:
        """Raise the ParseError for this command at line NO quoting LINE."""
        fail(self.command, no, line, why)

    def classify(self, line: str, *kinds: str) -> tuple[Optional[str], Optional[re.Match[str]]]:
        """(kind, match) of the first of KINDS (every kind when none are named) LINE is, or (None, None)."""
        for kind in kinds or self._patterns:
            m = self._patterns[kind].fullmatch(line)
            if m is not None:
                return kind, m
        return None, None

    def match(self, line: str, *kinds: str) -> Optional[re.Match[str]]:
        """The match of the first of KINDS (every kind when none are named) LINE is, or None."""
        return self.classify(line, *kinds)[1]

    def read(self, no: int, line: str, why: str, *kinds: str) -> tuple[str, re.Match[str]]:
        """Like classify(), but a line of none of the kinds is the ParseError WHY at line NO."""
        kind, m = self.classify(line, *kinds)
        if kind is None or m is None:
            self.fail(no, line, why)
        return kind, m

    def expect(self, kind: str, no: int, line: str, why: str) -> re.Match[str]:
        """LINE's match as KIND, or the ParseError WHY at line NO."""
        return self.read(no, line, why, kind)[1]

    def says_none(self, text: str, sentence: str) -> bool:
        """Whether TEXT is only SENTENCE, the command's way of saying it has nothing to list.

        A command with such a sentence (setkey's `No SAD entries.`) always prints something,
        so empty TEXT is the ParseError here, never read as "nothing".
        """
        if not text.strip():
            self.fail(0, "", f"empty output ({self.command.split()[0]} prints {sentence!r} when there are none)")
        return text.strip() == sentence

    def after_header(self, text: str, why: str, empty: str) -> tuple[re.Match[str], list[tuple[int, str]]]:
        """A table printed under one header line: (the header's match, the non-blank lines after it).

        The first non-blank line must be the table's "header" kind, matched without the blanks
        around it (the columns are aligned, so how far the header is indented depends on the
        widest value); WHY is the error when it is something else, EMPTY when TEXT has no line
        at all. The header's match says which optional columns this release prints, so the
        rows can be held to them.
        """
        lines = list(content_lines(text))
        if not lines:
            self.fail(0, text[:80], empty)
        no, line = lines[0]
        header = self._patterns["header"].fullmatch(line.strip())
        if header is None:
            self.fail(no, line, why)  # quoted as printed, indentation and all
        return header, lines[1:]
