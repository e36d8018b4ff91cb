"""A provisioning run in its own process, for the signal scenarios and the two-run test.

``python tests/safety/_driver.py pause RESOLVED STEP``: provisions the lab tunnel (inner
IPv6) with the appliance lock held, like the ``tunnel`` fixture; at STEP (see _inject) it
lets the command run, prints ``AT STEP`` and sleeps, so the parent can deliver SIGINT or
SIGKILL at a known point. Without a signal it tears down and prints ``DONE``.

``python tests/safety/_driver.py pause-at RESOLVED RUN_ID STEP CONFIG MODULE RUN_DIR``: a
whole run as _lab.scenario makes it (leases, the DUT's driver swapped for MODULE, the
tunnel of configuration CONFIG -- its id, e.g. ``v6in4-gcm`` -- a test body under the twin
fault of the lab in RUN_DIR), paused at the step named STEP (``repr`` of an _inject.Step
tuple, from a recording with run id RUN_ID; RUN_ID is its own run id so the names match:
_every_step.py).

``python tests/safety/_driver.py hold RESOLVED WAIT SECONDS``: lock both ends (waiting up
to WAIT s), bring the tunnel up, print ``UP <epoch>``, hold it SECONDS (``stdin``: until a
line or end of file on stdin, so a test decides when, whatever the machine's load), tear
down, print ``DOWN <epoch>``; a refused lock prints ``REFUSED <message>`` and exits 3.

The PSK comes from $HIL_SAFETY_PSK and is never printed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tests.safety._lab, tests.lab_factory

from tests.safety._inject import TEST_COMMAND, Armed, InterruptingHost, at_step, describe, trigger  # noqa: E402

from ipsec_hil.fixtures import build_appliances  # noqa: E402
from ipsec_hil.lab.sharing.lock import ApplianceLock, LockHeld  # noqa: E402
from ipsec_hil.lab.provision import TunnelPlan, TunnelProvisioner  # noqa: E402
from ipsec_hil.lab.topology import TunnelConfig, load_topology  # noqa: E402
from ipsec_hil.lab.expectations.hardware import REGISTRY

CONFIG = TunnelConfig("ipv4", "ipv6", "aes-gcm-16", 1)


def say(text: str) -> None:
    print(text, flush=True)


def pause_at(resolved: str, run_id: str, named: str, config_id: str, module: str, run_dir: str) -> int:
    """The SIGKILL scenarios' run (see the module's doc): says ``AT <step>`` and sleeps there."""
    from tests.safety._every_step import config_from_id, parse_step
    from tests.safety._lab import FAULT, bench_host, scenario

    from ipsec_hil_twin.lifecycle.lab import Lab

    topo = load_topology(resolved, models=REGISTRY)
    apps, _ = build_appliances(topo)
    plan = TunnelPlan.from_topology(topo, "lab")
    twin = Lab.attach(run_dir=run_dir)
    step = parse_step(named)

    def fault(on: bool) -> None:
        if on:
            twin.fault(plan.local.host, FAULT[0], **FAULT[1])
        else:
            twin.clear_fault(plan.local.host, FAULT[0])

    def pause(host, call, script):
        r = call()
        say(f"AT {describe(step)}")
        time.sleep(60)
        return r

    armed = Armed(at_step(run_id, step), pause)
    for a in apps.values():
        a.host = InterruptingHost(a.host, armed)
    bench = InterruptingHost(bench_host(topo), armed)
    scenario(apps, bench, plan, config_from_id(config_id), os.environ["HIL_SAFETY_PSK"], run_id, module, fault)
    say("DONE (the step was never reached)")
    return 0


def main(argv: list[str]) -> int:
    mode, resolved = argv[0], argv[1]
    if mode == "pause-at":
        return pause_at(resolved, *argv[2:7])
    topo = load_topology(resolved, models=REGISTRY)
    apps, _ = build_appliances(topo)
    plan = TunnelPlan.from_topology(topo, "lab")
    psk = os.environ["HIL_SAFETY_PSK"]
    run_id = f"drv{os.getpid()}"
    ends = [apps[plan.local.host], apps[plan.remote.host]]
    if mode == "pause":
        step = argv[2]
        match = trigger(step, plan.local.host, plan.remote.host)

        def pause(host, call, script):
            r = call()
            say(f"AT {step}")
            time.sleep(60)
            return r

        armed = Armed(match, pause)
        for a in ends:
            a.host = InterruptingHost(a.host, armed)
        wait, hold = 30.0, 0.0
    else:
        wait, hold = float(argv[2]), (None if argv[3] == "stdin" else float(argv[3]))
    locks = [ApplianceLock(a.host, f"safety driver {mode}", run_id=run_id, wait=wait, poll=0.3) for a in ends]
    try:
        for lk in locks:
            lk.acquire()
    except LockHeld as e:
        say(f"REFUSED {e}")
        for lk in locks:
            lk.release()
        return 3
    try:
        # initiate_timeout as _lab.provision_and_test: it is in the initiate command, so
        # pause-at names that step the same as the recording did
        prov = TunnelProvisioner({a.name: a for a in ends}, plan, CONFIG, psk, run_id=run_id, initiate_timeout=10)
        prov.up()
        try:
            say(f"UP {time.time():.3f}")
            ends[0].host.run(TEST_COMMAND).check("test body")
            if hold is None:
                sys.stdin.readline()
            else:
                time.sleep(hold)
        finally:
            prov.down()
        say(f"DOWN {time.time():.3f}")
    finally:
        for lk in locks:
            lk.release()
    say("DONE")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
