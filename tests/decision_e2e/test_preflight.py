"""``pytest --hil-preflight`` on the virtual lab: all checks pass on a healthy lab, and each
break made from outside (as a lab would be broken by hand) fails its check with the fix
named in one line and exit 24 -- before any test runs, without waiting for a timeout.

One lab for the module; every break is undone in ``finally`` so the next test starts clean.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.lab_factory import TestLab, lab_fixture, suite_run
from ipsec_hil.exitcodes import HilExitCode

pytestmark = pytest.mark.needs_root

lab = lab_fixture()


def _preflight(lab: TestLab, rootdir, *extra: str):
    t0 = time.monotonic()
    r = suite_run(["tests_hil", "--hil-preflight", *extra], rootdir, lab=lab, timeout=300)
    return r, time.monotonic() - t0


@contextmanager
def _broken(lab: TestLab, host: str, do: str, undo: str):
    app = lab.apps[host]
    r = app.host.run(do, timeout=30)
    assert r.status == 0, f"{host}: {do}: {r.stderr}"
    try:
        yield
    finally:
        assert app.host.run(undo, timeout=30).status == 0, f"{host}: {undo} failed"


def test_a_healthy_lab_passes_every_check(lab, tmp_path):
    r, wall = _preflight(lab, tmp_path)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
    out = r.stdout
    for line in ("ok    dut3300: reachable over SSH with the pinned host key", "ok    dut3300: ipsec.ko loaded",
                 "ok    dut3300: driver octep.ko loaded", "ok    xgs136: driver npuep.ko loaded",
                 "ok    peer3300: charon running (swanctl --stats)", "ok    dut3300: port lan: addresses and MTU 1500",
                 "ok    peer3300: port port8: addresses and MTU 9000", "ok    dut3300: route to 192.0.2.2 (tunnel lab)",
                 "ok    bench: tool iperf3", "ok    bench: port a_lan: 198.51.100.10/26, MTU 1500"):
        assert line in out, f"{line!r} not in:\n{out[-4000:]}"
    assert "FAIL  " not in out
    assert "preflight: all" in out + r.stderr
    print(f"\npreflight on a healthy lab: {wall:.1f} s (whole pytest run)")


@pytest.mark.parametrize("host,do,undo,fails,fix", [
    ("dut3300", "kldunload ipsec", "kldload ipsec", "dut3300: ipsec.ko loaded: not in kldstat",
     'fix: on dut3300: kldload ipsec, and ipsec_load="YES" in /boot/loader.conf'),
    ("xgs136", "kldunload npuep", "kldload /boot/modules/npuep.ko", "xgs136: driver npuep.ko loaded",
     "fix: on xgs136: kldload /boot/modules/npuep.ko"),
    ("peer3300", "ifconfig lan mtu 1400", "ifconfig lan mtu 1500", "peer3300: port lan: addresses and MTU 1500: "
     "mtu 1400, expected 1500", "fix: on peer3300: ifconfig lan mtu 1500"),
], ids=["no-ipsec.ko", "no-driver", "wrong-mtu"])
def test_each_break_fails_its_check_with_the_fix(lab, tmp_path, host, do, undo, fails, fix):
    with _broken(lab, host, do, undo):
        r, wall = _preflight(lab, tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == HilExitCode.PREFLIGHT_FAILED, f"exit {r.returncode}:\n{out[-4000:]}"
    assert f"FAIL  {fails}" in out and fix in out, out[-4000:]
    assert out.count("FAIL  ") == 1, out[-4000:]
    print(f"\n{host} after `{do}`: exit {r.returncode} in {wall:.1f} s")


def test_charon_down_is_named_with_its_fix(lab, tmp_path):
    """Last in the module: the twin's IKE daemon (its charon) is killed and not restarted --
    the lab is torn down after this test."""
    ns = lab.namespaces["xgs136"]
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=True).stdout.split()
    # by process name (ipsec_hil_twin.machinery.labprocs.name_process): a component forked warm (ipsec_hil_twin.machinery.prefork)
    # keeps the supervisor's command line
    daemons = [int(p) for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "twin-ike"]
    assert len(daemons) == 1, f"{ns}: IKE daemon pids {daemons}"
    os.kill(daemons[0], signal.SIGKILL)
    r, wall = _preflight(lab, tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == HilExitCode.PREFLIGHT_FAILED, f"exit {r.returncode}:\n{out[-4000:]}"
    assert "FAIL  xgs136: charon running (swanctl --stats)" in out, out[-4000:]
    assert "fix: on xgs136: service strongswan onestart" in out
    print(f"\nxgs136 with charon killed: exit {r.returncode} in {wall:.1f} s")
