"""The CLI lifecycle: detached supervisor, crash cleanup, two labs at once, foreground."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipsec_hil_twin.machinery import netns as tn
from ipsec_hil_twin.lifecycle.lab import alive
from ipsec_hil_twin.machinery.runtime import RunDir, read_json

from .conftest import needs_root

pytestmark = needs_root


def twin(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ipsec_hil_twin", *args], capture_output=True, text=True,
                          timeout=timeout)


def up(topology, prefix: str, *extra: str) -> dict:
    r = twin("up", str(topology), "--prefix", prefix, *extra)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1, r.stdout
    out = json.loads(lines[0])
    assert set(out) == {"resolved", "prefix", "run_dir"} and out["prefix"] == prefix
    return out


def recorded_pids(info: dict) -> list[dict]:
    recs = [info["supervisor"]]
    for h in info["hosts"].values():
        recs += list((h.get("components") or {}).values())
    return recs


def assert_gone(prefix: str, run_dir: str, recs: list[dict]) -> None:
    assert tn.list_namespaces(prefix) == [], tn.list_namespaces(prefix)
    assert tn.root_links(prefix) == []
    assert not os.path.exists(run_dir)
    deadline = time.monotonic() + 3
    while any(alive(r) for r in recs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r for r in recs if alive(r)] == []


def test_sigkill_supervisor_then_down_all_dead(small_topology, fresh_prefix):
    out = up(small_topology, fresh_prefix)
    info = read_json(RunDir(out["run_dir"]).lab_json)
    assert info["state"] == "up" and alive(info["supervisor"])
    assert not alive(info["starter"])  # `up` returned: the starter is gone, the lab is not
    comps = [r for r in recorded_pids(info)[1:]]
    assert all(alive(r) for r in comps)
    # each names itself (ipsec_hil_twin.machinery.labprocs.name_process): ps, top and tools/cpu-profile tell them apart
    names = {h: {c: Path(f"/proc/{r['pid']}/comm").read_text().strip() for c, r in (v.get("components") or {}).items()}
             for h, v in info["hosts"].items()}
    assert Path(f"/proc/{info['supervisor']['pid']}/comm").read_text().strip() == "twin-supervisor"
    expected = {"engine": "twin-engine", "ike": "twin-ike", "sshd": "twin-sshd"}
    assert {h: per for h, per in names.items() if per} == {
        h: {c: expected.get(c, f"? {c}") for c in per} for h, per in names.items() if per}, names
    assert sum(len(per) for per in names.values()) >= 6, names
    os.kill(info["supervisor"]["pid"], signal.SIGKILL)
    # children die with their supervisor (PR_SET_PDEATHSIG)
    deadline = time.monotonic() + 5
    while any(alive(r) for r in comps) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r for r in comps if alive(r)] == []
    assert tn.list_namespaces(fresh_prefix)  # the namespaces are what a crash leaves
    r = twin("down", "--all-dead")
    assert r.returncode == 0, r.stderr
    removed = json.loads(r.stdout)["removed"]
    if fresh_prefix not in removed:
        # Every `twin up` runs the same cleanup_dead (ipsec_hil_twin.lifecycle.supervisor.spawn) first: under
        # xdist the other worker's lab start can tear this crashed lab down between the
        # SIGKILL and this `down` (CI: removed == []). Whoever ran it, nothing may remain --
        # and if nobody did, assert_gone fails.
        print(f"\n{fresh_prefix} was removed by a concurrent cleanup_dead before `down --all-dead` ({removed})")
        deadline = time.monotonic() + 5  # that cleaner may still be removing the run dir (its last step)
        while os.path.exists(out["run_dir"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert_gone(fresh_prefix, out["run_dir"], recorded_pids(info))


def test_two_labs_and_up_cleans_dead(small_topology, fresh_prefix):
    from ipsec_hil_twin.lifecycle.lab import _free_prefix
    second = _free_prefix()
    third = _free_prefix()
    try:
        a = up(small_topology, fresh_prefix, "--components", "netns")
        b = up(small_topology, second, "--components", "netns")
        assert tn.list_namespaces(fresh_prefix) and tn.list_namespaces(second)
        st = json.loads(twin("status", "--prefix", second).stdout)
        assert st["supervisor_alive"] and all(st["namespaces"].values())
        # a crashed lab is removed by the next `up`; the live one is left alone
        info_a = read_json(RunDir(a["run_dir"]).lab_json)
        os.kill(info_a["supervisor"]["pid"], signal.SIGKILL)
        time.sleep(0.2)
        c = up(small_topology, third, "--components", "netns")
        assert_gone(fresh_prefix, a["run_dir"], recorded_pids(info_a))
        assert tn.list_namespaces(second) and tn.list_namespaces(third)
        for p, run in ((second, b["run_dir"]), (third, c["run_dir"])):
            info = read_json(RunDir(run).lab_json)
            r = twin("down", "--prefix", p)
            assert r.returncode == 0, r.stderr
            assert_gone(p, run, recorded_pids(info))
    finally:
        for p in (second, third):
            twin("down", "--prefix", p)


def test_foreground_ctrl_c(small_topology, fresh_prefix):
    proc = subprocess.Popen([sys.executable, "-m", "ipsec_hil_twin", "up", str(small_topology), "--prefix",
                             fresh_prefix, "--foreground", "--components", "netns"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out = json.loads(proc.stdout.readline())
        assert out["prefix"] == fresh_prefix and tn.list_namespaces(fresh_prefix)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        assert_gone(fresh_prefix, out["run_dir"], [])
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_errors(small_topology, fresh_prefix):
    r = twin("down", "--prefix", fresh_prefix)
    assert r.returncode == 1 and "no lab there" in r.stderr
    r = twin("up", str(small_topology), "--prefix", "nothex")
    assert r.returncode == 1 and "4 lowercase hex" in r.stderr
    r = twin("up", "/nonexistent.yaml", "--prefix", fresh_prefix, "--components", "netns")
    assert r.returncode == 1 and "nonexistent.yaml" in r.stderr
    assert tn.list_namespaces(fresh_prefix) == []
    assert not RunDir.for_prefix(fresh_prefix).path.exists()


def test_fault_cli_round_trip(small_topology, fresh_prefix):
    out = up(small_topology, fresh_prefix, "--components", "netns")
    faults_json = RunDir(out["run_dir"]).host_dir("dut3300").faults_json
    try:
        r = twin("fault", "--prefix", fresh_prefix, "dut3300", "corrupt_icv", "every=7")
        assert r.returncode == 0, r.stderr
        assert read_json(faults_json) == {"corrupt_icv": {"every": 7}}
        r = twin("fault", "--run-dir", out["run_dir"], "--list", "dut3300")
        assert r.returncode == 0 and "every=7" in r.stdout and "peer_unreachable" in r.stdout
        r = twin("fault", "--prefix", fresh_prefix, "dut3300", "corrupt_icv", "--off")
        assert r.returncode == 0, r.stderr
        assert read_json(faults_json) == {}
        r = twin("fault", "--prefix", fresh_prefix, "dut3300", "corrupt_iv")
        assert r.returncode == 1 and "unknown fault 'corrupt_iv'; known:" in r.stderr
        r = twin("fault", "--prefix", fresh_prefix, "dut3300", "replay", "evry=3")
        assert r.returncode == 1 and "unknown parameter(s) evry" in r.stderr
        r = twin("fault", "--prefix", fresh_prefix, "bench", "replay")
        assert r.returncode == 1 and "not an appliance" in r.stderr
        assert read_json(faults_json) == {}
    finally:
        twin("down", "--prefix", fresh_prefix)


def test_owner_exit_tears_the_lab_down(small_topology, fresh_prefix):
    """`--owner-pid` (what the plugin passes): when that process ends, so does the lab."""
    owner = subprocess.Popen(["sleep", "60"])
    try:
        out = up(small_topology, fresh_prefix, "--components", "netns", "--owner-pid", str(owner.pid))
        info = read_json(RunDir(out["run_dir"]).lab_json)
        assert info["owner"]["pid"] == owner.pid
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 15
        while (tn.list_namespaces(fresh_prefix) or os.path.exists(out["run_dir"])) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert_gone(fresh_prefix, out["run_dir"], recorded_pids(info))
    finally:
        if owner.poll() is None:
            owner.kill()


def test_starter_killed_during_up_leaves_nothing(small_topology, fresh_prefix):
    """The starter dies while the supervisor builds: the lab is never handed to anyone,
    so the supervisor removes it instead of serving it forever."""
    run = RunDir.for_prefix(fresh_prefix)
    starter = subprocess.Popen([sys.executable, "-m", "ipsec_hil_twin", "up", str(small_topology),
                                "--prefix", fresh_prefix],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not run.lab_json.exists():
        assert time.monotonic() < deadline, "the supervisor never started building"
        time.sleep(0.02)
    info = read_json(run.lab_json)
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 40
    while (alive(info["supervisor"]) or run.path.exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    info = read_json(run.lab_json, default=info)
    assert_gone(fresh_prefix, str(run.path), recorded_pids(info))
