"""A four-namespace layout (hostA | gwA | gwB | hostB) with two engines, for the
engine's own tests and the benchmark (ipsec_hil_twin.bench).

Why its own builder: the engine is proven without the full lab (ipsec_hil_twin.lifecycle.lab), with SAs
installed directly over engine.sock (`tunnel`) or negotiated by the IKE daemons
(`start_ike` + `swanctl`).  Everything is named with a per-run prefix
(`en` + 4 hex) and removed by `close()` on success and failure.

Addresses: hostA lan 198.51.100.10/26 fd00:a::10/64 -- gwA lan .1 / ::1;
gwA wan 192.0.2.1/24 2001:db8:0:1::1/64 -- gwB wan .2 / ::2;
gwB lan 203.0.113.1/24 fd00:b::1/64 -- hostB 203.0.113.10 fd00:b::10.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyroute2 import IPRoute, NetNS
from pyroute2 import netns as pr_netns

from ipsec_hil_twin import SOURCE_ROOT, python_path
from ipsec_hil_twin import faults as fault_registry
from ipsec_hil_twin.machinery.runtime import HostDir, stop_process, wait_for_socket, write_json_atomic

from .client import EngineClient

REPO = SOURCE_ROOT

ADDR = {
    "hA": {"lan": ("198.51.100.10/26", "fd00:a::10/64")},
    "gA": {"lan": ("198.51.100.1/26", "fd00:a::1/64"), "wan": ("192.0.2.1/24", "2001:db8:0:1::1/64")},
    "gB": {"wan": ("192.0.2.2/24", "2001:db8:0:1::2/64"), "lan": ("203.0.113.1/24", "fd00:b::1/64")},
    "hB": {"lan": ("203.0.113.10/24", "fd00:b::10/64")},
}
LAN = {"gA": ("198.51.100.0/26", "fd00:a::/64"), "gB": ("203.0.113.0/24", "fd00:b::/64")}
WIRES = (("hA", "lan", "gA", "lan"), ("gA", "wan", "gB", "wan"), ("gB", "lan", "hB", "lan"))
SYSCTLS_GW = ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]
SYSCTLS_ALL = ["net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
               "net.ipv6.conf.all.accept_ra=0", "net.ipv6.conf.default.accept_ra=0",
               "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"]


def _sysctl(ns: str, items: list[str]) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", *items], check=True)


@dataclass
class MiniLab:
    prefix: str = field(default_factory=lambda: "en" + secrets.token_hex(2))
    mtu: int = 1500
    wan_rate_mbit: float | None = None
    driver: dict[str, str] = field(default_factory=lambda: {"gA": "octep", "gB": "octep"})
    base: Path = Path("/tmp")
    engines: dict[str, subprocess.Popen] = field(default_factory=dict)
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    @staticmethod
    def unavailable(tools: tuple[str, ...] = ("ip",)) -> str | None:
        """Why a MiniLab cannot run on this machine (None: it can): root, /dev/net/tun and
        the command-line `tools` a test drives in the namespaces.  For pytest skips."""
        if os.geteuid() != 0:
            return "needs root (network namespaces, TUN, raw sockets)"
        if not Path("/dev/net/tun").exists():
            return "needs /dev/net/tun"
        missing = [t for t in tools if shutil.which(t) is None]
        return f"needs {', '.join(missing)}" if missing else None

    @property
    def run_dir(self) -> Path:
        return self.base / f"engtest-{self.prefix}"

    def ns(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def host_dir(self, role: str) -> Path:
        return self.run_dir / role

    # -- build -------------------------------------------------------------------------
    def build(self, engines: bool = True) -> "MiniLab":
        try:
            self._build_net()
            if engines:
                for gw in ("gA", "gB"):
                    self.start_engine(gw)
        except BaseException:
            self.close()
            raise
        return self

    def _build_net(self) -> None:
        for role in ADDR:
            pr_netns.create(self.ns(role))
            _sysctl(self.ns(role), SYSCTLS_ALL + (SYSCTLS_GW if role.startswith("g") else []))
            with NetNS(self.ns(role)) as n:
                n.link("set", index=n.link_lookup(ifname="lo")[0], state="up")
        with IPRoute() as ipr:
            for k, (ra, pa, rb, pb) in enumerate(WIRES):
                a, b = f"{self.prefix}{k}a", f"{self.prefix}{k}b"
                ipr.link("add", ifname=a, kind="veth", peer=b)
                for name, role, port in ((a, ra, pa), (b, rb, pb)):
                    idx = ipr.link_lookup(ifname=name)[0]
                    ipr.link("set", index=idx, net_ns_fd=self.ns(role))
                    with NetNS(self.ns(role)) as n:
                        i = n.link_lookup(ifname=name)[0]
                        n.link("set", index=i, ifname=port, mtu=self.mtu)
                        for cidr in ADDR[role][port]:
                            addr, plen = cidr.split("/")
                            n.addr("add", index=i, address=addr, prefixlen=int(plen))
                        n.link("set", index=i, state="up")
        for host, gw in (("hA", "gA"), ("hB", "gB")):
            with NetNS(self.ns(host)) as n:
                v4, v6 = (c.split("/")[0] for c in ADDR[gw]["lan"])
                n.route("add", dst="0.0.0.0/0", gateway=v4)
                n.route("add", dst="::/0", gateway=v6, family=10)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for gw in ("gA", "gB"):
            d = self.host_dir(gw)
            d.mkdir(parents=True, exist_ok=True)
            ports = [{"name": p, "ifname": p, "addresses": list(a), "mtu": self.mtu,
                      "rate_mbit": self.wan_rate_mbit if p == "wan" else None}
                     for p, a in ADDR[gw].items()]
            host = {"name": gw, "model": "xgs3300" if self.driver[gw] == "octep" else "xgs136",
                    "driver": self.driver[gw], "netns": self.ns(gw), "ports": ports,
                    "replay_window": 32, "counters": {}}
            (d / "host.json").write_text(json.dumps(host, indent=1))

    def _start(self, gw: str, module: str, log_name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """`python -m module --host-dir DIR` inside gw's namespace, output to DIR/log_name."""
        d = self.host_dir(gw)
        with open(d / log_name, "ab") as log:
            return subprocess.Popen(["ip", "netns", "exec", self.ns(gw), sys.executable, "-m", module,
                                     "--host-dir", str(d)], stdout=log, stderr=subprocess.STDOUT,
                                    cwd=str(REPO), env=env)

    def start_engine(self, gw: str) -> None:
        d = self.host_dir(gw)
        self.engines[gw] = p = self._start(gw, "ipsec_hil_twin.engine", "engine.log")
        wait_for_socket(d / "engine.sock", p, f"engine {gw}", d / "engine.log", timeout=15)

    def stop_engine(self, gw: str) -> None:
        p = self.engines.pop(gw, None)
        if p is not None:
            stop_process(p, timeout=10)

    def start_ike(self, gw: str, retransmit: str = "0.1,1.5,5") -> None:
        """The IKE daemon of gw (ipsec_hil_twin.ike.daemon) on its engine; `retransmit` is
        $TWIN_IKE_RETRANSMIT (timeout,base,tries: short, so a failing test ends fast)."""
        d = self.host_dir(gw)
        (d / "root/usr/local/etc/swanctl").mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=python_path(), TWIN_IKE_RETRANSMIT=retransmit)
        self.daemons[gw] = p = self._start(gw, "ipsec_hil_twin.ike.daemon", "ike.log", env)
        wait_for_socket(d / "ike.sock", p, f"IKE daemon {gw}", d / "ike.log", timeout=10)

    def stop_ike(self, gw: str) -> None:
        p = self.daemons.pop(gw, None)
        if p is not None:
            stop_process(p)

    def swanctl(self, gw: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """`swanctl ARGS` as gw's shell would run it (TWIN_HOST_DIR set, text output)."""
        env = dict(os.environ, PYTHONPATH=python_path(), TWIN_HOST_DIR=str(self.host_dir(gw)))
        return subprocess.run([sys.executable, "-m", "ipsec_hil_twin.ike.swanctl", *args], capture_output=True,
                              text=True, env=env, timeout=timeout, cwd=str(REPO))

    def client(self, gw: str) -> EngineClient:
        return EngineClient(self.host_dir(gw) / "engine.sock")

    def call(self, gw: str, op: str, check: bool = True, **kw) -> dict:
        with self.client(gw) as c:
            return c.call(op, check=check, **kw)

    # -- SAs ---------------------------------------------------------------------------
    def tunnel(self, cipher: str, outer: str, local_ts=None, remote_ts=None, offload=(True, True),
               spis: tuple[int, int] | None = None, v6_routes: bool = True, encap: bool = False) -> dict:
        """Install an SA pair gwA<->gwB with random keys; returns the SA dicts (with keys).
        encap: NAT-T, ESP in UDP 4500 (IPv4 outer only)."""
        fam = 0 if outer == "ipv4" else 1
        a_wan = ADDR["gA"]["wan"][fam].split("/")[0]
        b_wan = ADDR["gB"]["wan"][fam].split("/")[0]
        lts = list(local_ts or LAN["gA"])
        rts = list(remote_ts or LAN["gB"])
        s1, s2 = spis or (secrets.randbits(31) | 0x1000, secrets.randbits(31) | 0x1000)

        def keys() -> dict:
            if cipher == "aes-gcm-16":
                return {"enc_key": secrets.token_hex(36), "auth_key": None}
            return {"enc_key": secrets.token_hex(32), "auth_key": secrets.token_hex(32)}

        k1, k2 = keys(), keys()
        base = {"cipher": cipher, "reqid": 1, "child": "net", "conn": "lab", "replay_window": 32,
                **({"encap": True} if encap else {})}
        ab = dict(base, spi=s1, src=a_wan, dst=b_wan, **k1)
        ba = dict(base, spi=s2, src=b_wan, dst=a_wan, **k2)
        sas = {
            "gA_out": dict(ab, direction="out", local_ts=lts, remote_ts=rts, offload=offload[0]),
            "gB_in": dict(ab, direction="in", local_ts=rts, remote_ts=lts, offload=offload[1]),
            "gB_out": dict(ba, direction="out", local_ts=rts, remote_ts=lts, offload=offload[1]),
            "gA_in": dict(ba, direction="in", local_ts=lts, remote_ts=rts, offload=offload[0]),
        }
        for name, sa in sas.items():
            self.call(name[:2], "add_sa", sa=sa)
        if v6_routes:
            for gw, other in (("gA", "gB"), ("gB", "gA")):
                self.call(gw, "route", check=False, action="add", dest=LAN[other][1])  # may exist
        return sas

    # -- running things ----------------------------------------------------------------
    def run(self, role: str, argv: list[str], timeout: float = 30, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns(role), *argv], capture_output=True,
                              text=True, timeout=timeout, check=check)

    def popen(self, role: str, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns(role), *argv], **kw)

    def set_faults(self, gw: str, faults: dict[str, dict]) -> None:
        """Exactly these faults on for gw (`{name: params}`, checked against the registry
        ipsec_hil_twin.faults.REGISTRY), and the engine re-reads them before this returns."""
        fault_registry.clear_fault(self.host_dir(gw), None)
        for name, params in faults.items():
            fault_registry.set_fault(self.host_dir(gw), name, **params)
        self.call(gw, "faults")

    def settled_counters(self, gw: str, timeout: float = 5.0) -> dict:
        """gw's counters once two reads 100 ms apart agree (the suite's settle rule)."""
        prev = self.call(gw, "counters")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.1)
            cur = self.call(gw, "counters")
            if cur == prev:
                return cur
            prev = cur
        raise AssertionError(f"{gw} counters did not settle in {timeout}s")

    def write_faults(self, gw: str, faults: dict) -> None:
        """Replace gw's faults.json and make the engine re-read it before returning."""
        self._write_watched(gw, HostDir(self.host_dir(gw)).faults_json, faults)

    def write_sysctl(self, gw: str, values: dict) -> None:
        """Replace gw's sysctl.json and make the engine re-read it before returning."""
        self._write_watched(gw, HostDir(self.host_dir(gw)).sysctl_json, values)

    def _write_watched(self, gw: str, path: Path, values: dict) -> None:
        write_json_atomic(path, values)
        self.call(gw, "faults")  # makes the engine and its loops re-read faults.json and sysctl.json

    # -- teardown ----------------------------------------------------------------------
    def close(self) -> None:
        for gw in list(self.daemons):  # first: they remove their associations from the engines
            self.stop_ike(gw)
        for gw in list(self.engines):
            self.stop_engine(gw)
        for role in ADDR:
            name = self.ns(role)
            if name in pr_netns.listnetns():
                out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
                for pid in out.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                pr_netns.remove(name)
        with IPRoute() as ipr:
            for k in range(len(WIRES)):
                for side in "ab":
                    idx = ipr.link_lookup(ifname=f"{self.prefix}{k}{side}")
                    if idx:
                        ipr.link("del", index=idx[0])
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> "MiniLab":
        return self.build()

    def __exit__(self, *exc) -> None:
        self.close()
