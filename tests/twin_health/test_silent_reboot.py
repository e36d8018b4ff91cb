"""Fault `silent_reboot`: the lab's supervisor reboots the appliance by itself, once.

The suite sees it as FreeBSD shows it: `sysctl -n kern.boottime` changes (parsed with
the suite's parser), and the fault switches itself off so the appliance stays up after.
"""
from __future__ import annotations

import secrets
import subprocess
import time

import pytest

from ipsec_hil.lab.parsers import boottime
from ipsec_hil_twin.faults import active_faults, set_fault
from ipsec_hil_twin.lifecycle.lab import available_components, control_request
from ipsec_hil_twin.machinery.runtime import RunDir, read_json

from tests.twin_lab.conftest import needs_root
from tests.twin_lab.test_lifecycle import twin, up
from tests.twin_lab.test_reboot import ssh_run

pytestmark = [
    needs_root,
    pytest.mark.skipif(not {"engine", "sshd"} <= set(available_components()),
                       reason="needs ipsec_hil_twin.engine and ipsec_hil_twin.shell.sshd"),
]


def install_pair(run: RunDir) -> None:
    """One SA pair dut3300 <-> peer3300 over wan10g for the LANs, straight into the engines."""
    keys = [secrets.token_hex(36), secrets.token_hex(36)]
    spis = [0x1000 | secrets.randbits(24), 0x1000 | secrets.randbits(24)]
    a, b = ("192.0.2.1", "198.51.100.0/26"), ("192.0.2.2", "198.51.100.64/26")
    for host, me, peer in (("dut3300", a, b), ("peer3300", b, a)):
        mine = 0 if host == "dut3300" else 1
        for direction, i, src, dst, lts, rts in (("out", mine, me[0], peer[0], me[1], peer[1]),
                                                 ("in", 1 - mine, peer[0], me[0], me[1], peer[1])):
            sa = {"spi": spis[i], "direction": direction, "src": src, "dst": dst, "cipher": "aes-gcm-16",
                  "enc_key": keys[i], "local_ts": [lts], "remote_ts": [rts]}
            assert control_request(run.host_dir(host).engine_sock, {"op": "add_sa", "sa": sa})["ok"]


def test_silent_reboot_changes_boottime_once(small_topology, fresh_prefix):
    out = up(small_topology, fresh_prefix)
    run = RunDir(out["run_dir"])
    try:
        hd = run.host_dir("dut3300")
        port = read_json(run.lab_json)["hosts"]["dut3300"]["ssh_port"]
        status, text = ssh_run(run, port, "sysctl -n kern.boottime")
        before = boottime.parse(text)
        install_pair(run)
        set_fault(hd, "silent_reboot", packets=5)
        assert read_json(hd.state_json).get("boot_id") == 1  # no traffic yet: no reboot
        subprocess.run(["ip", "netns", "exec", f"{fresh_prefix}-dut3300", "ping", "-c", "20", "-i", "0.2",
                        "-W", "1", "-I", "198.51.100.1", "198.51.100.65"], capture_output=True, timeout=60)
        deadline = time.monotonic() + 60
        while read_json(hd.state_json).get("boot_id") != 2 or \
                read_json(run.lab_json)["hosts"]["dut3300"]["state"] != "up":
            assert time.monotonic() < deadline, "dut3300 did not reboot by itself"
            time.sleep(0.2)
        status, text = ssh_run(run, port, "sysctl -n kern.boottime")
        assert status == 0 and boottime.parse(text).instant != before.instant
        assert "silent_reboot" not in active_faults(hd)  # once: the fault switched itself off
        assert read_json(run.host_dir("peer3300").state_json)["boot_id"] == 1
    finally:
        twin("down", "--prefix", fresh_prefix)
