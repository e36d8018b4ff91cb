"""A ``--driver`` run SIGKILLed mid-test, then a run WITHOUT ``--driver`` (issue 55).

What must hold: the killed run left its build under test loaded on both ends of the lab
tunnel, its tunnel up and its route on the bench (checked, else the test proves nothing);
the next run -- an ordinary one, no ``--driver`` -- puts the original module back before it
reads the driver's md5, removes the bench route and the tunnel, and says so: its terminal
(the header's one line and a line per host), its page (one line on the first screen naming
the dead run and the original module's md5, the section "Recovered from dead runs" with the
whole md5 and the step the dead run died after) and Allure's environment (``recovery.*``);
its page's hardware line shows the original md5, and the run passes. Two real runs as a
user makes them (a scratch checkout, the acceptance tests of tests_hil/), on one lab.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipsec_hil.lab.traffic.bench_routes import BENCH_JOURNAL_DIR, SUITE_PROTO
from tests.lab_factory import lab_fixture, scratch_rootdir, subprocess_env

pytestmark = pytest.mark.needs_root

lab = lab_fixture()

#: A: a forwarded test with a bench route and a 10 s stream (killed once its route is there)
RUN_A = "tests_hil/test_rates.py::test_forwarded_rate[lab-v4in4-gcm-1x10s-up]"
#: B: a short forwarded test of the same tunnel (a bench route of its own)
RUN_B = "tests_hil/test_sizes.py::test_forwarded_ipv4_with_df_passes_while_dfbit_is_0[lab-v4in4-gcm]"
ENDS = ("dut3300", "peer3300")


def _pytest(root: Path, lab, *args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-p", "no:randomly",
            "--rootdir", str(root), f"--topology={lab.resolved}"]


def _suite_routes(lab) -> str:
    out = subprocess.run(["ip", "-n", lab.namespaces["bench"], "route", "show", "table", "all", "proto",
                          str(SUITE_PROTO)], capture_output=True, text=True, timeout=10).stdout
    return out.strip()


def test_a_killed_driver_run_is_undone_and_said_by_a_run_without_driver(lab, tmp_path):
    root = scratch_rootdir(tmp_path / "checkout")
    original = {h: lab.apps[h].module_info() for h in ENDS}
    build = tmp_path / "octep-candidate.ko"
    build.write_bytes(b"\x7fELF octep candidate of a run that dies\n" + os.urandom(2048))
    candidate = hashlib.md5(build.read_bytes()).hexdigest()
    journal = Path(f"{BENCH_JOURNAL_DIR}.{lab.namespaces['bench']}")

    a = subprocess.Popen(_pytest(root, lab, RUN_A, f"--driver=xgs3300={build}"), cwd=root,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=subprocess_env())
    try:
        end = time.monotonic() + 120
        while not _suite_routes(lab):  # journalled before it is added: the route, then the kill
            assert a.poll() is None, f"run A ended ({a.returncode}) before its bench route:\n{a.stdout.read()[-3000:]}"
            assert time.monotonic() < end, "run A never added its bench route"
            time.sleep(0.05)
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait(timeout=30)
    # what A left: the candidate on both ends, its route on the bench
    for h in ENDS:
        info = lab.apps[h].module_info()
        assert info.md5 == candidate and info.loaded, f"{h}: the killed run left {info}, not its candidate"
    assert _suite_routes(lab) and any(journal.iterdir()), "the killed run left no route or no entry on the bench"

    alluredir = tmp_path / "allure"
    b = subprocess.run(_pytest(root, lab, RUN_B, f"--alluredir={alluredir}"), cwd=root, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=300, env=subprocess_env())
    out = b.stdout + b.stderr
    assert b.returncode == 0, f"run B failed ({b.returncode}):\n{out[-4000:]}"
    md5 = original["dut3300"].md5
    assert md5 and md5 != candidate
    for h in ENDS:
        info = lab.apps[h].module_info()
        assert (info.md5, info.loaded) == (original[h].md5, original[h].loaded), f"{h}: after run B {info}"
    assert not _suite_routes(lab), f"the bench still routes: {_suite_routes(lab)}"
    assert not journal.exists(), f"the bench's journal is left: {sorted(journal.iterdir())}"  # removed, empty, at B's end

    # the terminal: the one line in the header and again at the end, a line per host
    dead = f"pid {a.pid} on {socket.gethostname()}"
    one = [line for line in out.splitlines() if line.startswith("Found a dead run's state and undid it")]
    assert len(one) == 2, out[:4000]
    for h in ENDS:
        assert f"{h}: driver restored: md5 {md5[:8]}, loaded" in one[0], one[0]
    assert dead in one[0] and "bench: 1 route(s)" in one[0], one[0]
    assert re.search(rf"^recovery: dut3300, driver under test journal, of {dead}: driver restored: md5 {md5[:8]}",
                     out, re.M), out[:4000]

    # the page: the line on the first screen (before the per-model table), the details below
    page = (root / "reports" / "measurement-page.md").read_text()
    first_screen = page.split("\n---\n", 1)[0]
    assert f"**{one[0]}**" in first_screen, first_screen
    assert f"dut3300 (xgs3300, octep md5 {md5[:8]})" in first_screen, first_screen
    section = page.split("## Recovered from dead runs", 1)[1].split("\n## ", 1)[0]
    assert f"now: octep md5 {md5}" in section and f"of the dead run {dead}" in section, section
    assert "it died after its last journalled change: bench: route" in section, section

    # Allure's environment
    env = (alluredir / "environment.properties").read_text()
    assert "recovery.dut3300.driver=" in env and f"recovery.dut3300.driver.now=octep md5 {md5}" in env, env
    print(f"\nrun B said: {one[0]}")
