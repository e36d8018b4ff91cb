"""Asynchronous client of the ESP engine's control socket (DESIGN.md "Engine control API").

Why: the daemon installs and removes each child's two associations there and reads the
per-SA counters `--list-sas` prints.  One JSON object per line each way; one request at a
time per connection (a lock), reconnecting when the engine was restarted.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any


class EngineError(RuntimeError):
    """The engine refused a request or cannot be reached."""


class EngineClient:
    def __init__(self, sock_path: str | Path, timeout: float = 5.0) -> None:
        self.path = str(sock_path)
        self.timeout = timeout
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.path, limit=64 * 1024 * 1024), self.timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise EngineError(f"engine socket {self.path}: {exc}") from None

    async def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            for attempt in (1, 2):
                if self._writer is None:
                    await self._connect()
                assert self._reader is not None and self._writer is not None
                try:
                    self._writer.write((json.dumps(obj) + "\n").encode())
                    await self._writer.drain()
                    line = await asyncio.wait_for(self._reader.readline(), self.timeout)
                    if not line:
                        raise ConnectionResetError("engine closed the connection")
                    break
                except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                    self.close()
                    if attempt == 2:
                        raise EngineError(f"engine socket {self.path}: {exc!r}") from None
            reply = json.loads(line)
        if not reply.get("ok"):
            raise EngineError(f"engine refused {obj.get('op')}: {reply.get('error', reply)}")
        return reply

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:
                pass
        self._reader = self._writer = None

    async def add_sa(self, sa: dict[str, Any]) -> dict[str, Any]:
        return await self.request({"op": "add_sa", "sa": sa})

    async def del_sa(self, spi: int, dst: str) -> dict[str, Any]:
        return await self.request({"op": "del_sa", "spi": spi, "dst": dst})

    async def flush(self) -> dict[str, Any]:
        return await self.request({"op": "flush"})

    async def list_sas(self) -> list[dict[str, Any]]:
        return (await self.request({"op": "list_sas"})).get("sas", [])
