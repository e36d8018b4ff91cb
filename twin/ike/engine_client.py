"""Asynchronous client of the ESP engine's control socket (DESIGN.md "Engine control API").

Why: the daemon installs and removes each child's two associations there and reads the
per-SA counters `--list-sas` prints.  The framing, the one-request-at-a-time lock and
the reconnect after an engine restart are twin.jsonl's; this adds the engine's ops and
reads `ok: false` as EngineError, as twin.engine.client does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from twin.engine.client import checked
from twin.errors import ControlSocketError, EngineError
from twin.jsonl import AsyncJsonlClient

__all__ = ["EngineClient", "EngineError"]


class EngineClient:
    def __init__(self, sock_path: str | Path, timeout: float = 5.0) -> None:
        self._conn = AsyncJsonlClient(sock_path, timeout)

    async def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = await self._conn.request(obj)
        except ControlSocketError as exc:
            raise EngineError(f"engine {obj.get('op')}: {exc}") from None
        return checked(obj.get("op"), reply)

    def close(self) -> None:
        self._conn.close()

    async def add_sa(self, sa: dict[str, Any]) -> dict[str, Any]:
        return await self.request({"op": "add_sa", "sa": sa})

    async def del_sa(self, spi: int, dst: str) -> dict[str, Any]:
        return await self.request({"op": "del_sa", "spi": spi, "dst": dst})

    async def flush(self) -> dict[str, Any]:
        return await self.request({"op": "flush"})

    async def list_sas(self) -> list[dict[str, Any]]:
        return (await self.request({"op": "list_sas"})).get("sas", [])
