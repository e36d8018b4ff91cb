"""The twin's error classes: one base, one subclass per kind of failure a caller handles.

Why one module: the lab builder, the engine's clients, the IKE daemon, the SSH server
and the FreeBSD commands used to define their own `EngineError`s and RuntimeErrors, so
a caller could not catch "anything the twin raised on purpose" in one clause.  Every
class here derives from `TwinError`; each also keeps the stdlib base its callers have
always caught (RuntimeError, ValueError, OSError), so existing `except` clauses hold.
Stdlib only: the FreeBSD commands import it on every invocation.
"""
from __future__ import annotations


class TwinError(Exception):
    """Base of every error the twin raises on purpose (the message names the object)."""


class ControlSocketError(TwinError, ConnectionError):
    """A JSON-lines control socket could not be reached or answered nonsense.

    An OSError (ConnectionError) so code that treats "socket trouble" as OSError keeps
    working; `errno` is the connect/read errno when there was one (swanctl's exit status).
    """

    def __init__(self, path: str, why: str, errno: int | None = None) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.errno = errno  # type: ignore[assignment]


class EngineError(TwinError, RuntimeError):
    """The ESP engine (DIR/engine.sock) refused a request or could not be reached."""


class IkeError(TwinError):
    """Base of the IKE control plane's errors (ipsec_hil_twin.ike): configuration grammar, proposals,
    selectors and wire messages (each also a ValueError), and failed negotiations."""


class LabBuildError(TwinError, RuntimeError):
    """A lab could not be built, found or changed (the message names the file or host).

    ipsec_hil_twin.lifecycle.lab still defines its own class of this name this round; it is to become
    `from ipsec_hil_twin.errors import LabBuildError` (ipsec_hil_twin.lifecycle.supervisor raises ipsec_hil_twin.lifecycle.lab's meanwhile).
    """


class FaultError(TwinError, ValueError):
    """Unknown fault, unknown parameter or a value of the wrong type."""


class RuntimeLayoutError(TwinError, ValueError):
    """A name or path that does not fit the run-dir layout."""


class NetnsError(TwinError, RuntimeError):
    """A namespace/link operation failed; the message names the object."""


class SshdError(TwinError, RuntimeError):
    """Bad configuration of the SSH server (message names the file)."""
