"""What one appliance's IKE daemon knows, shared by its parts: the IKE_SAs, the loaded
configuration, the fault switches, the log and the tasks it runs.

Why a module of its own: the parts (transport, children, lifetimes, initiator, responder,
rekey, control) once reached all of this -- and each other -- through the Daemon object,
an eight-module import circle hidden behind type-only imports. Now each part gets this
state and, by name, the other parts it calls (ipsec_hil_twin.ike.daemon wires them); this
module imports none of them, so every part can be read, built and tested on its own.
"""
from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from ipsec_hil_twin.faults import HostFaults
from ipsec_hil_twin.machinery.runtime import HostDir, read_json

from .configs import LoadedConfig
from .model import IkeSA


class IkeState:
    """One daemon's shared state (no behaviour but logging, fault lookups and task keeping)."""

    def __init__(self, host_dir: str | Path, port: int = 500) -> None:
        self.hd = HostDir(host_dir)
        self.port = port
        self.host: dict[str, Any] = read_json(self.hd.host_json, default={})
        self.faults = HostFaults(self.hd, reader="ike", period=0.0)
        self.sas: dict[str, IkeSA] = {}          # by initiator SPI
        self.ike_uid = itertools.count(1)
        self.child_uid = itertools.count(1)
        self.tasks: set[asyncio.Task] = set()
        self.started = time.time()
        self.config = LoadedConfig(self.host)

    def log(self, line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)

    def never_up(self, child: str) -> bool:
        """Fault child_never_up: requests carrying this child are never sent nor answered."""
        f = self.faults.params("child_never_up")
        return f is not None and f.get("child") == child

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        """Run ``coro`` as a task the daemon's reset cancels (Daemon.flush)."""
        t = asyncio.ensure_future(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t
