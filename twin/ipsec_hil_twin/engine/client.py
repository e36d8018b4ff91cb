"""The client of DIR/engine.sock for tests, the benchmark and the FreeBSD commands.

Why a class over ipsec_hil_twin.jsonl: callers want the engine's own reading of an answer --
`ok: false` is an error carrying the engine's message -- and one exception class
(`EngineError`) whether the engine refused or could not be reached.
"""
from __future__ import annotations

from pathlib import Path

from ipsec_hil_twin.errors import ControlSocketError, EngineError
from ipsec_hil_twin.jsonl import JsonlClient

TYPE_CHECKING = False  # typing is not imported at run time: every emulated command pays for its imports
if TYPE_CHECKING:
    from typing import Any

__all__ = ["EngineClient", "EngineError", "engine_request"]


def checked(op: str | None, reply: dict[str, Any]) -> dict[str, Any]:
    """The reply itself when ok, else EngineError with the engine's reason."""
    if not reply.get("ok"):
        raise EngineError(f"engine {op}: {reply.get('error', reply)}")
    return reply


class EngineClient:
    """One connection to an engine; `call` sends one op and reads its answer."""

    def __init__(self, sock_path: str | Path, timeout: float = 10.0) -> None:
        try:
            self._conn = JsonlClient(sock_path, timeout)
        except ControlSocketError as exc:
            raise EngineError(f"engine at {exc}") from None

    def call(self, op: str, check: bool = True, **kw: Any) -> dict:
        try:
            reply = self._conn.request({"op": op, **kw})
        except ControlSocketError as exc:
            raise EngineError(f"engine {op}: {exc}") from None
        return checked(op, reply) if check else reply

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "EngineClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def engine_request(sock_path: str | Path, request: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """One round trip with a request dict (`{"op": ..., ...}`) on a fresh connection."""
    fields = {k: v for k, v in request.items() if k != "op"}
    with EngineClient(sock_path, timeout) as client:
        return client.call(request["op"], **fields)
