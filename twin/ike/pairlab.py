"""Two appliance namespaces joined by a veth, each with a twin.ike daemon (tests, benchmark).

Not part of the lab (twin.lab builds that); this is the control plane's own test bed.

`RecordingEngineDouble` is a TEST DOUBLE of the ESP engine's control socket: it keeps the
associations it is given (add_sa/del_sa/flush/list_sas) so a test can compare both ends'
keys.  It moves no packets.  `IkePair(real_engine=True)` starts H4's real engine instead
(`python -m twin.engine --host-dir DIR` inside the namespace) when that module exists.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
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
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(16)
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        f = conn.makefile("rwb")
        try:
            for line in f:
                req = json.loads(line)
                with self.lock:
                    self.calls.append({k: v for k, v in req.items() if k != "sa"} | (
                        {"spi": req["sa"]["spi"], "direction": req["sa"]["direction"]} if "sa" in req else {}))
                    op = req["op"]
                    if op == "add_sa":
                        sa = req["sa"]
                        self.sas[(sa["spi"], sa["dst"])] = sa
                        rep = {"ok": True, "offloaded": bool(sa.get("offload", True))}
                    elif op == "del_sa":
                        self.sas.pop((req["spi"], req["dst"]), None)
                        rep = {"ok": True}
                    elif op == "flush":
                        self.sas.clear()
                        rep = {"ok": True}
                    elif op == "list_sas":
                        rep = {"ok": True, "sas": [dict(s, packets=0, bytes=0, last_use=None)
                                                   for s in self.sas.values()]}
                    else:
                        rep = {"ok": False, "error": f"double does not do {op}"}
                f.write((json.dumps(rep) + "\n").encode())
                f.flush()
        except (OSError, ValueError):
            pass
        finally:
            conn.close()

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(s) for s in self.sas.values()]

    def close(self) -> None:
        self.stop = True
        self.srv.close()


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=20, check=check)


class IkePair:
    """Namespaces `P-a`/`P-b`, veth `P0a`/`P0b`, host dirs under `base`, daemons."""

    def __init__(self, prefix: str, base: Path, retransmit: str = "0.05,1.5,5") -> None:
        self.prefix, self.base = prefix, base
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
            (d / "host.json").write_text(json.dumps({"name": h, "replay_window": 32}))
        return self

    def start_engines_double(self) -> None:
        for h, d in self.dirs.items():
            self.engines[h] = RecordingEngineDouble(d / "engine.sock")

    def start_daemon(self, h: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO), TWIN_IKE_RETRANSMIT=self.retransmit)
        log = open(self.dirs[h] / "ike.log", "ab")
        self.procs[h] = subprocess.Popen(
            ["ip", "netns", "exec", self.ns[h], PY, "-m", "twin.ike.daemon", "--host-dir", str(self.dirs[h])],
            env=env, stdout=log, stderr=log, cwd=str(REPO))
        sock = self.dirs[h] / "ike.sock"
        deadline = time.time() + 10
        while time.time() < deadline:
            if sock.exists():
                try:
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(str(sock))
                    s.close()
                    return
                except OSError:
                    pass
            if self.procs[h].poll() is not None:
                raise RuntimeError(f"daemon {h} died: {(self.dirs[h] / 'ike.log').read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"daemon {h} did not open {sock}")

    def stop_daemon(self, h: str) -> None:
        p = self.procs.pop(h, None)
        if p and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def write_conf(self, h: str, text: str, name: str = "swanctl.conf") -> Path:
        path = self.dirs[h] / "root/usr/local/etc/swanctl" / name
        path.write_text(text)
        return path

    def swanctl(self, h: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=str(REPO), TWIN_HOST_DIR=str(self.dirs[h]))
        return subprocess.run([PY, "-m", "twin.ike.swanctl", *args], capture_output=True, text=True,
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
         psk: str = "0sc2VjcmV0LWxhYi1rZXk=", start_action: str = "none") -> str:
    """A connection + its secret in the suite's rendering style (one key per line)."""
    lid, rid = local_id or local, remote_id or remote
    out = ["connections {", f"    {name} {{", "        version = 2", f"        local_addrs = {local}",
           f"        remote_addrs = {remote}", f"        proposals = {proposals}",
           "        local {", "            auth = psk", f"            id = {lid}", "        }",
           "        remote {", "            auth = psk", f"            id = {rid}", "        }",
           "        children {"]
    for cname, (lts, rts) in children.items():
        out += [f"            {cname} {{", f"                local_ts = {lts}", f"                remote_ts = {rts}",
                f"                esp_proposals = {esp}", "                mode = tunnel",
                f"                start_action = {start_action}", "            }"]
    out += ["        }", "    }", "}", "secrets {", f"    ike-{name} {{", f"        id-1 = {lid}",
            f"        id-2 = {rid}", f"        secret = {psk}", "    }", "}"]
    return "\n".join(out) + "\n"
