"""The test that run A and run B execute (tests/lease/test_two_runs.py copies it into a
scratch checkout's tests_hil/, so each is an ordinary acceptance run of its own).

A: brings the lab tunnel up, says so, then drives both appliances and the bench (a
command every 0.2 s, as a long test does) until it is stopped; never stopped, it fails.
B: brings its own tunnel up (after recovering what A left), waits until A has exited,
then checks that its tunnel's associations and its driver build are still what it set up.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

ROLE = os.environ.get("HIL_TWO_RUNS_ROLE", "")
SIGNALS = Path(os.environ.get("HIL_TWO_RUNS_DIR", "."))


@pytest.fixture
def careless_teardown(tunnel):
    """A teardown nobody guarded (as a test's own cleanup would be): after a loss it still
    tries every host; only the transport stands between it and another run's lab."""
    yield
    refused = []
    for host in (tunnel.local.host, tunnel.remote.host, tunnel.lab.hosts["bench"]):
        try:
            host.run("true")
        except Exception as exc:  # noqa: BLE001 -- what the transport said is the finding
            refused.append(f"{host.name}: {type(exc).__name__}")
    (SIGNALS / f"{ROLE}.teardown").write_text("\n".join(refused))


@pytest.mark.xgs3300
@pytest.mark.tunnels(tunnel="lab", outer="ipv4", inner="ipv4", cipher="aes-gcm-16")
def test_hold_the_lab(tunnel, careless_teardown):
    """Hold the lab tunnel (run A: until stopped; run B: until A is gone, then check)."""
    hosts = [tunnel.local.host, tunnel.remote.host, tunnel.lab.hosts["bench"]]
    (SIGNALS / f"{ROLE}.up").write_text(str(os.getpid()))
    if ROLE == "A":
        end = time.monotonic() + 60
        while time.monotonic() < end:
            for host in hosts:
                host.run("true")
            time.sleep(0.2)
        pytest.fail("run A was never stopped: its lease was broken a minute ago")
    assert ROLE == "B", f"HIL_TWO_RUNS_ROLE={ROLE!r}"
    # B's own associations as it brought them up: the SAs of what A left under the same
    # connection name may still be there too (recovery restores files, not SAs: issue 40)
    ours = {app.name: tunnel.spis(app) for app in (tunnel.local, tunnel.remote)}
    assert all(ours.values()), f"B's tunnel has no SAs: {ours}"
    end = time.monotonic() + 60
    while not (SIGNALS / "A.exited").exists():
        assert time.monotonic() < end, "run A did not exit within 60 s"
        time.sleep(0.2)
    for app in (tunnel.local, tunnel.remote):
        missing = ours[app.name] - tunnel.spis(app)
        assert not missing, f"{app.name}: B's tunnel {tunnel.conn} lost SAs {sorted(missing)} after A stopped"
    want = os.environ["HIL_TWO_RUNS_MD5"]
    for app in (tunnel.local, tunnel.remote):
        info = app.module_info()
        assert info.md5 == want and info.loaded, f"{app.name}: driver {info} is not B's build {want}"


def test_loss_between_tests(request):
    """Run C, first test: a loss is recorded while no test runs (the stopper disarmed, as
    between two tests), so the check before the next test is what must stop the run."""
    from ipsec_hil.lab.sharing.holds import HOLDS
    from ipsec_hil.lab.sharing.lease import LeaseLost
    from ipsec_hil.context import run_context
    from ipsec_hil.lease_plugin import LeaseHold

    run_context(request.config).part(LeaseHold).stopper.disarm()
    HOLDS.lost("peer3300:/var/db/ipsec-hil/run.lock", ("peer3300",),
               LeaseLost("peer3300: this run's lease was taken: the lock now names carol on ws7"))


@pytest.mark.xgs3300
@pytest.mark.tunnels(tunnel="lab", outer="ipv4", inner="ipv4", cipher="aes-gcm-16")
def test_next_configuration(tunnel):
    """Run C, second test: must never start (its tunnel would be brought up first)."""
    (SIGNALS / "C.ran").write_text("")
