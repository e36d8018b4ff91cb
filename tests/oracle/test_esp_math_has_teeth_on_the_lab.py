"""A wrong constant in the suite's ESP arithmetic makes the size tests fail on the lab.

Why: before the twin had its own FreeBSD model it took its limits from
ipsec_hil.lab.expectations.esp_math, so a wrong formula moved the lab and the expectation together and
every size test passed (issue 10).  Here the acceptance size tests of one configuration
run twice on a fresh virtual lab: unchanged (they pass: the control) and with constants
of esp_math made wrong before collection (a `-p` plugin in a temporary directory); the
second run must fail, each size test through its own assertion, not through an error.
"""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_root

REPO = Path(__file__).resolve().parents[2]
SELECT = "lab-v6in4-gcm"  # the 3300 pair, IPv6 inner over IPv4 outer: both size tests run
SIZE_TESTS = ("test_forwarded_ipv6_packet_too_big", "test_own_largest_packet_passes_one_more_refused")

MUTANT = '''"""Loaded with -p before collection: makes ipsec_hil.lab.expectations.esp_math wrong on purpose."""
from ipsec_hil.lab.expectations import esp_math

esp_math._KERNEL_WORST_CASE_FIXED += 8  # esp_hdrsiz(NULL) as if the max ICV were 24 bytes
esp_math.ESP_HEADER += 4                # SPI + sequence as if they were 12 bytes
'''


def run_size_tests(tmp_path: Path, mutate: bool) -> tuple[int, str, dict[str, str]]:
    """(exit status, output, test name -> outcome) of one run; the outcome is "passed",
    "skipped", "error: MESSAGE" (setup/teardown) or "failed: MESSAGE" (the call phase)."""
    env = dict(os.environ)
    junit = tmp_path / ("mutant.xml" if mutate else "control.xml")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}",
            "tests_hil/test_sizes.py", "-k", SELECT]
    if mutate:
        (tmp_path / "oracle_esp_math_mutant.py").write_text(MUTANT)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
        argv[3:3] = ["-p", "oracle_esp_math_mutant"]
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    found: dict[str, str] = {}
    if junit.exists():
        for case in ET.parse(junit).iter("testcase"):
            name = case.get("name", "").split("[")[0]
            kids = {k.tag: k.get("message", "") for k in case}
            outcome = "passed"
            for tag in ("skipped", "error", "failure"):
                if tag in kids:
                    outcome = f"{'failed' if tag == 'failure' else tag}: {kids[tag]}"
            found[name] = outcome
    return r.returncode, out, found


def test_control_the_size_tests_pass_on_the_lab(tmp_path):
    status, out, got = run_size_tests(tmp_path, mutate=False)
    assert status == 0, out[-4000:]
    assert got == {t: "passed" for t in SIZE_TESTS}, out[-4000:]


def test_wrong_esp_math_constants_fail_the_size_tests_on_the_lab(tmp_path):
    status, out, got = run_size_tests(tmp_path, mutate=True)
    assert status == 1, f"pytest exited {status}, expected 1 (tests failed):\n{out[-4000:]}"
    assert set(got) == set(SIZE_TESTS), out[-4000:]
    for test, outcome in got.items():
        assert outcome.startswith("failed: AssertionError"), (
            f"{test} must fail through its own assertion, found: {outcome}\n{out[-4000:]}")
    # the gate's figure differs: the limit the suite computed is not where the lab's gate is
    assert "expected the first to pass and the second to get a Packet Too Big" in got["test_forwarded_ipv6_packet_too_big"]
    assert "must be refused" in got["test_own_largest_packet_passes_one_more_refused"]
