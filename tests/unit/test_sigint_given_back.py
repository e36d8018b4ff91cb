"""A run started in the background still tests Ctrl-C (tests/conftest.py sigint_deliverable).

A non-interactive shell starts ``cmd &`` with SIGINT ignored, and exec keeps it so in every
process the tests start; the conftest gives it back. Proved the way it happens: a Python
started as such a background job, before and after the call, and a child it starts after."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

PROBE = f"""
import signal, subprocess, sys
sys.path.insert(0, {str(TESTS.parent)!r})
from tests.conftest import sigint_deliverable
before = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
gave = sigint_deliverable()
child = subprocess.run([sys.executable, "-c",
                        "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
                       capture_output=True, text=True).stdout.strip()
print(before, gave, child)
"""


def test_a_background_run_gives_sigint_back_to_what_it_starts():
    r = subprocess.run(["bash", "-c", f'"{sys.executable}" -c "$PROBE" & wait'],
                       env={"PROBE": PROBE, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "True"], (
        f"(ignored on entry, given back, the child's SIGINT is Python's default) = {r.stdout.split()}; {r.stderr}")
