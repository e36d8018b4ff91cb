"""Asynchronous client of the ESP engine's control socket (DESIGN.md "Engine control API").

Why: the daemon installs and removes each child's two associations there and reads the
per-SA counters `--list-sas` prints.  The framing, the one-request-at-a-time lock and
the reconnect after an engine restart are ipsec_hil_twin.jsonl's; this adds the engine's ops and
reads `ok: false` as EngineError, as ipsec_hil_twin.engine.client does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ipsec_hil_twin.engine.client import checked
from ipsec_hil_twin.errors import ControlSocketError, EngineError
from ipsec_hil_twin.jsonl import AsyncJsonlClient

__all__ = ["EngineClient", "EngineError"]


#: How long the daemon waits for one engine answer. The engine stands for the kernel's SAD,
#: whose calls do not time out: on a starved 2-core machine an answer took over 5 s (CI,
#: stop 19: a child's install failed and two `--list-sas` printed zero packets, in a row),
#: which made a slow machine look like a broken one. A dead engine is still seen at once
#: (the connection is refused); only a hung one waits this long.
ENGINE_TIMEOUT = 30.0


class EngineClient:
    def __init__(self, sock_path: str | Path, timeout: float = ENGINE_TIMEOUT) -> None:
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

    async def expire_sa(self, sas: list[tuple[int, str]]) -> dict[str, Any]:
        """The kernel's hard expiry of SAs [(spi, dst)] (an outbound one's policy stays until del_sa)."""
        return await self.request({"op": "expire_sa", "sas": [{"spi": s, "dst": d} for s, d in sas]})

    async def flush(self) -> dict[str, Any]:
        return await self.request({"op": "flush"})

    async def list_sas(self) -> list[dict[str, Any]]:
        return (await self.request({"op": "list_sas"})).get("sas", [])
