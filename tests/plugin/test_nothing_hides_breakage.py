"""Nothing that hides breakage (issue 10, item 6): a selection that names no known marker,
a gate run that compared nothing, and run-acceptance's exit status when nothing ran.

A green gate must mean something was measured: ``-m xgs999`` used to deselect every test
and tools/run-acceptance turned pytest's "no tests" (5) into 0.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.measuring import baseline as bl
from ipsec_hil.markers import names_in_expression

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
MINI = (REPO / "tests/topology/minimal-good.yaml").read_text()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HIL_PSK"))}


@pytest.mark.parametrize("expr,names", [
    ("xgs136", ["xgs136"]),
    ("xgs136 and not throughput", ["xgs136", "throughput"]),
    ("(outer_v6 or inner_v6) and page(name='000')", ["outer_v6", "inner_v6", "page"]),
    ("not 'and'", []),
])
def test_names_in_a_marker_expression(expr, names):
    assert names_in_expression(expr) == names


def test_an_unregistered_marker_in_m_is_a_usage_error_naming_the_known_ones():
    r = subprocess.run([str(REPO / ".venv/bin/pytest"), "-m", "xgs999", "--collect-only", "-q",
                        "-p", "no:cacheprovider"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stdout[-2000:] + r.stderr[-2000:]
    assert "-m 'xgs999': no marker named 'xgs999'; known markers:" in r.stderr
    assert "xgs136" in r.stderr and "xgs3300" in r.stderr


def test_registered_markers_still_select():
    r = subprocess.run([str(REPO / ".venv/bin/pytest"), "-m", "xgs3300 and not throughput", "--collect-only", "-q",
                        "-p", "no:cacheprovider"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_run_acceptance_passes_pytests_no_tests_exit_through():
    r = subprocess.run(["bash", "tools/run-acceptance", "-k", "no_test_has_this_name", "-p", "no:cacheprovider"],
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 5, r.stdout[-2000:] + r.stderr[-2000:]
    assert "collected no test (exit 5)" in r.stdout


def test_a_gate_that_compared_nothing_fails(pytester: pytest.Pytester):
    """--gate on a run that measured none of the baseline's rates exits GATE_NOTHING_COMPARED."""
    pytester.makefile(".yaml", lab=MINI)  # a virtual lab file: no acceptance test runs, no lab starts
    env = bl.environment(topology="mini", virtual=True, appliances=[])
    rate = bl.FigureValue("tests_hil/test_rates.py::test_rate[x]", "one stream", 900.0, "Mbit/s")
    bl.save(pytester.path / "baseline.json", bl.Repeat(date=bl.now_iso(), environment=env, figures=[rate]))
    pytester.makepyfile(test_other="def test_measures_nothing():\n    pass\n")
    r = pytester.runpytest_subprocess("--topology", "lab.yaml", "--baseline", "baseline.json", "--gate",
                                      "test_other.py")
    out = r.stdout.str()
    assert r.ret == HilExitCode.GATE_NOTHING_COMPARED, out[-3000:] + r.stderr.str()[-2000:]
    assert "--gate: none of the baseline's 1 rate(s) was measured by this run: exit 21" in out
