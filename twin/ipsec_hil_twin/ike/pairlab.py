"""Two appliance namespaces joined by a veth, each with a ipsec_hil_twin.ike daemon (tests, benchmark).

Not part of the lab (ipsec_hil_twin.lifecycle.lab builds that); this is the control plane's own test bed.

`RecordingEngineDouble` is a TEST DOUBLE of the ESP engine's control socket: it keeps the
associations it is given (add_sa/del_sa/flush/list_sas) so a test can compare both ends'
keys.  It moves no packets.  `IkePair(real_engine=True)` starts the real engine (ipsec_hil_twin.engine) instead
(`python -m ipsec_hil_twin.engine --host-dir DIR` inside the namespace) when that module exists.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ipsec_hil_twin import SOURCE_ROOT, jsonl, python_path
from ipsec_hil_twin.errors import ControlSocketError
from ipsec_hil_twin.jsonl import JsonlServer
from ipsec_hil_twin.machinery.runtime import stop_process, wait_for_socket

REPO = SOURCE_ROOT
PY = sys.executable

A4, B4 = "192.0.2.1", "192.0.2.2"
A6, B6 = "2001:db8:1::1", "2001:db8:1::2"


class RecordingEngineDouble:
    """Test double of engine.sock: records add_sa/del_sa; counters stay 0."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sas: dict[tuple[int, str], dict[str, Any]] = {}
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server = JsonlServer(path, self._answer)
        threading.Thread(target=self.server.serve_forever, name=f"double {path}", daemon=True).start()

    def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            req = jsonl.decode(line, str(self.path))
        except ControlSocketError as exc:
            return {"ok": False, "error": str(exc)}
        with self.lock:
            self.calls.append({k: v for k, v in req.items() if k != "sa"} | (
                {"spi": req["sa"]["spi"], "direction": req["sa"]["direction"]} if "sa" in req else {}))
            op = req.get("op")
            if op == "add_sa":
                sa = req["sa"]
                self.sas[(sa["spi"], sa["dst"])] = sa
                return {"ok": True, "offloaded": bool(sa.get("offload", True))}
            if op == "del_sa":
                self.sas.pop((req["spi"], req["dst"]), None)
                return {"ok": True}
            if op == "flush":
                self.sas.clear()
                return {"ok": True}
            if op == "list_sas":
                return {"ok": True, "sas": [dict(s, packets=0, bytes=0, last_use=None) for s in self.sas.values()]}
            return {"ok": False, "error": f"double does not do {op}"}

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(s) for s in self.sas.values()]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=20, check=check)


class IkePair:
    """Namespaces `P-a`/`P-b`, veth `P0a`/`P0b`, host dirs under `base`, daemons."""

    def __init__(self, prefix: str, base: Path, retransmit: str = "0.05,1.5,5",
                 rekeyed_delay: float = 0.3) -> None:
        """`rekeyed_delay`: host.json ike.delete_rekeyed_delay, short so a test does not
        wait charon's 5 s for a rekeyed child's inbound association to go."""
        self.prefix, self.base = prefix, base
        self.rekeyed_delay = rekeyed_delay
        self.ns = {"a": f"{prefix}-a", "b": f"{prefix}-b"}
        self.dirs = {h: base / h for h in ("a", "b")}
        self.engines: dict[str, RecordingEngineDouble] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.retransmit = retransmit

    def build(self) -> "IkePair":
        p = self.prefix
        for h, ns in self.ns.items():
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", f"{p}0a", "netns", self.ns["a"], "type", "veth", "peer", "name", f"{p}0b",
           "netns", self.ns["b"])
        for h, addr4, addr6 in (("a", A4, A6), ("b", B4, B6)):
            ns, dev = self.ns[h], f"{p}0{h}"
            sh("ip", "-n", ns, "addr", "add", f"{addr4}/24", "dev", dev)
            sh("ip", "-n", ns, "addr", "add", f"{addr6}/64", "dev", dev, "nodad")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        for h, d in self.dirs.items():
            (d / "root/usr/local/etc/swanctl/conf.d").mkdir(parents=True, exist_ok=True)
            (d / "host.json").write_text(json.dumps({"name": h, "replay_window": 32,
                                                     "ike": {"delete_rekeyed_delay": self.rekeyed_delay}}))
        return self

    def start_engines_double(self) -> None:
        for h, d in self.dirs.items():
            self.engines[h] = RecordingEngineDouble(d / "engine.sock")

    def start_daemon(self, h: str) -> None:
        env = dict(os.environ, PYTHONPATH=python_path(), TWIN_IKE_RETRANSMIT=self.retransmit)
        log = open(self.dirs[h] / "ike.log", "ab")
        self.procs[h] = subprocess.Popen(
            ["ip", "netns", "exec", self.ns[h], PY, "-m", "ipsec_hil_twin.ike.daemon", "--host-dir", str(self.dirs[h])],
            env=env, stdout=log, stderr=log, cwd=str(REPO))
        wait_for_socket(self.dirs[h] / "ike.sock", self.procs[h], f"daemon {h}", self.dirs[h] / "ike.log", 10)

    def stop_daemon(self, h: str) -> None:
        p = self.procs.pop(h, None)
        if p is not None:
            stop_process(p)

    def write_conf(self, h: str, text: str, name: str = "swanctl.conf") -> Path:
        path = self.dirs[h] / "root/usr/local/etc/swanctl" / name
        path.write_text(text)
        return path

    def swanctl(self, h: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=python_path(), TWIN_HOST_DIR=str(self.dirs[h]))
        return subprocess.run([PY, "-m", "ipsec_hil_twin.ike.swanctl", *args], capture_output=True, text=True,
                              env=env, timeout=timeout, cwd=str(REPO))

    def close(self) -> None:
        for h in list(self.procs):
            self.stop_daemon(h)
        for e in self.engines.values():
            e.close()
        for ns in self.ns.values():
            sh("ip", "netns", "delete", ns, check=False)


def conf(name: str, local: str, remote: str, children: dict[str, tuple[str, str]], *,
         local_id: str | None = None, remote_id: str | None = None,
         proposals: str = "aes256gcm16-prfsha256-x25519", esp: str = "aes256gcm16",
         psk: str = "0sc2VjcmV0LWxhYi1rZXk=", start_action: str = "none",
         child_options: dict[str, str] | None = None, conn_options: dict[str, str] | None = None) -> str:
    """A connection + its secret in the suite's rendering style (one key per line);
    `child_options`/`conn_options` add keys to every child / the connection (e.g.
    rekey_time, life_time, rand_time)."""
    lid, rid = local_id or local, remote_id or remote
    out = ["connections {", f"    {name} {{", "        version = 2", f"        local_addrs = {local}",
           f"        remote_addrs = {remote}", f"        proposals = {proposals}",
           *(f"        {k} = {v}" for k, v in (conn_options or {}).items()),
           "        local {", "            auth = psk", f"            id = {lid}", "        }",
           "        remote {", "            auth = psk", f"            id = {rid}", "        }",
           "        children {"]
    for cname, (lts, rts) in children.items():
        out += [f"            {cname} {{", f"                local_ts = {lts}", f"                remote_ts = {rts}",
                f"                esp_proposals = {esp}", "                mode = tunnel",
                f"                start_action = {start_action}",
                *(f"                {k} = {v}" for k, v in (child_options or {}).items()), "            }"]
    out += ["        }", "    }", "}", "secrets {", f"    ike-{name} {{", f"        id-1 = {lid}",
            f"        id-2 = {rid}", f"        secret = {psk}", "    }", "}"]
    return "\n".join(out) + "\n"
