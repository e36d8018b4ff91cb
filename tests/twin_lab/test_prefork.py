"""Components forked warm (ipsec_hil_twin.machinery.prefork): the same processes `ip netns exec python -m` made.

Why these tests: a forked child inherits everything the supervisor has -- descriptors,
signal handlers, environment, namespaces, buffered output -- where an exec'd one started
clean. So each thing a started component had is checked on a pre-forked one: in a real
lab through the CLI (namespace, mount view, session, descriptors, signals, log), and in a
bare prefork of a test module (argv, environment, exit status, unbuffered output, a
descriptor the parent had open, a slot never launched).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from ipsec_hil_twin.machinery.runtime import RunDir, read_json

from .conftest import needs_root
from .test_lifecycle import twin, up

pytestmark = needs_root

REPO = Path(__file__).resolve().parents[2]
FRESH_SIGIGN = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
"""What a fresh interpreter ignores: SIGPIPE and SIGXFSZ, nothing else."""


def _proc_status(pid: int) -> dict[str, str]:
    return {k: v.strip() for k, _, v in (l.partition(":") for l in Path(f"/proc/{pid}/status").read_text().splitlines())}


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def test_a_labs_components_are_forked_warm_and_look_started(small_topology, fresh_prefix):
    out = up(small_topology, fresh_prefix)
    try:
        run = RunDir(out["run_dir"])
        info = read_json(run.lab_json)
        sup = info["supervisor"]["pid"]
        host_net = os.readlink("/proc/self/ns/net")
        host_mnt = os.readlink("/proc/self/ns/mnt")
        seen = []
        for host, h in info["hosts"].items():
            for comp, rec in (h.get("components") or {}).items():
                pid = rec["pid"]
                seen.append(comp)
                st, status = _stat(pid), _proc_status(pid)
                where = f"{host} {comp} (pid {pid})"
                assert int(st[1]) == sup, f"{where}: parent {st[1]}, not the supervisor {sup}"
                assert int(st[3]) == pid, f"{where}: session {st[3]}: not a session leader"
                assert status["Name"] == f"twin-{comp}", f"{where}: named {status['Name']}"
                assert int(status["SigIgn"], 16) == FRESH_SIGIGN, f"{where}: SigIgn {status['SigIgn']}"
                assert int(status["SigBlk"], 16) == 0, f"{where}: SigBlk {status['SigBlk']}"
                fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
                log = run.host_dir(host).log_dir / f"{comp}.log"
                assert (fds[0], fds[1], fds[2]) == (os.devnull, str(log), str(log)), f"{where}: {fds}"
                assert str(run.supervisor_log) not in fds.values(), f"{where} holds the supervisor's log: {fds}"
                assert "start forked warm: " in log.read_text(), f"{where}: {log.read_text()[-500:]}"
                net, mnt = os.readlink(f"/proc/{pid}/ns/net"), os.readlink(f"/proc/{pid}/ns/mnt")
                if comp == "sshd":  # on 127.0.0.1, as before: no namespace of its own
                    assert (net, mnt) == (host_net, host_mnt), where
                    continue
                ns = h["netns"]
                assert net == f"net:[{os.stat(f'/run/netns/{ns}').st_ino}]", f"{where}: {net}, not {ns}'s"
                assert mnt != host_mnt, f"{where}: the host's mount namespace"
                ports = set(os.listdir(f"/proc/{pid}/root/sys/class/net"))  # its /sys, seen through its root
                assert set(h["ports"]) <= ports, f"{where}: /sys/class/net has {sorted(ports)}"
        assert sorted(set(seen)) == ["engine", "ike", "sshd"], seen
    finally:
        r = twin("down", "--prefix", fresh_prefix)
        assert r.returncode == 0, r.stderr


SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    from ipsec_hil_twin.machinery.prefork import Launch, prefork
    leak = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leak, True)  # open in the parent at the fork, and not close-on-exec
    slots = prefork(2, ["tests.twin_lab.warm_target"])
    log = sys.argv[1]
    proc = slots[0].launch(Launch("tests.twin_lab.warm_target", ["7", "x y"],
                                  {"WARM_MARK": "m1", "PYTHONUNBUFFERED": "1"}, log))
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    idle = slots[1].pid
    slots[1].cancel()
    try:
        os.kill(idle, 0)
        idle_gone = False
    except ProcessLookupError:
        idle_gone = True
    print(json.dumps({"status": proc.returncode, "leak": leak, "idle_gone": idle_gone}))
''')


def test_a_launched_child_runs_the_module_as_main_and_an_idle_one_goes(tmp_path):
    log = tmp_path / "target.log"
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], capture_output=True, text=True, timeout=60,
                       cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["status"] == 7 and res["idle_gone"], res
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and lines[1] == "to stderr", f"stdout not unbuffered or output lost: {lines}"
    got = json.loads(lines[0])
    assert got["argv"] == ["7", "x y"] and got["name"] == "__main__" and got["mark"] == "m1", got
    assert got["only_env"], "the parent's environment leaked into the launch's"
    assert str(res["leak"]) not in got["fds"], f"the parent's descriptor {res['leak']} reached the child: {got['fds']}"
    assert sorted(got["fds"], key=int)[:3] == ["0", "1", "2"] and got["fds"]["0"] == os.devnull, got["fds"]
    assert got["sid"] == got["pid"], got
    assert int(got["SigIgn"], 16) == FRESH_SIGIGN and int(got["SigBlk"], 16) == 0, got
