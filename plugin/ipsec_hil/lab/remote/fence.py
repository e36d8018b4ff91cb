"""The transport's fence and its recording: a host this run no longer holds gets no command.

Why at the transport: once another run holds an appliance (its lease was broken or taken
over, its labgrid place kicked), anything this run still sends there -- a test's next
step, a fixture's teardown, the driver restore at the end -- changes a machine someone
else is testing on. Skipping those calls one by one misses the one nobody thought of, so
every transport (:class:`~ipsec_hil.lab.remote.ssh.SshHost` with its SFTP half,
:class:`~ipsec_hil.lab.remote.local.LocalHost`) asks :func:`admit` before each command
or file operation, and a fenced host's every call raises :class:`HostFenced` naming the
host and why, without touching the wire. The fence is by host NAME and process-wide:
every Host object of that appliance in this process (the lab's, the driver plugin's own,
a preflight's) is refused alike. A fence is not lifted by the run (:func:`reset` is for
tests that fence many hosts in one process).

Why a recording: a run that must prove it sent nothing after a loss needs the list of
what it sent. With ``HIL_COMMAND_LOG=DIR`` in the environment, every call is appended to
``DIR/HOST.jsonl`` as it is admitted or refused (``{"t", "pid", "host", "op", "what",
"outcome": "sent"|"refused"}``; a fence is a line ``{"event": "fenced", "reason"}``).
``what`` is the first line of a script (at most 80 characters) and its sha256 prefix, or
a path: never a script's stdin or a file's content, which carry pre-shared keys.
:func:`read_log` reads one back.

Why a check before use once anything is lost (:func:`verify_before_use`): a break takes
the hosts one by one, and the run's recheck of its other leases can fall between two of
them (a CI run renewed the bench's lease early, the break took the bench a moment later,
and the stopping run would have gone on to the bench until its next renewal, 4 s on). From
the first loss on, every command to a host not fenced yet is preceded by a renewal of
that host's lease in the caller's thread; a lease found taken fences the host before the
command, which is then refused.

Library code: no pytest import.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ipsec_hil.lab.errors import TransportError

#: Where the recording goes when set: a directory, one JSON-lines file per host.
COMMAND_LOG_ENV = "HIL_COMMAND_LOG"

__all__ = ["HostFenced", "fence", "fenced", "verify_before_use", "unverified", "admit", "check", "guarded", "reset",
           "read_log", "COMMAND_LOG_ENV"]


class HostFenced(TransportError):
    """The host is fenced: this run no longer holds it, so no command is sent there."""


_lock = threading.Lock()
_fenced: dict[str, str] = {}  # host name -> why
_verify: Callable[[str], None] | None = None  # renew host's lease before use (after a loss)
_verifying = threading.local()  # the renewal's own command must not verify again


def fence(name: str, reason: str) -> None:
    """Refuse every later command to host ``name`` in this process (first reason kept)."""
    with _lock:
        if name in _fenced:
            return
        _fenced[name] = reason
    _append(name, {"event": "fenced", "reason": reason})


def fenced(name: str) -> str | None:
    """Why host ``name`` is fenced, or None while commands may go there."""
    return _fenced.get(name)


def reset() -> None:
    """Lift every fence and the check before use (for tests that fence many LocalHosts in
    one process)."""
    global _verify
    with _lock:
        _fenced.clear()
        _verify = None


def verify_before_use(renew: Callable[[str], None]) -> None:
    """From now on call ``renew(host)`` before each command to a host that is not fenced:
    it renews that host's lease and fences the host when the lease was taken (the caller,
    :class:`~ipsec_hil.lab.sharing.holds.Holds`, does both); its exceptions are its own
    business and never reach the command's caller."""
    global _verify
    with _lock:
        _verify = renew


@contextlib.contextmanager
def unverified() -> Iterator[None]:
    """Commands sent inside are not preceded by :func:`verify_before_use`'s renewal: the
    lease's own commands (a renewal IS that check; renewing first would do it twice)."""
    was = getattr(_verifying, "on", False)
    _verifying.on = True
    try:
        yield
    finally:
        _verifying.on = was


def _verified(host: str) -> None:
    renew = _verify
    if renew is None or getattr(_verifying, "on", False):
        return
    with unverified():
        try:
            renew(host)
        except Exception:  # noqa: BLE001 -- a loss shows as the fence below; anything else is the keeper's to retry
            pass


def _describe(op: str, arg: object) -> str:
    if op == "run" and isinstance(arg, str):
        first = next((ln.strip() for ln in arg.splitlines() if ln.strip()), "")
        return f"{first[:80]} [sha256 {hashlib.sha256(arg.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}]"
    return str(arg)[:200]


def _append(host: str, entry: dict[str, Any]) -> None:
    where = os.environ.get(COMMAND_LOG_ENV)
    if not where:
        return
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "host": host, **entry}, sort_keys=True) + "\n"
    path = Path(where) / f"{host.replace('/', '_')}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    # one write of one short line with O_APPEND: lines of several processes never interleave
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def admit(host: str, op: str, arg: object = "") -> None:
    """Called by a transport before ``op`` on ``host``: raises :class:`HostFenced` when the
    host is fenced (nothing is sent), records the call when a recording is on."""
    if host not in _fenced:
        _verified(host)
    why = _fenced.get(host)
    if why is not None:
        _append(host, {"op": op, "what": _describe(op, arg), "outcome": "refused"})
        raise HostFenced(f"{host}: no command sent ({op} refused): this run no longer holds {host}: {why}")
    _append(host, {"op": op, "what": _describe(op, arg), "outcome": "sent"})


def check(host: str, op: str) -> None:
    """:func:`admit` without recording a sent call: for a transport's inner choke point
    (opening a channel) behind the recorded public methods."""
    why = _fenced.get(host)
    if why is not None:
        admit(host, op)


F = TypeVar("F", bound=Callable[..., Any])


def guarded(op: str) -> Callable[[F], F]:
    """Decorator for a transport method ``(self, first_arg, ...)``: :func:`admit` first."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            admit(self.name, op, args[0] if args else "")
            return fn(self, *args, **kwargs)
        return wrapper  # type: ignore[return-value]
    return deco


def read_log(directory: str | os.PathLike[str], host: str) -> list[dict[str, Any]]:
    """The recorded lines of ``host`` (empty when it got none); a torn line is an error
    naming the file and line (a recording that cannot be read proves nothing)."""
    path = Path(directory) / f"{host.replace('/', '_')}.jsonl"
    if not path.exists():
        return []
    out = []
    for no, line in enumerate(path.read_text().splitlines(), 1):
        try:
            out.append(json.loads(line))
        except ValueError as exc:
            raise ValueError(f"{path}:{no}: not a JSON line of the command log: {exc}") from None
    return out
