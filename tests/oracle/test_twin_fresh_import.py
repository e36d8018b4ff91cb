"""The twin, imported in a fresh interpreter, holds nothing of the suite but the lab file's schema.

Why a second check beside the AST scan (test_twin_imports.py): the scan sees what the
twin's own files write; it cannot see what the modules they are allowed to import pull in
behind them. The topology schema once imported the suite's hardware registry and ESP
arithmetic, so every twin process carried the very tables the oracle must not know
(issue 39), and no scan of twin/ noticed. Here a new Python process imports every module
of ``ipsec_hil_twin`` and walks the supervisor's path through a lab file (load it, derive
the network, the personalities, each appliance's host dir) and then lists ``sys.modules``:
of the suite, only ``ipsec_hil.lab.topology`` and what it needs may be there.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VIRTUAL = REPO / "topologies" / "virtual.yaml"

ALLOWED = {"ipsec_hil", "ipsec_hil.lab", "ipsec_hil.lab.errors"}
"""Beside ipsec_hil.lab.topology.*: the packages it sits in (two docstrings) and the
exception hierarchy its TopologyError belongs to."""

PROBE = r'''
import importlib, json, pkgutil, sys
from pathlib import Path

import ipsec_hil_twin

imported = []
for info in pkgutil.walk_packages(ipsec_hil_twin.__path__, "ipsec_hil_twin."):
    if info.name.rpartition(".")[2] == "__main__":
        continue  # runs the command line on import; its imports are covered by the supervisor below
    importlib.import_module(info.name)
    imported.append(info.name)

from ipsec_hil_twin.lifecycle import labfiles, supervisor  # the path `up` takes through a lab file
from ipsec_hil_twin.lifecycle.lab import Lab
from ipsec_hil_twin.machinery.runtime import RunDir

topo = labfiles.load_lab_topology(Path(sys.argv[1]))
labfiles.network_spec(topo, "tw")
run = RunDir(sys.argv[2])
for host in topo.appliances():
    labfiles.host_personality(host)
    labfiles.tunnels_of(topo, host.name)
    labfiles.make_host_dir(run, "tw", topo, host.name)
lab = Lab(run, "tw")
lab.info = {"topology": sys.argv[1]}
assert lab.topology.models == topo.models
EXTRA
print(json.dumps({"imported": imported,
                  "suite": sorted(m for m in sys.modules if m == "ipsec_hil" or m.startswith("ipsec_hil."))}))
'''


def suite_modules_in_twin(tmp_path: Path, extra: str = "") -> tuple[list[str], list[str]]:
    """(twin modules imported, suite modules in sys.modules) of a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSTARTUP", "PYTHONINSPECT")}
    out = subprocess.run([sys.executable, "-B", "-c", PROBE.replace("EXTRA", extra),
                          str(VIRTUAL), str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, f"the probe failed:\n{out.stderr[-3000:]}"
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return got["imported"], got["suite"]


def not_allowed(suite: list[str]) -> list[str]:
    return [m for m in suite if m not in ALLOWED and m != "ipsec_hil.lab.topology"
            and not m.startswith("ipsec_hil.lab.topology.")]


def test_the_twin_imports_nothing_of_the_suite_but_the_schema(tmp_path):
    imported, suite = suite_modules_in_twin(tmp_path)
    assert len(imported) > 60, f"expected every module of ipsec_hil_twin, imported {len(imported)}"
    assert "ipsec_hil.lab.topology.load" in suite, "the probe never loaded a lab file: it checks nothing"
    bad = not_allowed(suite)
    assert not bad, ("a fresh interpreter that imported the twin and loaded a lab file holds modules of "
                     "the suite besides its topology schema (the oracle must not know them): " + ", ".join(bad))


def test_the_check_sees_a_suite_module_behind_an_allowed_import(tmp_path):
    """The same probe with the suite's arithmetic imported on the way: it is named."""
    _, suite = suite_modules_in_twin(tmp_path, "import ipsec_hil.lab.topology, ipsec_hil.lab.expectations.esp_math")
    assert {"ipsec_hil.lab.expectations", "ipsec_hil.lab.expectations.esp_math"} <= set(not_allowed(suite))
