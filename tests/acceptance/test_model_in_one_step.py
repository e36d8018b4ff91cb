"""A model in one step: a registry entry, a twin personality and a topology block.

- In a temporary copy of the suite, a third model (tests/acceptance/new_model.py: "xgs999",
  the XGS 136's shape under a driver and counter names of its own) is added in exactly the
  files docs/DESIGN.md's "Where to add ..." names for a model, and one acceptance test runs
  on it on the twin and passes (not a collection: its engine's association counters are
  read through the new entry's OIDs from the new personality).
- tools/run-acceptance selects the registry's default gate, not a marker written into it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.lab_factory import REPO, subprocess_env

from .new_model import DRIVER, MODEL, TUNNEL, add_model, copy_suite

DESIGN = REPO / "docs" / "DESIGN.md"
TEST = "tests_hil/test_bringup.py::test_engine_holds_two_associations_per_child"


def design_files_for_a_model(design: Path = DESIGN) -> set[str]:
    """The files DESIGN.md's "Where to add ..." table names (in backticks) for a model."""
    rows = [ln for ln in design.read_text().splitlines() if ln.startswith("| an appliance model |")]
    assert len(rows) == 1, f"{design}: expected one '| an appliance model |' row in 'Where to add ...', found {len(rows)}"
    return {p for p in re.findall(r"`([^`\s]+)`", rows[0]) if "/" in p}


def _env_for(checkout: Path) -> dict[str, str]:
    """The inner run imports the copy's packages (ahead of the editable install of this
    checkout) and nothing of the outer run's xdist worker, addopts or pre-shared keys."""
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("HIL_PSK")}
    env["PYTHONPATH"] = os.pathsep.join([str(checkout / "plugin"), str(checkout / "twin")])
    return env


@pytest.mark.needs_root
def test_a_third_model_added_in_the_named_files_passes_an_acceptance_test_on_the_twin(tmp_path):
    checkout = copy_suite(REPO, tmp_path / "checkout")
    touched = set(add_model(checkout))
    assert touched == design_files_for_a_model(), (
        f"docs/DESIGN.md 'Where to add ...' names {sorted(design_files_for_a_model())} for a model; "
        f"adding one touched {sorted(touched)}")
    junit = tmp_path / "junit.xml"
    res = subprocess.run([sys.executable, "-m", "pytest", TEST, "-m", MODEL, "-p", "no:cacheprovider",
                          "--rootdir", str(checkout), "-q", "-rfE", "--tb=short", "--junitxml", str(junit)],
                         cwd=checkout, env=_env_for(checkout), capture_output=True, text=True, timeout=600,
                         stdin=subprocess.DEVNULL)
    tail = (res.stdout + res.stderr)[-5000:]
    assert res.returncode == 0, f"the acceptance test on {MODEL} failed (exit {res.returncode}):\n{tail}"
    cases = ET.parse(junit).getroot().findall(".//testcase")
    names = [c.get("name") for c in cases]
    assert names == [f"test_engine_holds_two_associations_per_child[{TUNNEL}-v4in4-gcm]"], \
        f"expected the one test on the new model's tunnel, ran {names}:\n{tail}"
    outcome = [el.tag for el in cases[0] if el.tag in ("failure", "error", "skipped")]
    assert not outcome, f"{names[0]}: {outcome}:\n{tail}"
    page = (checkout / "reports" / "measurement-page.md").read_text()
    assert f"({MODEL}, {DRIVER} md5" in page, "the page does not show the new model's appliances and driver"


def test_run_acceptance_selects_the_registrys_default_gate(tmp_path):
    """A copy of the suite's library whose registry names the XGS 3300 as the default gate:
    run-acceptance then collects the XGS 3300's cases (``lab-*``), none of the XGS 136's."""
    copy = tmp_path / "plugin"
    shutil.copytree(REPO / "plugin" / "ipsec_hil", copy / "ipsec_hil", ignore=shutil.ignore_patterns("__pycache__"))
    hardware = copy / "ipsec_hil" / "lab" / "expectations" / "hardware.py"
    src = hardware.read_text()
    assert src.count('default_gate="xgs136"') == 1, f"{hardware}: the registry's default_gate is not the xgs136's"
    hardware.write_text(src.replace('default_gate="xgs136"', 'default_gate="xgs3300"'))
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("HIL_PSK")}
    env["PYTHONPATH"] = str(copy)
    res = subprocess.run(["bash", str(REPO / "tools" / "run-acceptance"), "--collect-only", "-q", "-p", "no:cacheprovider"],
                         env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    nodes = [ln for ln in res.stdout.splitlines() if ln.startswith("tests_hil/")]
    assert nodes, f"run-acceptance collected nothing (exit {res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
    cases = {n.split("[", 1)[1].split("-", 1)[0] for n in nodes if "[" in n}
    assert "lab" in cases and not cases & {"npu", "many"}, (
        f"run-acceptance with the registry's default gate xgs3300 collected tunnel cases {sorted(cases)}")
