"""Counters the code knows (issue 53): a misspelt counter is a collection error, not a lab failure.

An acceptance test names counters in ledger references (``f"{dut}:tx_encrypt"``) or
through its model (``model_counters("xgs136").tx_taken``). Both are checked when the tests
are collected, against the profiles of the models the test's tunnels run on
(ipsec_hil.lab.expectations.counters): no lab is started, no traffic runs, and the error
names the test (or its module), the misspelt name and the profile. Before issue 53 the
typo below collected fine and failed only on the lab, after the tunnel was up and the
stream had run.
"""

from __future__ import annotations

import pytest
from tests.plugin.labfiles import lab_file

from ipsec_hil.lab.expectations.counters import (CounterNameError, check_names, model_counters,
                                                 referenced_names)
from ipsec_hil.lab.expectations.hardware import REGISTRY

pytest_plugins = ["pytester"]

LAB = lab_file("names", tunnel={})

TESTS = """\
import pytest
from ipsec_hil.lab.measuring.measure import expect_equal

@pytest.mark.tunnels(model="xgs3300")
def test_spelt_right(tunnel, meter):
    d = tunnel.local.name
    expect_equal(None, f"{d}:tx_encrypt", f"{d}:out_taken", "every own packet took the interposition")

@pytest.mark.tunnels(model="xgs3300")
def test_misspelt(tunnel, meter):
    d, p = tunnel.local.name, tunnel.remote.name
    _peer_took(p)
    expect_equal(None, f"{d}:tx_encrypt", f"{d}:out_taken", "every own packet took the interposition")

def _peer_took(p):
    expect_equal(None, f"{p}:esp.received-packets", f"{p}:rx_dnoe", "a helper's reference is checked too")
"""


def collect(pytester: pytest.Pytester, tests: str) -> pytest.RunResult:
    pytester.makefile(".yaml", lab=LAB)
    (pytester.path / "tests_hil").mkdir()
    (pytester.path / "tests_hil" / "test_counted.py").write_text(tests)
    return pytester.runpytest_subprocess("--topology", "lab.yaml", "--collect-only", "-q", "tests_hil")


def test_a_misspelt_counter_is_a_collection_error_naming_the_test_and_the_profile(pytester: pytest.Pytester):
    result = collect(pytester, TESTS)
    assert result.ret != 0, result.stdout.str()
    out = result.stdout.str()
    assert "ERROR collecting" in out or "errors" in out, out
    assert "test_misspelt" in out and "'rx_dnoe'" in out and "in _peer_took" in out, out
    assert "xgs3300" in out and "xgs136" in out, out  # the profiles of the tunnel's two ends
    assert "test_spelt_right" not in out.split("rx_dnoe", 1)[0].rsplit("ERROR", 1)[-1]


def test_references_spelt_right_collect(pytester: pytest.Pytester):
    result = collect(pytester, TESTS.split("@pytest.mark.tunnels(model=\"xgs3300\")\ndef test_misspelt")[0])
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_spelt_right*"])


def test_a_typed_name_the_model_lacks_fails_the_module_import(pytester: pytest.Pytester):
    result = collect(pytester, "from ipsec_hil.lab.expectations.counters import model_counters\n"
                               "DOOR = model_counters('xgs136').tx_takn\n"
                               "def test_x():\n    pass\n")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*ERROR collecting*test_counted.py*",
                                 "*xgs136 (npuep) has no counter 'tx_takn'; its counters: tx_taken, tx_accel*"])


def test_the_library_check_without_pytest():
    assert model_counters("xgs136").tx_taken == "tx_taken"
    assert model_counters("xgs3300").ref("dut", "FROM_KN_TO_IPSEC_ENCR") == "dut:FROM_KN_TO_IPSEC_ENCR"

    def uses(d):
        return [f"{d}:tx_encrypt", f"{d}:esp.dropped-bad-auth", f"{d}:if.wan.idrop", f"{d}:sa.0x0000abcd.hw_offl",
                f"{d}:tx_encrpyt"]

    refs = referenced_names(uses)
    assert [r.name for r in refs] == ["tx_encrypt", "esp.dropped-bad-auth", "if.wan.idrop", "sa.0x0000abcd.hw_offl",
                                      "tx_encrpyt"]
    with pytest.raises(CounterNameError, match=r"here: unknown counter 'tx_encrpyt' \(test_counter_names.py:\d+, in uses\)"):
        check_names(refs, [REGISTRY.get("xgs3300")], "here")
    check_names(refs[:-1], [REGISTRY.get("xgs3300")], "here")


def test_the_acceptance_suite_names_only_counters_its_models_have(repo_root):
    """Every f-string reference in tests_hil/ names a counter of some model, an ESP
    statistic or a door (the collection check per test is the plugin's; this one reads
    the whole suite without a lab file)."""
    import importlib.util
    import inspect
    import sys

    profiles = [REGISTRY.get(m) for m in REGISTRY.names()]
    for path in sorted((repo_root / "tests_hil").glob("test_*.py")):
        spec = importlib.util.spec_from_file_location(f"_names_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
            for name, fn in inspect.getmembers(module, inspect.isfunction):
                if name.startswith("test_") and inspect.getmodule(fn) is module:
                    check_names(referenced_names(fn), profiles, f"{path.name}::{name}")
        finally:
            sys.modules.pop(spec.name, None)
