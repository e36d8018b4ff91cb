"""The daemon's loaded configuration: connections, secrets, and what follows from them.

Why its own module: `swanctl --load-all` replaces the whole set at once, and every
role asks it the same questions -- which connection/child a name means, which address
to use towards a peer, the reqid of a child, whether its associations are offloaded
(DIR/host.json `kernel_cipher`), which connection a responder picks for a peer.
"""
from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any

from .conf import Child, ConfSyntaxError, Config, Connection, SharedSecret, load
from .model import Failed, addr_match, id_match

AUTO_START = ("start", "trap", "trap|start", "start|trap")
"""start_action values that bring a child up on load (trap is emulated as start)."""


class LoadedConfig:
    def __init__(self, host: dict[str, Any]) -> None:
        self.host = host
        self.conns: list[Connection] = []
        self.secrets: list[SharedSecret] = []
        self.reqids = Reqids()

    # ------------------------------------------------------------ loading
    def load_file(self, path: str) -> dict[str, Any]:
        """Replace the loaded configuration (swanctl --load-all): returns what happened."""
        if not os.path.isfile(path):
            return {"missing": path, **self._unload_all(path)}
        try:
            cfg = load(path)
        except ConfSyntaxError as exc:
            return {"syntax_error": str(exc), **self._unload_all(path)}
        return self.apply(cfg)

    def _unload_all(self, path: str) -> dict[str, Any]:
        unloaded = len(self.conns)
        self.conns = []
        return {"file": path, "loaded": [], "errors": [], "unloaded": unloaded, "secrets": [], "found": 0}

    def apply(self, cfg: Config) -> dict[str, Any]:
        new_names = {c.name for c in cfg.connections} | {e.name for e in cfg.errors if e.kind != "secret"}
        unloaded = sum(1 for c in self.conns if c.name not in new_names)
        self.conns = list(cfg.connections)
        self.secrets = list(cfg.secrets)
        errors = [{"name": e.name, "why": e.why, "where": e.where, "kind": e.kind} for e in cfg.errors]
        warnings = list(cfg.warnings) + [f"{c.name}: {w}" for c in cfg.connections for w in c.warnings]
        return {"loaded": [c.name for c in cfg.connections], "errors": errors, "unloaded": unloaded,
                "secrets": [s.name for s in cfg.secrets],
                "found": len(cfg.connections) + sum(1 for e in cfg.errors if e.kind != "secret"),
                "warnings": warnings}

    def auto_start(self) -> list[tuple[str, str]]:
        """(child, connection) of every child whose start_action brings it up on load."""
        return [(ch.name, c.name) for c in self.conns for ch in c.children.values()
                if ch.start_action in AUTO_START]

    def clear(self) -> None:
        self.conns, self.secrets = [], []

    # ------------------------------------------------------------ lookups
    def find_child(self, child: str, ike: str | None) -> tuple[Connection, Child]:
        for c in self.conns:
            if ike and c.name != ike:
                continue
            if child in c.children:
                return c, c.children[child]
        raise Failed(f"CHILD_SA config '{child}' not found")

    def find_conn(self, ike: str | None) -> Connection:
        conn = next((c for c in self.conns if c.name == ike), None)
        if conn is None:
            raise Failed(f"IKE_SA config '{ike}' not found")
        return conn

    def pick_conn(self, local: str, peer: str, idi: str, idr: str | None) -> Connection | None:
        """The responder's choice: best address + identity match, ties in load order."""
        best, best_score = None, 0
        for c in self.conns:
            qa = addr_match(c.local_addrs, local) and addr_match(c.remote_addrs, peer)
            if not qa:
                continue
            if idr is not None:
                ql = id_match(c.local.id if c.local.id is not None else local, idr)
            else:
                ql = 1
            qr = id_match(c.remote.id, idi)
            if not ql or not qr:
                continue
            score = ql + qr
            if score > best_score:  # ties: the first loaded wins
                best, best_score = c, score
        return best

    def offload_for(self, conn: str) -> bool:
        kc = self.host.get("kernel_cipher", False)
        if isinstance(kc, bool):
            return not kc
        if isinstance(kc, dict):
            if conn in kc:
                return not bool(kc[conn])
            # the suite names connections `hil-<tunnel>-<tags>`; the longest tunnel name wins
            hits = [(len(n), f) for n, f in kc.items()
                    if conn.startswith(f"hil-{n}-") or conn.startswith(f"{n}-") or conn == f"hil-{n}"]
            if hits:
                return not bool(max(hits)[1])
        return True

    def replay_window(self) -> int:
        return int(self.host.get("replay_window", 32))

    # ------------------------------------------------------------ addresses
    @staticmethod
    def local_for(conn: Connection, remote: str) -> str:
        for a in conn.local_addrs:
            try:
                ip = ipaddress.ip_address(a)
                if ip.version == ipaddress.ip_address(remote).version:
                    return str(ip)
            except ValueError:
                continue
        fam = socket.AF_INET6 if ":" in remote else socket.AF_INET
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.connect((remote, conn.remote_port))
            return s.getsockname()[0]

    @staticmethod
    def remote_for(conn: Connection) -> str:
        for a in conn.remote_addrs:
            try:
                return str(ipaddress.ip_address(a))
            except ValueError:
                continue
        raise Failed("establishing CHILD_SA failed")

    def list_conns(self) -> list[dict]:
        return [{
            "name": c.name, "version": c.version, "rekey_time": c.rekey_time,
            "local_addrs": c.local_addrs or ["%any"], "remote_addrs": c.remote_addrs or ["%any"],
            "local_port": c.local_port, "remote_port": c.remote_port,
            "local_id": c.local.id or "%any", "remote_id": c.remote.id or "%any",
            "children": [{"name": ch.name, "mode": ch.mode, "rekey_time": ch.rekey_time,
                          "local_ts": ch.local_ts_text, "remote_ts": ch.remote_ts_text}
                         for ch in c.children.values()],
        } for c in self.conns]


class Reqids:
    """charon's reqid allocator (kernel_interface.c alloc_reqid/release_reqid, 5.9.8).

    Why per CHILD_SA and keyed by traffic selectors: the kernel's policies and SAs are
    tied by reqid, so charon gives children with equal selectors (and marks, which the
    twin does not model) one reqid -- a rekey's new child shares its predecessor's -- and
    children with different selectors their own.  New numbers count up from 1; a number
    whose last holder is gone is reused, oldest released first.  A child takes its reqid
    once (take) and gives it back once (give_back), however many times it is uninstalled.
    """

    def __init__(self) -> None:
        self.by_ts: dict[tuple[tuple[str, ...], tuple[str, ...]], int] = {}
        self.holders: dict[int, set[int]] = {}  # reqid -> unique ids of the children holding it
        self.held: dict[int, int] = {}  # child unique id -> its reqid
        self.released: list[int] = []
        self.counter = 0

    def take(self, child_uid: int, local_ts: list[str], remote_ts: list[str]) -> int:
        if child_uid in self.held:
            return self.held[child_uid]
        key = (tuple(local_ts), tuple(remote_ts))
        reqid = self.by_ts.get(key)
        if reqid is None:
            if self.released:
                reqid = self.released.pop(0)
            else:
                self.counter += 1
                reqid = self.counter
            self.by_ts[key] = reqid
        self.holders.setdefault(reqid, set()).add(child_uid)
        self.held[child_uid] = reqid
        return reqid

    def give_back(self, child_uid: int) -> None:
        reqid = self.held.pop(child_uid, None)
        if reqid is None:
            return
        holders = self.holders[reqid]
        holders.discard(child_uid)
        if not holders:
            del self.holders[reqid]
            self.by_ts = {k: v for k, v in self.by_ts.items() if v != reqid}
            self.released.append(reqid)
