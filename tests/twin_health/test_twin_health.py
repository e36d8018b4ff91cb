"""The emulated appliance's health commands move with the real engine's traffic (issue 13).

A MiniLab (ipsec_hil_twin.engine.minilab) carries real ESP through gwA (octep: its SA zone and
malloc type exist) and the FreeBSD commands run against gwA's host dir as the SSH
shell runs them.  Every output goes through the suite's parsers (ipsec_hil.lab.parsers,
built on tests/golden), so a format drift fails here, not on the measurement page.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time

import pytest

from ipsec_hil.lab.parsers import boottime, dmesg, netstat_m, vmstat_m, vmstat_z
from ipsec_hil_twin.machinery.runtime import HOST_DIR_ENV, HostDir, write_json_atomic

pytestmark = pytest.mark.needs_root
BOOT = 1764448000.25


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2")
    minilab = pytest.importorskip("ipsec_hil_twin.engine.minilab")
    lab = minilab.MiniLab(driver={"gA": "octep", "gB": "npuep"}, base=tmp_path_factory.mktemp("health"))
    try:
        lab.build(engines=False)
        hd = HostDir(lab.host_dir("gA"))
        mod = hd.rootpath("/boot/modules/octep.ko")
        mod.parent.mkdir(parents=True, exist_ok=True)
        mod.write_bytes(b"\x7fELF octep for the health test" * 100)
        rec = {"name": "octep.ko", "file": "/boot/modules/octep.ko",
               "md5": hashlib.md5(mod.read_bytes()).hexdigest(), "size": mod.stat().st_size}
        write_json_atomic(hd.state_json, {
            "boot_time": BOOT, "driver": dict(rec, loaded=True, driver="octep"),
            "modules": [{"name": "kernel", "file": "/boot/kernel/kernel", "size": 4096},
                        {"name": "ipsec.ko", "file": "/boot/kernel/ipsec.ko", "size": 2048}, rec]})
        for gw in ("gA", "gB"):
            lab.start_engine(gw)
        lab.call("gA", "set_driver", loaded=True, md5=rec["md5"], name="octep")
        lab.tunnel("aes-gcm-16", "ipv4", v6_routes=False)
        yield lab
    finally:
        lab.close()


def fbsd(lab, *argv: str) -> str:
    """One FreeBSD command of gwA, run as its bin/ wrapper runs it (python -S, TWIN_HOST_DIR)."""
    env = dict(os.environ, **{HOST_DIR_ENV: str(lab.host_dir("gA"))})
    r = subprocess.run([sys.executable, "-m", f"ipsec_hil_twin.fbsd.{argv[0]}", *argv[1:]], capture_output=True,
                       text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def ping(lab, count: int) -> None:
    r = lab.run("hA", ["ping", "-q", "-c", str(count), "-i", "0.01", "-W", "2", "203.0.113.10"], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_form_parses_with_the_suites_parsers(lab):
    for argv in (("netstat", "-m"), ("netstat", "-m", "--libxo", "json")):
        stats = netstat_m.parse(fbsd(lab, *argv))
        assert stats.mbuf_current >= 257 and stats.denied == 0
    for argv in (("vmstat", "-z"), ("vmstat", "-z", "--libxo", "json")):
        zones = vmstat_z.parse(fbsd(lab, *argv)).by_name()
        assert {"mbuf", "mbuf_packet", "octep_sa", "octep_pkt"} <= set(zones)
        assert zones["octep_sa"].used == 2  # the tunnel's two offloaded associations
    for argv in (("vmstat", "-m"), ("vmstat", "-m", "--libxo", "json")):
        types = vmstat_m.parse(fbsd(lab, *argv)).matching(("octep",))
        assert types["octep_sa"].in_use == 2 and types["octep"].in_use > 0
    assert boottime.parse(fbsd(lab, "sysctl", "-n", "kern.boottime")).instant == (1764448000, 250000)
    dmesg.parse(fbsd(lab, "dmesg"))


def test_mbufs_move_with_traffic_and_return_to_the_baseline(lab):
    idle = netstat_m.parse(fbsd(lab, "netstat", "-m", "--libxo", "json"))
    pkt_before = vmstat_z.parse(fbsd(lab, "vmstat", "-z")).by_name()["octep_pkt"].requests
    busy = lab.popen("hA", ["ping", "-q", "-c", "400", "-i", "0.005", "203.0.113.10"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        during = None
        while busy.poll() is None:  # sample while the stream runs: an association is busy
            sample = netstat_m.parse(fbsd(lab, "netstat", "-m", "--libxo", "json"))
            if sample.mbuf_current > idle.mbuf_current:
                during = sample
                break
    finally:
        busy.wait(timeout=60)
    assert during is not None, "mbufs in use never rose while traffic ran"
    deadline = time.monotonic() + 10  # the model's busy window is ACTIVE_SECONDS of whole-second last_use
    after = netstat_m.parse(fbsd(lab, "netstat", "-m", "--libxo", "json"))
    while after.mbuf_current != idle.mbuf_current and time.monotonic() < deadline:
        after = netstat_m.parse(fbsd(lab, "netstat", "-m", "--libxo", "json"))
    assert after.mbuf_current == idle.mbuf_current and after.cluster_current == idle.cluster_current
    assert vmstat_z.parse(fbsd(lab, "vmstat", "-z")).by_name()["octep_pkt"].requests > pkt_before


def test_mbuf_leak_stays_after_traffic(lab):
    lab.set_faults("gA", {"mbuf_leak": {"n": 3}})
    try:
        before = netstat_m.parse(fbsd(lab, "netstat", "-m")).mbuf_current  # the leak's base is taken here
        ping(lab, 20)
        after = netstat_m.parse(fbsd(lab, "netstat", "-m")).mbuf_current
        # 20 requests out and 20 replies in, 3 mbufs each, possibly plus in-flight packets
        assert after - before >= 3 * 40
    finally:
        lab.set_faults("gA", {})
    still = netstat_m.parse(fbsd(lab, "netstat", "-m")).mbuf_current
    assert still >= before + 3 * 40, "leaked mbufs must stay leaked until a reboot"


def test_dmesg_error_under_traffic_logs_driver_errors_and_one_lor(lab):
    base = dmesg.parse(fbsd(lab, "dmesg"))
    lab.set_faults("gA", {"dmesg_error_under_traffic": {"n": 10}})
    try:
        fbsd(lab, "dmesg")
        ping(lab, 30)
        added = dmesg.added_since(base, dmesg.parse(fbsd(lab, "dmesg"))).added
    finally:
        lab.set_faults("gA", {})
    errors = [line for line in added if line.startswith("octep0: ") and "error" in line]
    assert len(errors) >= 6, added  # 60 packets through the driver, one line per 10
    assert sum(1 for line in added if line == "lock order reversal:") == 1
