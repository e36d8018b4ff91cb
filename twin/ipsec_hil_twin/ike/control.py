"""DIR/ike.sock: the daemon's control socket, spoken by ipsec_hil_twin.ike.swanctl and the lab.

One JSON request per connection; one JSON answer, or for initiate/terminate/rekey a
stream of `{"log": line}` messages and a final `{"done": true, "ok": ...}` (swanctl
prints the lines as they come, as strongSwan's vici log callback does).  Ops: load,
list_sas, list_conns, reset, status, initiate, terminate, rekey.
"""
from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable, Protocol

from ipsec_hil_twin import jsonl

from .children import ChildSAs, TerminateSelector
from .initiator import Initiator
from .model import Failed
from .rekey import Rekeys
from .state import IkeState


class Controlled(Protocol):
    """The daemon as a control request drives it (ipsec_hil_twin.ike.daemon.Daemon): the parts
    the ops call, and the daemon-wide operations load and reset ask for."""

    state: IkeState
    children: ChildSAs
    initiator: Initiator
    rekeys: Rekeys

    def load_file(self, path: str) -> dict[str, Any]: ...

    async def flush(self) -> None: ...


MAX_REQUEST = 16 * 1024 * 1024


class ControlServer:
    """The socket's server: each op is answered by the daemon's parts (one daemon handed over,
    not its parts one by one beside it)."""

    def __init__(self, daemon: Controlled) -> None:
        self.daemon = daemon
        self.path = str(daemon.state.hd.ike_sock)

    async def start(self) -> asyncio.AbstractServer:
        self.daemon.state.hd.ike_sock.unlink(missing_ok=True)
        return await asyncio.start_unix_server(self.on_client, path=self.path, limit=MAX_REQUEST)

    async def on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def send(obj: dict) -> None:
            if not writer.is_closing():
                writer.write(jsonl.encode(obj))
        try:
            line = await reader.readline()
            if not line:
                return
            req = jsonl.decode(line, self.path)
            op = req.get("op")
            # fault old_sa_kept switched off since the last tick: its leftovers go before any
            # answer, so what swanctl lists next matches the engine (ipsec_hil_twin.ike.rekey)
            await self.daemon.rekeys.sweep_kept()
            if op in ("initiate", "terminate", "rekey"):
                await self._streamed(op, req, send)
            else:
                send(await self._answer(op, req))
            await writer.drain()
        except (ConnectionError, ValueError) as exc:  # ControlSocketError is a ConnectionError
            self.daemon.state.log(f"control client: {exc!r}")
        finally:
            writer.close()

    async def _answer(self, op: Any, req: dict) -> dict[str, Any]:
        s = self.daemon.state
        if op == "load":
            return {"ok": True, **self.daemon.load_file(req["file"])}
        if op == "list_sas":
            return {"ok": True, "sas": await self.daemon.children.list_sas(req.get("ike"), req.get("child"))}
        if op == "list_conns":
            return {"ok": True, "conns": s.config.list_conns()}
        if op == "reset":  # the supervisor's/tests' "as after a reboot": no SAs, no config
            await self.daemon.flush()
            s.config.clear()
            return {"ok": True}
        if op == "status":
            return {"ok": True, "pid": os.getpid(), "ike_sas": len(s.sas), "uptime": time.time() - s.started}
        return {"ok": False, "error": f"unknown op {op!r}"}

    async def _streamed(self, op: str, req: dict, send: Callable[[dict], None]) -> None:
        def log(line: str) -> None:
            send({"log": line})
        if op == "initiate":
            coro = self.daemon.initiator.initiate(req["child"], req.get("ike"), log)
        elif op == "terminate":
            sel = TerminateSelector.of(req)
            coro = self.daemon.children.terminate(sel, log)
            if sel.force:  # a forced terminate ends by itself once its timeout is spent
                req = {**req, "timeout": None}
        else:
            coro = self.daemon.rekeys.request(req.get("child"), req.get("ike"))  # queued, as vici's rekey
        task = self.daemon.state.spawn(coro)
        timeout = req.get("timeout")
        try:
            if timeout:
                await asyncio.wait_for(asyncio.shield(task), float(timeout))
            else:
                await task
            send({"done": True, "ok": True})
        except asyncio.TimeoutError:
            name = req.get("child") or req.get("ike")
            send({"done": True, "ok": False, "timeout": True,
                  "error": f"CHILD_SA '{name}' not established after {int(float(timeout) * 1000)}ms"})
        except Failed as exc:
            send({"done": True, "ok": False, "error": str(exc)})
