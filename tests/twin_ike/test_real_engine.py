"""Bring-up against H4's real ESP engine (twin.engine) in its MiniLab (hostA|gwA|gwB|hostB):
the daemons negotiate, the engines get the keys, a ping crosses the tunnel, and
`swanctl --list-sas` shows the engine's packet counters.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plugin.lab.parsers import swanctl_initiate, swanctl_list_sas
from twin.ike.pairlab import conf

pytestmark = pytest.mark.needs_root
REPO = Path(__file__).resolve().parents[2]


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, TUN)"
    if not Path("/dev/net/tun").exists():
        return "needs /dev/net/tun"
    if not shutil.which("ping"):
        return "needs ping"
    try:
        import twin.engine.minilab  # noqa: F401
    except ImportError as exc:
        return f"H4's engine is not importable: {exc}"
    return None


@pytest.fixture
def lab():
    if _why_not():
        pytest.skip(_why_not())
    from twin.engine.minilab import MiniLab
    lab = MiniLab()
    lab.build()
    daemons: dict[str, subprocess.Popen] = {}
    try:
        for gw in ("gA", "gB"):
            d = lab.host_dir(gw)
            (d / "root/usr/local/etc/swanctl").mkdir(parents=True, exist_ok=True)
            log = open(d / "ike.log", "ab")
            env = dict(os.environ, PYTHONPATH=str(REPO), TWIN_IKE_RETRANSMIT="0.1,1.5,5")
            daemons[gw] = subprocess.Popen(["ip", "netns", "exec", lab.ns(gw), sys.executable, "-m",
                                            "twin.ike.daemon", "--host-dir", str(d)],
                                           stdout=log, stderr=log, env=env, cwd=str(REPO))
            deadline = time.monotonic() + 10
            while not (d / "ike.sock").exists():
                assert daemons[gw].poll() is None, (d / "ike.log").read_text()
                assert time.monotonic() < deadline, "ike.sock did not appear"
                time.sleep(0.05)
        yield lab
    finally:
        for p in daemons.values():
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        lab.close()


def swanctl(lab, gw: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), TWIN_HOST_DIR=str(lab.host_dir(gw)))
    return subprocess.run([sys.executable, "-m", "twin.ike.swanctl", *args], capture_output=True, text=True,
                          env=env, timeout=30, cwd=str(REPO))


@pytest.mark.parametrize("esp", ["aes256gcm16"])  # CBC keys: test_negotiation.test_cbc_keys_and_auth_keys
def test_negotiated_tunnel_carries_traffic_through_real_engines(lab, esp):
    a = conf("lab", "192.0.2.1", "192.0.2.2", {"net": ("198.51.100.0/26", "203.0.113.0/24")}, esp=esp)
    b = conf("lab", "192.0.2.2", "192.0.2.1", {"net": ("203.0.113.0/24", "198.51.100.0/26")}, esp=esp)
    for gw, text in (("gA", a), ("gB", b)):
        (lab.host_dir(gw) / "root/usr/local/etc/swanctl/swanctl.conf").write_text(text)
        r = swanctl(lab, gw, "--load-all", "--noprompt")
        assert r.returncode == 0, r.stderr
    r = swanctl(lab, "gA", "--initiate", "--child", "net")
    res = swanctl_initiate.parse(r.stdout, r.stderr, r.returncode)
    assert res.ok, r.stdout + r.stderr
    engine_sas = lab.call("gA", "list_sas")["sas"]
    assert {(s["spi"], s["direction"]) for s in engine_sas} == {
        (int(res.spi_in, 16), "in"), (int(res.spi_out, 16), "out")}
    ping = lab.run("hA", ["ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.10"])
    assert ping.returncode == 0, ping.stdout + ping.stderr
    (ike,) = swanctl_list_sas.parse(swanctl(lab, "gA", "--list-sas").stdout).ike_sas
    (child,) = ike.children
    assert child.packets_out >= 3 and child.packets_in >= 3
    assert child.bytes_in > 0 and child.use_in is not None
    # rekey under traffic: new SAs, the ping still answered
    assert swanctl(lab, "gA", "--rekey", "--child", "net").returncode == 0
    ping = lab.run("hA", ["ping", "-c", "2", "-i", "0.2", "-W", "2", "203.0.113.10"])
    assert ping.returncode == 0, ping.stdout
    (child2,) = swanctl_list_sas.parse(swanctl(lab, "gA", "--list-sas").stdout).ike_sas[0].children
    assert child2.spi_in != child.spi_in and child2.packets_out >= 2
    assert len(lab.call("gB", "list_sas")["sas"]) == 2
