"""Exception hierarchy of the lab library.

Why one hierarchy: the pytest layer turns every ``LabError`` into a clear failure or
skip instead of a traceback, and callers can catch the narrow kind they can handle
(a ``TransportError`` may be retried, a ``TopologyError`` never). Messages must never
contain secrets (pre-shared keys, ESP keys).
"""

from __future__ import annotations


class LabError(Exception):
    """Base of every error the lab library raises on purpose."""


class TopologyError(LabError):
    """A topology file is invalid.

    The message starts ``FILE:LINE: field.path: expected ..., found ...`` (one line per
    problem when there are several), so an editor can jump to the line.
    """


class ProfileError(LabError):
    """A hardware profile or its overrides name something that does not exist."""


class TransportError(LabError):
    """A host could not be reached or a command did not complete (timeout, lost link)."""


class HostKeyError(TransportError):
    """A host presented a key that is not in the lab's known_hosts (never auto-added)."""


class CommandTimeout(TransportError):
    """A remote command did not finish within its timeout."""


class ParseError(LabError):
    """A command's output did not have the shape its parser knows.

    Carries the command, the 1-based line number, the offending line and why, so a
    golden test can pin the message and an operator can see the unexpected text.
    """

    def __init__(self, command: str, line_no: int, line: str, why: str) -> None:
        self.command = command
        self.line_no = line_no
        self.line = line
        self.why = why
        super().__init__(f"{command}: line {line_no}: {why}: {line!r}")


class ProvisionError(LabError):
    """Changing an appliance (config write, load, bring-up, teardown) failed."""


class InvariantError(LabError, AssertionError):
    """A measured invariant did not hold; the message carries the whole ledger.

    Also an ``AssertionError`` so pytest reports it as a test failure, not an error.
    """


__all__ = [
    "LabError",
    "TopologyError",
    "ProfileError",
    "TransportError",
    "HostKeyError",
    "CommandTimeout",
    "ParseError",
    "ProvisionError",
    "InvariantError",
]
