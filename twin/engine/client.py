"""A minimal client for DIR/engine.sock (tests, benchmark; twin.ike may use it too)."""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any


class EngineError(RuntimeError):
    """The engine answered ok:false (message names the field)."""


class EngineClient:
    def __init__(self, sock_path: str | Path, timeout: float = 10.0) -> None:
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(str(sock_path))
        self.f = self.s.makefile("rwb")

    def call(self, op: str, check: bool = True, **kw: Any) -> dict:
        self.f.write((json.dumps({"op": op, **kw}) + "\n").encode())
        self.f.flush()
        line = self.f.readline()
        if not line:
            raise EngineError(f"{op}: engine closed the connection")
        resp = json.loads(line)
        if check and not resp.get("ok"):
            raise EngineError(f"{op}: {resp.get('error')}")
        return resp

    def close(self) -> None:
        try:
            self.f.close()
        finally:
            self.s.close()

    def __enter__(self) -> "EngineClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
