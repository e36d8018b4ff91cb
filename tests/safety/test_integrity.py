"""Configuration integrity: whatever interrupts a run, nothing on the appliances is lost.

Each scenario provisions the lab tunnel (outer IPv4, inner IPv6: the config that also adds
a route and may flip the port's ifdisabled flag) on the virtual lab over SSH, interrupts it
at one step (see _inject.STEPS) in one way, and then compares both ends against a snapshot
taken before: sha256 (and mode) of every file under /usr/local/etc, IPv4/IPv6 routes,
addresses, the port's ifdisabled flag, no journal entry, no lock, no SA. In-process
interruptions (Ctrl-C as KeyboardInterrupt, an exception, the SSH connection cut) and
SIGINT must be cleaned up by the run itself; SIGKILL by the NEXT run's recovery
(files.recover under the appliance lock, as the ``lab`` fixture does), whose report lines
are checked too. One lab for the module (conftest.vlab).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.safety._inject import Armed, after_then_raise, cut_mid_command, trigger, unwrap_hosts, wrap_hosts
from tests.safety._lab import PY, assert_restored, provision_and_test, reaped, terminate_and_reload, wait_for_line

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.files import recover
from ipsec_hil.lab.sharing.lock import ApplianceLock, LockHeld
from ipsec_hil.lab.provision import TunnelPlan, TunnelProvisioner
from ipsec_hil.lab.topology import TunnelConfig

pytestmark = pytest.mark.needs_root

CONFIG = TunnelConfig("ipv4", "ipv6", "aes-gcm-16", 1)
DRIVER = Path(__file__).with_name("_driver.py")


class Boom(RuntimeError):
    """An unexpected exception (a bug in a fixture or a parser) at the chosen step."""


INPROCESS = {
    "ctrl-c": (lambda: after_then_raise(KeyboardInterrupt), KeyboardInterrupt),
    "exception": (lambda: after_then_raise(lambda: Boom("injected")), Boom),
    "ssh-cut": (lambda: cut_mid_command(), LabError),
}


#: step x interruption, where the kinds differ (a command's answer lost after it ran, a
#: teardown step failing); each scenario costs 10-25 s on 2 busy cores. Ctrl-C at every
#: remote step (not only these named ones) is test_every_step.py's; here Ctrl-C at two
#: steps keeps this test's own checks (the report's "restored" lines, no PSK in the error).
IN_PROCESS_CASES = ([(s, "ctrl-c") for s in ("write", "test")]
                    + [("teardown", "exception")]
                    + [(s, "ssh-cut") for s in ("initiate", "v6route")])


@pytest.mark.parametrize(("step", "how"), IN_PROCESS_CASES, ids=[f"{s}-{h}" for s, h in IN_PROCESS_CASES])
def test_interrupted_in_process(vlab, ends, step, how):
    """Ctrl-C / an exception / the SSH connection cut at each step: the run restores everything."""
    apps, before = ends
    plan = TunnelPlan.from_topology(vlab.topo, "lab")
    action, expected = INPROCESS[how]
    armed = Armed(trigger(step, plan.local.host, plan.remote.host), action())
    wrap_hosts(apps, armed)
    psk = secrets.token_hex(16)
    log: list[str] = []
    with pytest.raises(expected) as ei:
        provision_and_test(apps, plan, CONFIG, psk, "safety-" + secrets.token_hex(3), log)
    assert armed.fired.is_set(), f"step {step} never reached"
    assert psk not in str(ei.value) and psk not in "\n".join(log)
    # the report says what was restored
    assert any("restored /usr/local/etc/swanctl/conf.d/hil-lab.conf" in line for line in log) or step == "backup", log
    unwrap_hosts(apps)
    assert_restored(vlab, apps, before)


SIGINT_STEPS = ("teardown",)
SIGKILL_STEPS = ("v6route", "teardown")


def _driver(vlab, step: str) -> subprocess.Popen:
    env = dict(os.environ, HIL_SAFETY_PSK=secrets.token_hex(16))
    return subprocess.Popen([PY, str(DRIVER), "pause", str(vlab.resolved), step], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _signalled_at(vlab, step: str, sig: signal.Signals) -> tuple[int, str]:
    """Run the provisioning driver up to ``step``, send it ``sig``; its exit code and stderr."""
    proc = _driver(vlab, step)
    with reaped(proc):
        wait_for_line(proc, f"AT {step}", 60)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.mark.parametrize("step", SIGINT_STEPS)
def test_sigint_to_the_process(vlab, ends, step):
    """SIGINT (Ctrl-C at a terminal) to a provisioning process: it cleans up before exiting."""
    apps, before = ends
    returncode, err = _signalled_at(vlab, step, signal.SIGINT)
    assert returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    assert_restored(vlab, apps, before)


@pytest.mark.parametrize("step", SIGKILL_STEPS)
def test_sigkill_then_next_run_recovers(vlab, ends, step):
    """SIGKILL at each step: the next run (lock, then files.recover) restores it and says what."""
    apps, before = ends
    _signalled_at(vlab, step, signal.SIGKILL)
    # The next run, as the lab fixture does it: take each appliance's lock (the dead run's
    # is recognised as dead: same machine, pid gone), recover, release.
    restored: dict[str, list[str]] = {}
    for name in ("dut3300", "peer3300"):
        with ApplianceLock(apps[name].host, "safety: next run", wait=5, poll=0.2):
            restored[name] = recover(apps[name].host)
    report = "\n".join(line for lines in restored.values() for line in lines)
    # what the dead run had changed is named in the report
    assert "/usr/local/etc/swanctl/conf.d/hil-lab.conf" in report, restored
    if step in ("v6route", "test"):
        assert "route fd00:b::/64" in report, restored
    if step not in ("backup",):
        assert "/usr/local/etc/swanctl/swanctl.conf" in "\n".join(restored["dut3300"]), restored
    # SAs a killed run established stay until their peers expire them (files/routes are
    # what recovery restores): terminate them as an operator would, then compare.
    terminate_and_reload(apps, TunnelPlan.from_topology(vlab.topo, "lab"), CONFIG)
    assert_restored(vlab, apps, before)


@pytest.mark.parametrize("who", ["peer3300"])
def test_appliance_rebooted_mid_test(vlab, ends, who):
    """An appliance rebooted while the tunnel is up: teardown still restores both ends."""
    apps, before = ends
    plan = TunnelPlan.from_topology(vlab.topo, "lab")
    prov = TunnelProvisioner(apps, plan, CONFIG, secrets.token_hex(16), run_id="safety-reboot", initiate_timeout=10)
    prov.up()
    try:
        if who == "peer3300":
            apps[who].reboot(wait=True, timeout=60, poll=0.5)
        else:
            r = vlab.twin("reboot", who)
            assert r.returncode == 0, r.stderr
    finally:
        done = prov.down()
    assert any("restored" in line for line in done), done
    assert_restored(vlab, apps, before)


def _hold(vlab, wait: float, seconds: float | str, psk: str) -> subprocess.Popen:
    env = dict(os.environ, HIL_SAFETY_PSK=psk)
    return subprocess.Popen([PY, str(DRIVER), "hold", str(vlab.resolved), str(wait), str(seconds)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_two_runs_never_interleave(vlab, ends):
    """A second run on the same appliances refuses naming the holder, or waits its turn."""
    apps, before = ends
    psk = secrets.token_hex(16)
    # the first holds until told: a fixed hold (3 s) ended before the second run had even
    # started on a machine at load 8, and the "refused" run took the lock (CI, 12-06)
    first = _hold(vlab, 0, "stdin", psk)
    procs = [first]
    try:
        up_a, _ = wait_for_line(first, "UP ", 60)
        # refuses at once, naming who holds it
        refused = _hold(vlab, 0, 0, psk)
        procs.append(refused)
        line, _ = wait_for_line(refused, "REFUSED ", 60)
        refused.wait(timeout=30)
        assert refused.returncode == 3
        assert "safety driver hold" in line and f"pid {first.pid}" in line and "/var/db/ipsec-hil/run.lock" in line, line
        # a recovery (the next run's lab fixture) must not touch the live run's journal
        with pytest.raises(LockHeld):
            ApplianceLock(apps["dut3300"].host, "safety: recovery", wait=0).acquire()
        assert (vlab.root("dut3300") / "usr/local/etc/swanctl/conf.d/hil-lab.conf").exists()
        # waits, and only starts once the first is down
        waiter = _hold(vlab, 60, 0, psk)
        procs.append(waiter)
        time.sleep(0.5)  # the waiter is waiting now, or soon: either way it must start after the first is down
        first.stdin.write("release\n")
        first.stdin.flush()
        up_b, _ = wait_for_line(waiter, "UP ", 90)
        down_a, _ = wait_for_line(first, "DOWN ", 60)
        assert float(up_b.split()[1]) > float(down_a.split()[1]), (down_a, up_b)
        for p in (first, waiter):
            p.wait(timeout=60)
            assert p.returncode == 0, p.stderr.read()[-1500:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert_restored(vlab, apps, before)
