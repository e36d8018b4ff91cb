"""The acceptance suite itself, run against the virtual lab as a driver engineer runs it.

One pytest subprocess over a slice of tests_hil that touches every test module on both
models (one configuration each, so it stays a few minutes), with Allure and JUnit output:
it must pass, write the measurement page (with its tables and "What is not established"),
and leave Allure results with the run-level files. The fault matrix (tests/teeth) shows the
same tests fail when the lab misbehaves; this shows they pass when it does not.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest

from tests.lab_factory import subprocess_env, suite_run

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the virtual lab needs root (network namespaces, TUN)"),
]

SELECTION = "lab-v6in4-gcm or npu-v4in6-cbc or many-v4in4-gcm-c6"


def test_acceptance_slice_passes_and_reports(tmp_path):
    allure_dir, junit = tmp_path / "allure", tmp_path / "junit.xml"
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("HIL_PSK")}
    args = ["tests_hil", "-k", SELECTION, "--traffic-seconds", "0.2",
            "-q", "-rfE", "--tb=line", "--alluredir", str(allure_dir), "--junitxml", str(junit)]
    res = suite_run(args, tmp_path / "checkout", env=env, timeout=1200)  # reports/ of its own
    tail = (res.stdout + res.stderr)[-6000:]
    assert res.returncode == 0, f"acceptance slice failed (exit {res.returncode}):\n{tail}"
    suite = ET.parse(junit).getroot()
    cases = suite.findall(".//testcase")
    modules = {c.get("classname", "").split(".")[-1] for c in cases}
    for module in ("test_bringup", "test_conservation", "test_sizes", "test_matrix", "test_rates",
                   "test_six_children", "test_wire", "test_teardown"):
        assert module in modules, f"{module} did not run in the slice: {sorted(modules)}"
    failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
    assert not failed, f"failed: {failed}"
    page = (tmp_path / "checkout" / "reports" / "measurement-page.md").read_text()
    assert "## What ran" in page and "## What is not established" in page
    assert "Mbit/s" in page and "octep" in page and "npuep" in page
    results = list(allure_dir.glob("*-result.json"))
    assert len(results) == len(cases), f"{len(results)} Allure results for {len(cases)} tests"
    for name in ("environment.properties", "executor.json", "categories.json"):
        assert (allure_dir / name).exists(), f"no {name} in the Allure results"
    ledgers = [a for r in results for a in json.loads(r.read_text()).get("attachments", [])
               if a.get("name", "").startswith("ledger")]
    assert ledgers, "no counter ledger attached to any Allure result"
