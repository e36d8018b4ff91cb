"""Nothing that hides breakage (issue 10, item 6; issue 42): a selection that names no known
marker, a gate run that compared nothing, run-acceptance's exit status when nothing ran, a
run whose every test was skipped, and a gate run in which some tests did not run.

A green gate must mean something was measured: ``-m xgs999`` used to deselect every test
and tools/run-acceptance turned pytest's "no tests" (5) into 0.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.plugin.labfiles import lab_file

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


# ----------------------------------------------------------------- a run that measured nothing (issue 42)

#: A hardware lab reached locally (nothing starts, nothing is changed) with two XGS 3300s:
#: no XGS 136, and no tunnel at all.
ONLY_3300 = lab_file("local", models=("xgs3300", "xgs3300"), virtual=False)

SKIPPED_BY_THE_LAB = """\
import pytest

@pytest.mark.xgs136
def test_needs_an_xgs136(record):
    record.figure("one stream", 900.0, "Mbit/s")

@pytest.mark.tunnels(outer="ipv6")
def test_needs_a_tunnel(tunnel, record):
    pass
"""


def _acceptance(pytester: pytest.Pytester, tests: str, *args: str):
    """A scratch project whose tests_hil/ holds ``tests``, run on ONLY_3300 (a subprocess)."""
    pytester.makefile(".yaml", lab=ONLY_3300)
    (pytester.path / "tests_hil").mkdir()
    (pytester.path / "tests_hil" / "test_scratch.py").write_text(tests)
    return pytester.runpytest_subprocess("--topology", "lab.yaml", "-p", "no:xdist", *args, "tests_hil")


def test_a_run_whose_tests_were_all_skipped_exits_nothing_measured(pytester: pytest.Pytester):
    """The model missing and the lab file lacking the tunnel: every test skipped is exit 25
    and one line naming why, on the terminal and as the page's verdict -- not a green 0."""
    r = _acceptance(pytester, SKIPPED_BY_THE_LAB)
    out = r.stdout.str()
    assert r.ret == HilExitCode.NOTHING_MEASURED, out[-3000:] + r.stderr.str()[-2000:]
    r.assert_outcomes(skipped=2)
    (line,) = [x for x in out.splitlines() if x.startswith("nothing measured:")]
    assert line.startswith("nothing measured: all 2 selected acceptance test(s) were skipped (1 x ")
    assert "topology local has no xgs136" in line and "the topology has no tunnel matching" in line
    assert line.endswith(f"): exit {int(HilExitCode.NOTHING_MEASURED)}")
    page = (pytester.path / "reports" / "measurement-page.md").read_text()
    assert "**Verdict: nothing measured: all 2 selected acceptance test(s) were skipped" in page


GATE_TESTS = """\
import pytest

def test_rate(record):
    record.figure("one stream", 900.0, "Mbit/s")

@pytest.mark.xgs136
def test_rate_on_an_xgs136(record):
    record.figure("one stream", 300.0, "Mbit/s")
"""


def test_a_gate_run_with_tests_not_run_exits_gate_incomplete(pytester: pytest.Pytester):
    """--gate: the rate that ran matches its baseline, the XGS 136's test was skipped (no such
    appliance): the gate did not establish it -- exit 26, and the first screen lists it."""
    env = bl.environment(topology="local", virtual=False, appliances=[])
    rate = bl.FigureValue("tests_hil/test_scratch.py::test_rate", "one stream", 900.0, "Mbit/s")
    bl.save(pytester.path / "baseline.json", bl.Repeat(date=bl.now_iso(), environment=env, figures=[rate]))
    r = _acceptance(pytester, GATE_TESTS, "--baseline", "baseline.json", "--gate")
    out = r.stdout.str()
    assert r.ret == HilExitCode.GATE_INCOMPLETE, out[-3000:] + r.stderr.str()[-2000:]
    r.assert_outcomes(passed=1, skipped=1)
    assert "REGRESSION" not in out and "none of the baseline's" not in out
    assert (f"--gate: 1 of 2 selected acceptance test(s) did not run (the page's first screen lists them "
            f"under 'Not established'): exit {int(HilExitCode.GATE_INCOMPLETE)}") in out
    page = (pytester.path / "reports" / "measurement-page.md").read_text()
    screen = page.split("**Not established**", 1)[1].split("\n\n", 2)[1]
    assert "not run -- topology local has no xgs136" in screen, screen
