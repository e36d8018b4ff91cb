"""Exception hierarchy shared by every part of the library.

Why one module: callers (fixtures, the report) catch by category -- a transport
problem is not a parse problem is not a failed invariant -- so the categories must
be defined once, below everything else, with no imports of their own.

Created by H2 (transport) because it was missing; owned and extended by H1.
"""

from __future__ import annotations


class LabError(Exception):
    """Base of every error the library raises on purpose."""


class TransportError(LabError):
    """Talking to a host failed (connect, auth, channel, SFTP)."""


class HostKeyError(TransportError):
    """The host's key is unknown or differs from the pinned known_hosts entry."""


class CommandTimeout(TransportError):
    """A remote command did not finish within its timeout."""


class ParseError(LabError):
    """Command output did not match the format its parser knows."""


class TopologyError(LabError):
    """The topology file is invalid (message starts FILE:LINE: field.path: ...)."""


class ProvisionError(LabError):
    """Configuring an appliance (files, tunnels, modules) failed."""


class InvariantError(AssertionError):
    """A measured invariant does not hold (an AssertionError so pytest reports it as a failure)."""
