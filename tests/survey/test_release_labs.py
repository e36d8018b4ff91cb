"""The survey of each FreeBSD release's own virtual lab, as a user types it (issue 55).

test_survey.py surveys the mixed lab (one appliance per release) in depth; here each
release's lab is surveyed whole -- topologies/virtual.yaml (every appliance on the default
FreeBSD 14.1 / OPNsense 24.7), virtual-releases-14.3.yaml and virtual-releases-15.1.yaml --
and its table is checked against what the lab file states: exit 0, every read parsed or
saved raw, every profile matched, each appliance on its release, the offload framework
present on 15.1 only. What a release is expected to be is the lab file's ``os:`` block and
the pages' pairing of OPNsense to FreeBSD (docs/DESIGN.md, "Topology file"), not the
survey's or the twin's own tables.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.lab_factory import REPO, VIRTUAL_TOPOLOGY, start_lab, subprocess_env

pytestmark = pytest.mark.needs_root

#: OPNsense release of each FreeBSD release the suite meets (24.7 / 26.1 / 26.7)
OPNSENSE_OF = {"14.1": "24.7", "14.3": "26.1", "15.1": "26.7"}
DEFAULT_FREEBSD = "14.1"
LABS = {"14.1": VIRTUAL_TOPOLOGY, "14.3": REPO / "topologies" / "virtual-releases-14.3.yaml",
        "15.1": REPO / "topologies" / "virtual-releases-15.1.yaml"}


@pytest.fixture(scope="module", params=sorted(LABS), ids=lambda r: f"freebsd-{r}")
def surveyed(request, tmp_path_factory):
    """One release's lab started, surveyed by ``python -m ipsec_hil.lab.survey``, stopped."""
    release = request.param
    lab = start_lab(tmp_path_factory, topology=LABS[release])
    try:
        out = tmp_path_factory.mktemp("survey") / "bundle"
        run = subprocess.run([sys.executable, "-m", "ipsec_hil.lab.survey", str(lab.resolved), "--out", str(out)],
                             capture_output=True, text=True, timeout=120, env=subprocess_env(), cwd=REPO)
        hosts = yaml.safe_load(LABS[release].read_text())["hosts"]
        yield release, hosts, run, json.loads((out / "survey.json").read_text())
    finally:
        lab.close()


def test_each_release_lab_surveys_whole_on_its_release(surveyed):
    release, hosts, run, manifest = surveyed
    assert run.returncode == 0 == manifest["exit_status"], run.stdout + run.stderr
    appliances = {n: h for n, h in hosts.items() if h.get("model")}
    assert set(appliances) <= set(manifest["hosts"]) and appliances, (sorted(appliances), sorted(manifest["hosts"]))
    table = run.stdout.splitlines()
    for name, host in appliances.items():
        got = manifest["hosts"][name]
        freebsd = str((host.get("os") or {}).get("freebsd", DEFAULT_FREEBSD))
        assert freebsd == release, f"{name}: the lab file of {release} puts it on {freebsd}"
        assert got["release"].startswith(f"FreeBSD {freebsd}-RELEASE"), (name, got["release"])
        assert f"OPNsense {OPNSENSE_OF[freebsd]}." in got["release"], (name, got["release"])
        assert got["counters"]["missing"] == {} and got["counters"]["unknown"] == {}, (name, got["counters"])
        reads = got["reads"]
        assert len(reads) >= 20 and all(x["state"] in ("parsed", "raw") for x in reads), \
            [(x["name"], x["state"]) for x in reads if x["state"] not in ("parsed", "raw")]
        assert sum(x["state"] == "parsed" for x in reads) > len(reads) // 2
        rows = [l for l in table if l.startswith(name + " ")]
        framework = "present" if freebsd == "15.1" else "absent"
        assert any("ipsec offload framework" in l and f" {framework} " in l for l in rows), (name, rows)
        assert any("counters (" in l and "profile matched" in l for l in rows), rows
