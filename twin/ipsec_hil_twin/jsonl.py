"""JSON lines over a unix stream socket: the control protocol of every twin component.

Why one module: engine.sock, ike.sock and supervisor.sock all speak "one JSON object
per line each way", and their clients (the IKE daemon, swanctl, the FreeBSD commands,
the supervisor's requesters, the lab builder, tests) each had their own connect/send/read loop with its own error
texts.  Here are both ends' framing, once: `encode`/`decode` a line, `JsonlClient`
(blocking) and `AsyncJsonlClient` (asyncio, reconnecting) for callers, `JsonlServer`
(threaded, one answer per request line) and `read_line`/`send` for a server that
answers one request per connection.  Every failure is a
`ControlSocketError` naming the socket.  Stdlib only: the FreeBSD commands import it.
"""
from __future__ import annotations

import errno as _errno
import json
import os
import socket
import socketserver
import sys
from pathlib import Path

from ipsec_hil_twin.errors import ControlSocketError

TYPE_CHECKING = False  # typing is not imported at run time: swanctl, run per command, imports this module
if TYPE_CHECKING:
    import asyncio
    from typing import Any, Callable, Iterator

MAX_LINE = 64 * 1024 * 1024
"""Longest line accepted (a list_sas of thousands of associations stays far below)."""


def encode(obj: dict[str, Any]) -> bytes:
    """One message as sent on the wire: compact JSON and a newline."""
    return (json.dumps(obj) + "\n").encode()


def decode(line: bytes, path: str) -> dict[str, Any]:
    """One received line -> its JSON object; anything else names the socket."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise ControlSocketError(path, f"malformed line {line[:80]!r}: {exc}") from None
    if not isinstance(obj, dict):
        raise ControlSocketError(path, f"expected a JSON object, found {line[:80]!r}")
    return obj


def read_line(sock: socket.socket, limit: int = 65536) -> bytes:
    """Read up to and including the first newline (or EOF / `limit` bytes).

    For servers that take one request per connection (supervisor.sock): a short
    recv loop instead of a file object, so the socket stays usable for the answer.
    """
    buf = b""
    while not buf.endswith(b"\n") and len(buf) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def send(sock: socket.socket, obj: dict[str, Any]) -> OSError | None:
    """A server's answer; the error when the client is already gone (the server logs it
    and goes on: a requester leaving is no reason to stop serving)."""
    try:
        sock.sendall(encode(obj))
    except OSError as exc:
        return exc
    return None


class _LineHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        answer = self.server.answer  # type: ignore[attr-defined]
        for line in self.rfile:
            if not line.strip():
                continue
            try:
                self.wfile.write(encode(answer(line)))
                self.wfile.flush()
            except OSError as exc:  # the client left; its thread ends here
                print(f"{self.server.server_address}: client gone: {exc!r}", file=sys.stderr)
                return


class JsonlServer(socketserver.ThreadingUnixStreamServer):
    """A unix-socket server: a thread per connection, every request line answered in turn.

    `answer` gets the raw line (bytes) so a server keeps its own wording for a request
    that is not JSON; it returns the answer object.  A stale socket file is replaced.
    """

    daemon_threads = True

    def __init__(self, path: str | Path, answer: Callable[[bytes], dict[str, Any]]) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self.answer = answer
        super().__init__(str(path), _LineHandler)


class JsonlClient:
    """A blocking connection to one control socket (several requests may share it)."""

    def __init__(self, path: str | Path, timeout: float | None = 10.0) -> None:
        self.path = str(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(self.path)
        except OSError as exc:
            self._sock.close()
            raise ControlSocketError(self.path, f"not reachable: {exc.strerror or exc}",
                                     exc.errno) from None
        self._file = self._sock.makefile("rwb")

    def send(self, obj: dict[str, Any]) -> None:
        try:
            self._file.write(encode(obj))
            self._file.flush()
        except OSError as exc:
            raise ControlSocketError(self.path, f"send failed: {exc.strerror or exc}", exc.errno) from None

    def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the server closed the connection."""
        try:
            line = self._file.readline(MAX_LINE)
        except OSError as exc:  # socket.timeout included
            raise ControlSocketError(self.path, f"no answer: {exc.strerror or exc!r}",
                                     exc.errno or _errno.ETIMEDOUT) from None
        return decode(line, self.path) if line else None

    def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its (first) answer; a closed socket is an error."""
        self.send(obj)
        reply = self.receive()
        if reply is None:
            raise ControlSocketError(self.path, f"closed the connection without answering {obj.get('op')!r}",
                                     _errno.ECONNRESET)
        return reply

    def stream(self, obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Send one request and yield every message until the server closes (swanctl's logs)."""
        self.send(obj)
        while (msg := self.receive()) is not None:
            yield msg

    def close(self) -> None:
        try:
            self._file.close()
        finally:
            self._sock.close()

    def __enter__(self) -> "JsonlClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request(path: str | Path, obj: dict[str, Any], timeout: float | None = 10.0) -> dict[str, Any]:
    """One round trip on a fresh connection: connect, send `obj`, return the answer."""
    with JsonlClient(path, timeout) as client:
        return client.request(obj)


class AsyncJsonlClient:
    """An asyncio connection to one control socket, one request at a time.

    Why reconnecting: the IKE daemon keeps its engine connection for its lifetime, and
    the engine may be restarted under it (an appliance reboot); a request that finds the
    connection dead is sent once more on a fresh one.
    """

    def __init__(self, path: str | Path, timeout: float = 5.0) -> None:
        import asyncio  # here: the FreeBSD commands import this module and never need it

        self.path = str(path)
        self.timeout = timeout
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        import asyncio

        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.path, limit=MAX_LINE), self.timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise ControlSocketError(self.path, f"not reachable: {exc!r}",
                                     getattr(exc, "errno", None)) from None
        return self._reader, self._writer

    async def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        import asyncio

        async with self._lock:
            for attempt in (1, 2):
                if self._reader is None or self._writer is None:
                    reader, writer = await self._connect()
                else:
                    reader, writer = self._reader, self._writer
                try:
                    writer.write(encode(obj))
                    await writer.drain()
                    line = await asyncio.wait_for(reader.readline(), self.timeout)
                    if not line:
                        raise ConnectionResetError("closed the connection")
                    break
                except (OSError, asyncio.TimeoutError) as exc:
                    self.close()
                    if attempt == 2:
                        raise ControlSocketError(self.path, f"no answer: {exc!r}",
                                                 getattr(exc, "errno", None)) from None
                except BaseException:
                    # cancelled (a daemon reset) after the request went out: its answer is
                    # still coming and the next request would read it as its own; a fresh
                    # connection leaves it unread (tests/twin_ike/test_cancelled_request.py)
                    self.close()
                    raise
        return decode(line, self.path)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
