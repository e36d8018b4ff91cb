"""Interruption at every remote step, not at hand-picked ones (issue 16).

A recording pass runs the whole provisioning of one configuration -- bring-up, a test's
command, teardown -- through :class:`safety._inject.InterruptingHost` with a trigger that
never fires and names every call the library sends to either end (``run``, a file written,
read, tested, removed or renamed), by what it is: host, operation, text with the run id
replaced, n-th identical call (_inject.StepNames). Then each named step is interrupted in
turn, after the command ran (its answer lost: the hardest case for a rollback), and both
ends must be as before: every file under /usr/local/etc with its mode, routes, addresses,
``route get`` answers, the port's ifdisabled flag, the connections charon holds
(``swanctl --list-conns``), no journal or lock, no SA (_lab.restored_differences).

How much runs, stated (each scenario is a bring-up and teardown, 3-6 s on this lab):
- the lab tunnel with inner IPv6 (outer IPv4, AES-GCM, one child; the configuration that
  also adds routes): Ctrl-C at EVERY step;
- the same configuration, the SSH connection cut mid-command and SIGKILL of the run's
  process (restored by the next run's recovery under the lock): a seeded sample of
  ``SAMPLE`` steps each -- every step with ``SAFETY_EXHAUSTIVE=1``;
- two other configurations of the same tunnel (outer IPv6 / inner IPv4 AES-CBC; outer and
  inner IPv4 AES-GCM): Ctrl-C at a seeded sample of ``SAMPLE`` of their own steps.
Each test prints its counts (steps, scenarios, seconds). A scenario that fails is named
with its step; the others still run, so one run shows every broken step at once.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from safety._inject import (STEPS, Armed, Step, after_then_raise, at_step, cut_mid_command, describe, recorder,
                            trigger, unwrap_hosts, wrap_hosts)
from safety._lab import PY, provision_and_test, reaped, restored_differences, terminate_and_reload, wait_for_line

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.files import recover
from ipsec_hil.lab.sharing.lock import ApplianceLock
from ipsec_hil.lab.provision import TunnelPlan
from ipsec_hil.lab.topology import TunnelConfig

pytestmark = pytest.mark.needs_root

#: the exhaustive configuration: test_integrity.py's
CONFIG = TunnelConfig("ipv4", "ipv6", "aes-gcm-16", 1)
#: sampled configurations
OTHERS = (TunnelConfig("ipv6", "ipv4", "aes-cbc-hmac-sha256", 1), TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 1))
RUN_ID = "safety-every"
SAMPLE = 5
SEED = 16
EXHAUSTIVE = os.environ.get("SAFETY_EXHAUSTIVE") == "1"
DRIVER = os.path.join(os.path.dirname(__file__), "_driver.py")


def _provision(apps: dict, plan: TunnelPlan, config: TunnelConfig) -> None:
    provision_and_test(apps, plan, config, secrets.token_hex(16), RUN_ID, [])


def _record(apps: dict, plan: TunnelPlan, config: TunnelConfig) -> list[Step]:
    steps: list[Step] = []
    wrap_hosts(apps, Armed(recorder(RUN_ID, steps), lambda *a: None))
    try:
        _provision(apps, plan, config)
    finally:
        unwrap_hosts(apps)
    return steps


def _sample(steps: list[Step], k: int) -> list[Step]:
    return steps if EXHAUSTIVE or len(steps) <= k else sorted(random.Random(SEED).sample(steps, k), key=steps.index)


def _next_run(apps: dict, plan: TunnelPlan, config: TunnelConfig) -> list[str]:
    """What the next run does before its tests (each end's lock, then files.recover), and
    then what an operator does about the SAs; the recovery's report lines."""
    report: list[str] = []
    for name in ("dut3300", "peer3300"):
        with ApplianceLock(apps[name].host, "safety: next run", wait=5, poll=0.2):
            report += recover(apps[name].host)
    terminate_and_reload(apps, plan, config)
    return report


def _in_process(vlab, apps: dict, before: dict, plan: TunnelPlan, config: TunnelConfig, steps: list[Step],
                action: Callable[[], Any], expected: type[BaseException], *,
                may_complete: bool = False) -> tuple[list[str], float]:
    """Interrupt a run at each of ``steps``; (the failures, seconds). ``may_complete``: the
    library may survive the interruption (a lost connection is reconnected and a teardown
    step done again), so a run that completes is no failure -- it must restore all the same."""
    failures: list[str] = []
    t0 = time.monotonic()
    for step in steps:
        match = at_step(RUN_ID, step)
        armed = Armed(match, action())
        wrap_hosts(apps, armed)
        try:
            _provision(apps, plan, config)
            outcome = "" if may_complete else "the run was not interrupted"
        except expected:
            outcome = ""
        except BaseException as exc:  # noqa: BLE001 -- named in the failure, the next step still runs
            outcome = f"raised {type(exc).__name__}: {str(exc)[:200]}"
        finally:
            unwrap_hosts(apps)
        if not armed.fired.is_set():
            outcome = f"the step was never reached (the recording and this run differ; {match.nearest()})"
        diffs = restored_differences(vlab, apps, before)
        if outcome or diffs:
            failures.append(f"{describe(step)}: {'; '.join(filter(None, [outcome, *diffs]))}")
            print(f"NOT RESTORED {failures[-1]}", flush=True)  # seen at once with -s, in a long run
            _next_run(apps, plan, config)  # so one broken step does not fail every later one
    return failures, time.monotonic() - t0


def _report(what: str, steps: list[Step], total: int, failures: list[str], seconds: float) -> None:
    print(f"\n{what}: {len(steps)} scenarios of {total} steps in {seconds:.1f} s "
          f"({seconds / max(1, len(steps)):.1f} s each), {len(failures)} not restored")
    assert not failures, f"{what}: not restored after {len(failures)} of {len(steps)} steps:\n" + "\n".join(failures)


@pytest.fixture(scope="module")
def recorded(vlab) -> dict:
    """Each configuration's steps, recorded once per module: {config: [Step]}."""
    from ipsec_hil.fixtures import build_appliances

    apps, hosts = build_appliances(vlab.topo)
    plan = TunnelPlan.from_topology(vlab.topo, "lab")
    try:
        return {c: _record(apps, plan, c) for c in (CONFIG, *OTHERS)}
    finally:
        for h in hosts.values():
            h.close()


def test_every_step_is_enumerated_and_stable(vlab, ends, recorded):
    """The recording names every call once, a second recording names the same steps, and
    the hand-picked steps of test_integrity.py are among them."""
    apps, before = ends
    plan = TunnelPlan.from_topology(vlab.topo, "lab")
    steps = recorded[CONFIG]
    again = _record(apps, plan, CONFIG)
    assert len(set(steps)) == len(steps), "a step name is not unique"
    assert sorted(again) == sorted(steps), (
        f"a second recording differs: only first {sorted(set(steps) - set(again))[:5]}, "
        f"only second {sorted(set(again) - set(steps))[:5]}")
    for name in STEPS:
        hit = trigger(name, plan.local.host, plan.remote.host)
        assert any(hit(h, op, text) for h, op, text, _ in steps), f"hand-picked step {name!r} not among the recorded"
    ops = sorted({op for _, op, _, _ in steps})
    print(f"\n{CONFIG.id}: {len(steps)} remote steps ({', '.join(f'{o} {sum(s[1] == o for s in steps)}' for o in ops)}); "
          + "; ".join(f"{c.id}: {len(recorded[c])}" for c in OTHERS))
    restored = restored_differences(vlab, apps, before)
    assert not restored, restored


def test_ctrl_c_at_every_step(vlab, ends, recorded):
    apps, before = ends
    plan = TunnelPlan.from_topology(vlab.topo, "lab")
    steps = recorded[CONFIG]
    failures, seconds = _in_process(vlab, apps, before, plan, CONFIG, steps,
                                    lambda: after_then_raise(KeyboardInterrupt), KeyboardInterrupt)
    _report(f"Ctrl-C, {CONFIG.id}", steps, len(steps), failures, seconds)


def test_ssh_cut_at_sampled_steps(vlab, ends, recorded):
    apps, before = ends
    plan = TunnelPlan.from_topology(vlab.topo, "lab")
    steps = _sample(recorded[CONFIG], SAMPLE)
    failures, seconds = _in_process(vlab, apps, before, plan, CONFIG, steps,
                                    lambda: cut_mid_command(delay=0.2, hold=0.8), LabError, may_complete=True)
    _report(f"SSH cut, {CONFIG.id}{'' if EXHAUSTIVE else f' (sample, seed {SEED})'}", steps,
            len(recorded[CONFIG]), failures, seconds)


def test_sigkill_at_sampled_steps_then_next_run_recovers(vlab, ends, recorded):
    """The run's own process killed right after the step's command ran; the next run (the
    lock, then files.recover, as the lab fixture does) restores; then SAs as an operator."""
    apps, before = ends
    plan = TunnelPlan.from_topology(vlab.topo, "lab")
    steps = _sample(recorded[CONFIG], SAMPLE)
    failures: list[str] = []
    t0 = time.monotonic()
    for step in steps:
        env = dict(os.environ, HIL_SAFETY_PSK=secrets.token_hex(16))
        proc = subprocess.Popen([PY, DRIVER, "pause-at", str(vlab.resolved), RUN_ID, repr(step)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        with reaped(proc):
            try:
                wait_for_line(proc, "AT ", 60)
            except AssertionError as exc:
                proc.kill()
                failures.append(f"{describe(step)}: the driver never reached it ({exc}); "
                                f"stderr {proc.stderr.read()[-300:]!r}")
                continue
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        _next_run(apps, plan, CONFIG)
        diffs = restored_differences(vlab, apps, before)
        if diffs:
            failures.append(f"{describe(step)}: {'; '.join(diffs)}")
            print(f"NOT RESTORED {failures[-1]}", flush=True)
    _report(f"SIGKILL + next run, {CONFIG.id}{'' if EXHAUSTIVE else f' (sample, seed {SEED})'}", steps,
            len(recorded[CONFIG]), failures, time.monotonic() - t0)


@pytest.mark.parametrize("config", OTHERS, ids=[c.id for c in OTHERS])
def test_ctrl_c_at_sampled_steps_of_other_configurations(vlab, ends, recorded, config):
    apps, before = ends
    plan = TunnelPlan.from_topology(vlab.topo, "lab")
    steps = _sample(recorded[config], SAMPLE)
    failures, seconds = _in_process(vlab, apps, before, plan, config, steps,
                                    lambda: after_then_raise(KeyboardInterrupt), KeyboardInterrupt)
    _report(f"Ctrl-C, {config.id}{'' if EXHAUSTIVE else f' (sample, seed {SEED})'}", steps,
            len(recorded[config]), failures, seconds)
