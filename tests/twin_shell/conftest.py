"""A minimal emulated appliance for the shell tests: namespace + host dir + SSH server.

The ESP engine here is a TEST DOUBLE (`EngineDoubleForFormatTests`): fixed counters and
SAs on DIR/engine.sock, so the FreeBSD commands' formats can be checked exactly.  The
real engine is tested under tests/engine and against this server in test_real_engine.
Everything else is real: the namespace (`sh<hex>-dut` with a veth to `sh<hex>-peer`),
tcsh, iputils ping, ip routes, paramiko on both ends, and the command server the lab's
SSH server starts (ipsec_hil_twin.shell.cmdserver): the commands run as they do in a lab.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ipsec_hil_twin.fbsd.install import install_bin
from ipsec_hil_twin.jsonl import JsonlServer
from ipsec_hil_twin.machinery.runtime import HostDir, write_json_atomic
from ipsec_hil_twin.shell.sshd import ApplianceSshServer, known_hosts_line, load_authorized_keys

GCM_KEY = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff01020304"
CBC_KEY = "a0" * 32
AUTH_KEY = "b1" * 32
NPUEP = {n: f"dev.npuep.0.ipsec.{n}" for n in
         ("tx_taken", "tx_accel", "rx_done", "rx_v6", "rx_bad", "rx_nosa", "tx_nonhop", "tx_drop",
          "sa_count", "sa_inet", "sa_inet6")}
DRIVER_COUNTS = {"tx_taken": 0, "tx_accel": 829290, "rx_done": 12, "rx_v6": 418042, "rx_bad": 0,
                 "rx_nosa": 1, "tx_nonhop": 0, "tx_drop": 0, "sa_count": 2, "sa_inet": 0, "sa_inet6": 2}
ESP_COUNTS = {"received-packets": 10, "sent-packets": 1, "receieve-bytes": 840, "sent-bytes": 84,
              "dropped-bad-auth": 3}
CPU_NS = 2_000_000_000
"""The CPU the engine double says its loops charged (2 s: kern.cp_time's intr is 254 ticks)."""
BOOT_TIME = 1764448000.25
"""state.json's boot_time of the shell tests' appliance (kern.boottime, kern.cp_time)."""


class JsonlDouble:
    """A TEST DOUBLE's socket: ipsec_hil_twin.jsonl's server (the one the twin's components serve
    with, so the commands meet the same framing), each request recorded in ``requests``
    and answered by ``answer(request)``. :meth:`close` stops it and removes the socket."""

    def __init__(self, path: str | Path, answer: Callable[[dict], dict]):
        self.path = Path(path)
        self.requests: list[dict] = []
        self._answer = answer
        self.server = JsonlServer(self.path, self._record)
        threading.Thread(target=self.server.serve_forever, name=f"double {path}", daemon=True).start()

    def _record(self, line: bytes) -> dict:
        req = json.loads(line)
        self.requests.append(req)
        return self._answer(req)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.path.unlink(missing_ok=True)


class EngineDoubleForFormatTests(JsonlDouble):
    """TEST DOUBLE of ipsec_hil_twin.engine's control socket: fixed answers, records requests."""

    def __init__(self, path: Path):
        super().__init__(path, self.answer)
        self.sas = [
            {"spi": 3237977012, "direction": "out", "src": "192.0.2.1", "dst": "192.0.2.2",
             "cipher": "aes-gcm-16", "enc_key": GCM_KEY, "auth_key": None, "reqid": 1,
             "child": "lab", "conn": "lab", "local_ts": ["10.77.0.0/24"], "remote_ts": ["10.88.0.0/24", "fd88::/64"],
             "replay_window": 32, "offload": True, "packets": 1000, "bytes": 84000,
             "last_use": 1764450000, "created": 1764449000},
            {"spi": 0xC2000001, "direction": "in", "src": "192.0.2.2", "dst": "192.0.2.1",
             "cipher": "aes-cbc-hmac-sha256", "enc_key": CBC_KEY, "auth_key": AUTH_KEY, "reqid": 1,
             "child": "lab", "conn": "lab", "local_ts": ["10.77.0.0/24"], "remote_ts": ["10.88.0.0/24[tcp/5201]"],
             "replay_window": 32, "offload": True, "packets": 0, "bytes": 0, "last_use": 0,
             "created": 1764449000},
        ]
        self.routes: list[dict] = []
        self.driver_loaded = True

    def answer(self, req: dict) -> dict:
        op = req.get("op")
        if op == "counters":
            return {"ok": True, "driver": DRIVER_COUNTS, "esp": ESP_COUNTS, "histogram": {"aes-gcm-16": 11},
                    "cpu_ns": CPU_NS}
        if op == "list_sas":
            return {"ok": True, "sas": self.sas}
        if op == "set_driver":
            self.driver_loaded = bool(req.get("loaded"))
            return {"ok": True}
        if op == "status":
            return {"ok": True, "pid": os.getpid(), "driver_loaded": self.driver_loaded,
                    "fbsd_routes": {r["dst"]: r["gateway"] for r in self.routes}}
        if op == "route":
            key = (req.get("dst"), req.get("gateway"))
            if req.get("action") == "add":
                if key in [(r["dst"], r["gateway"]) for r in self.routes]:
                    return {"ok": False, "error": "route exists"}
                self.routes.append({"dst": key[0], "gateway": key[1]})
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}


@dataclass
class Result:
    out: str
    err: str
    status: int


@dataclass
class Appliance:
    hd: HostDir
    ns: str
    peer_ns: str
    client: paramiko.SSHClient
    server: ApplianceSshServer
    engine: EngineDoubleForFormatTests
    known_hosts: Path
    pkey: paramiko.PKey
    commands: subprocess.Popen | None = None
    """The appliance's command server (ipsec_hil_twin.shell.cmdserver), which the SSH server starts."""

    def run(self, command: str, stdin: bytes | None = None, timeout: float = 30) -> Result:
        chan = self.client.get_transport().open_session(timeout=timeout)
        chan.settimeout(timeout)
        chan.exec_command(command)
        if stdin is not None:
            chan.sendall(stdin)
        chan.shutdown_write()
        out, err = bytearray(), bytearray()
        while True:
            if chan.recv_ready():
                out += chan.recv(65536)
            elif chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            elif chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            else:
                time.sleep(0.005)
        while chan.recv_ready():
            out += chan.recv(65536)
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
        status = chan.recv_exit_status()
        chan.close()
        return Result(out.decode(), err.decode(), status)

    def sh(self, script: str) -> Result:
        """The suite's way: a POSIX sh script on stdin to /bin/sh -s."""
        return self.run("/bin/sh -s", stdin=script.encode())


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def new_client_key() -> tuple[paramiko.Ed25519Key, str]:
    priv = Ed25519PrivateKey.generate()
    pem = priv.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                             serialization.NoEncryption()).decode()
    pub = priv.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode()
    return paramiko.Ed25519Key(file_obj=io.StringIO(pem)), pub


def build_host_dir(path: Path, ns: str) -> HostDir:
    hd = HostDir(path)
    for sub in ("usr/local/etc/swanctl/conf.d", "boot/modules", "boot/kernel", "var/db", "var/log",
                "root", "tmp"):
        (hd.root / sub).mkdir(parents=True, exist_ok=True)
    (hd.root / "tmp").chmod(0o1777)
    files = {"/boot/kernel/kernel": b"\x7fELF kernel" * 1000, "/boot/kernel/ipsec.ko": b"\x7fELF ipsec" * 300,
             "/boot/modules/npuep.ko": b"\x7fELF npuep good build" * 500,
             "/boot/modules/broken.ko": b"\x7fELF npuep twin-unresolved-symbol=crypto_dispatch_v2\0"}
    mods = []
    for p, data in files.items():
        hd.rootpath(p).write_bytes(data)
        if p.endswith((".ko", "kernel")) and "broken" not in p:
            mods.append({"name": os.path.basename(p), "file": p,
                         "md5": hashlib.md5(data).hexdigest(), "size": len(data)})
    write_json_atomic(hd.host_json, {
        "name": path.name, "model": "xgs136", "driver": "npuep", "module_file": "/boot/modules/npuep.ko",
        "counters": NPUEP, "netns": ns, "replay_window": 32,
        "paths": {"supervisor_sock": str(path.parent / "supervisor.sock")},
        "ports": [{"name": "lan", "ifname": "lan", "addresses": ["10.77.0.1/24", "fd77::1/64"], "mtu": 1400},
                  {"name": "wan", "ifname": "wan", "addresses": ["10.78.0.1/24"], "mtu": 1500}],
    })
    write_json_atomic(hd.state_json, {"boot_id": 1, "boot_time": BOOT_TIME, "modules": mods,
                                      "driver": dict(mods[2], loaded=True, driver="npuep")})
    write_json_atomic(hd.sysctl_json, {"net.inet.ipsec.dfbit": 0})
    write_json_atomic(hd.faults_json, {})
    return hd


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not shutil.which("tcsh"):
        pytest.skip("needs Debian's tcsh")
    prefix = "sh" + secrets.token_hex(2)
    ns, peer = f"{prefix}-dut", f"{prefix}-peer"
    base = tmp_path_factory.mktemp("appliance")
    created: list[str] = []
    server = engine = client = None
    try:
        for n in (ns, peer):
            _ip("netns", "add", n)
            created.append(n)
        # lan: dut <-> peer, 1400 on the dut side (EMSGSIZE for big own packets)
        _ip("link", "add", f"{prefix}0a", "type", "veth", "peer", "name", f"{prefix}0b")
        _ip("link", "set", f"{prefix}0a", "netns", ns, "name", "lan")
        _ip("link", "set", f"{prefix}0b", "netns", peer, "name", "eth0")
        # wan: dut <-> peer, IPv4 only on the dut (OPNsense: IPv6 disabled there)
        _ip("link", "add", f"{prefix}1a", "type", "veth", "peer", "name", f"{prefix}1b")
        _ip("link", "set", f"{prefix}1a", "netns", ns, "name", "wan")
        _ip("link", "set", f"{prefix}1b", "netns", peer, "name", "eth1")
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.wan.disable_ipv6=1"],
                       check=True, capture_output=True)
        for args in (("-n", ns, "addr", "add", "10.77.0.1/24", "dev", "lan"),
                     ("-n", ns, "addr", "add", "fd77::1/64", "dev", "lan", "nodad"),
                     ("-n", ns, "addr", "add", "10.78.0.1/24", "dev", "wan"),
                     ("-n", ns, "link", "set", "lan", "mtu", "1400", "up"),
                     ("-n", ns, "link", "set", "wan", "up"),
                     ("-n", ns, "link", "set", "lo", "up"),
                     ("-n", peer, "addr", "add", "10.77.0.2/24", "dev", "eth0"),
                     ("-n", peer, "addr", "add", "fd77::2/64", "dev", "eth0", "nodad"),
                     ("-n", peer, "addr", "add", "10.78.0.2/24", "dev", "eth1"),
                     ("-n", peer, "link", "set", "eth0", "mtu", "1400", "up"),
                     ("-n", peer, "link", "set", "eth1", "up")):
            _ip(*args)
        hd = build_host_dir(base / "dut", ns)
        install_bin(hd)
        engine = EngineDoubleForFormatTests(hd.engine_sock)
        pkey, pub = new_client_key()
        (base / "id.pub").write_text(pub + " test\n")
        server = ApplianceSshServer(hd, load_authorized_keys(base / "id.pub"))
        port = server.start()
        kh = base / "known_hosts"
        kh.write_text(known_hosts_line(hd, port) + "\n")
        client = paramiko.SSHClient()
        client.load_host_keys(str(kh))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect("127.0.0.1", port=port, username="root", pkey=pkey, allow_agent=False,
                       look_for_keys=False, timeout=10)
        yield Appliance(hd, ns, peer, client, server, engine, kh, pkey, server.commands)
    finally:
        if client is not None:
            client.close()
        if server is not None:
            server.stop()
        if engine is not None:
            engine.close()
        for n in created:
            subprocess.run(["ip", "netns", "delete", n], capture_output=True)
