"""xdist groups: one worker per connected set of appliances, and loadgroup by default.

Why these tests: under ``pytest -n`` two workers must never drive one appliance at once,
and a tunnel must be built once per run. ipsec_hil.fixtures puts every tunnel test into the
``xdist_group`` of its connected set of appliances (``appliance_groups``), and
ipsec_hil.pytest_plugin turns ``-n`` into ``--dist loadgroup`` unless a mode was chosen.

The virtual lab's tunnels all end on peer3300, so it has ONE group: there, ``-n auto``
cannot run two tunnels at once. To see groups really split across workers, a topology
with two disjoint sets (the XGS 136's tunnels moved to a fourth appliance) is run through
a real ``pytest -n 2`` in a subprocess with the suite's own plugin and
``pytest_generate_tests``; only the ``tunnel`` fixture is replaced (by one that records
which worker got which parameter), because the point is the scheduling, not a lab.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ipsec_hil.lab.cases import appliance_groups
from ipsec_hil.lab.topology import load_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY

REPO = Path(__file__).resolve().parents[2]
VIRTUAL = REPO / "topologies" / "virtual.yaml"

PEER136 = """  peer136:
    role: appliance
    model: xgs3300
    ports:
      port8:  {ipv4: 203.0.113.131/26, ipv6: "2001:db8:2::3/64", mtu: 9000, rate_mbit: 100}
      lan:    {ipv4: 198.51.100.129/26, ipv6: "fd00:d::1/64", mtu: 1500, rate_mbit: 100}

"""


def two_sets_topology(path: Path, *, hardware: bool) -> Path:
    """The virtual lab's file with npu/many moved from peer3300 to a new appliance peer136.

    ``hardware=True`` also makes it a hardware lab whose hosts are ``mgmt: {local: true}``
    (so pytest does not start a virtual lab; nothing connects: the tunnel is replaced).
    """
    s = VIRTUAL.read_text(encoding="utf-8")
    s = s.replace("  bench:  ", PEER136 + "  bench:  ", 1)
    old_link = "  - {a: xgs136.port8, b: peer3300.port8, rate_mbit: 100, queue_kib: 128}"
    assert old_link in s, "topologies/virtual.yaml changed: update this test's edit"
    s = s.replace(old_link, "  - {a: xgs136.port8, b: peer136.port8, rate_mbit: 100, queue_kib: 128}  #")
    s = s.replace("remote: {host: peer3300, port: port8,", "remote: {host: peer136, port: port8,")
    if hardware:
        s = s.replace("virtual: true", "virtual: false", 1)
        s = s.replace("    role: appliance\n", "    role: appliance\n    mgmt: {local: true}\n")
    path.write_text(s, encoding="utf-8")
    return path


def test_virtual_lab_is_one_group_because_everything_ends_on_peer3300():
    groups = appliance_groups(load_topology(VIRTUAL, models=REGISTRY))
    assert set(groups) == {"lab", "npu", "many", "natt", "natt136", "rekey136", "rekey3300", "expire136", "expire3300",
                           "win64x136", "win64x3300", "esn136", "esn3300"}
    assert set(groups.values()) == {"dut3300+peer3300+xgs136"}


def test_disjoint_appliance_sets_are_separate_groups(tmp_path):
    groups = appliance_groups(load_topology(two_sets_topology(tmp_path / "two.yaml", hardware=False), models=REGISTRY))
    assert groups == {"lab": "dut3300+peer3300", "npu": "peer136+xgs136", "many": "peer136+xgs136",
                      "natt": "dut3300+peer3300", "natt136": "peer136+xgs136",
                      "rekey136": "peer136+xgs136", "rekey3300": "dut3300+peer3300",
                      "expire136": "peer136+xgs136", "expire3300": "dut3300+peer3300",
                      "win64x136": "peer136+xgs136", "win64x3300": "dut3300+peer3300",
                      "esn136": "peer136+xgs136", "esn3300": "dut3300+peer3300"}


def test_a_chain_of_shared_appliances_is_one_group(tmp_path):
    """a-b and b-c share b: one set, although a and c have no tunnel between them."""
    t = load_topology(VIRTUAL, models=REGISTRY)
    assert appliance_groups(t)["lab"] == appliance_groups(t)["many"]


CONFTEST = '''
import json, os
import pytest

pytest_plugins = ["ipsec_hil.pytest_plugin"]

@pytest.fixture(scope="session")
def tunnel(request):
    """Stands in for the suite's tunnel fixture: records where each parameter was set up."""
    case = request.param
    with open(os.environ["H10_LOG"], "a") as f:
        f.write(json.dumps({"event": "up", "tunnel": case.tunnel, "case": case.id,
                            "worker": os.environ.get("PYTEST_XDIST_WORKER", "master"),
                            "pid": os.getpid()}) + "\\n")
    yield case
'''

TESTS = '''
import json, os, time

def _log(request, tunnel):
    with open(os.environ["H10_LOG"], "a") as f:
        f.write(json.dumps({"event": "test", "nodeid": request.node.nodeid, "tunnel": tunnel.tunnel,
                            "worker": os.environ.get("PYTEST_XDIST_WORKER", "master")}) + "\\n")

def test_one(tunnel, request):
    time.sleep(0.05)
    _log(request, tunnel)

def test_two(tunnel, request):
    time.sleep(0.05)
    _log(request, tunnel)
'''


#: Loaded by every Python process of the fake suite's run (the controller and each xdist
#: worker: they inherit PYTHONPATH): every call of the lab file loader, by process.
COUNT_PARSES = '''
import json, os
import ipsec_hil.lab.topology as _topology

_real = _topology.load_topology

def load_topology(path, *args, **kwargs):
    with open(os.environ["H10_PARSES"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "worker": os.environ.get("PYTEST_XDIST_WORKER", "controller"),
                            "path": str(path)}) + "\\n")
    return _real(path, *args, **kwargs)

_topology.load_topology = load_topology
'''


def _run_fake_suite(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict], list[dict]]:
    """(the run, its events, every lab file parse by process)."""
    topo = two_sets_topology(tmp_path / "two.yaml", hardware=True)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n", encoding="utf-8")
    (proj / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (proj / "test_fake.py").write_text(TESTS, encoding="utf-8")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(COUNT_PARSES, encoding="utf-8")
    log, parses = tmp_path / "events.jsonl", tmp_path / "parses.jsonl"
    env = dict(os.environ, H10_LOG=str(log), H10_PARSES=str(parses), PYTHONPATH=f"{site}{os.pathsep}{REPO}")
    env.pop("PYTEST_ADDOPTS", None)
    for name in [k for k in env if k.startswith("PYTEST_XDIST_")]:  # this run's own, when it runs under -n
        env.pop(name)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "--topology", str(topo),
                           "-p", "no:hypothesispytest", *args, "test_fake.py"],
                          cwd=proj, env=env, capture_output=True, text=True, timeout=120)
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    loads = [json.loads(line) for line in parses.read_text().splitlines()] if parses.exists() else []
    return proc, events, loads


@pytest.fixture(scope="module")
def minus_n_2(tmp_path_factory) -> tuple[subprocess.CompletedProcess, list[dict], list[dict]]:
    """One ``pytest -n 2`` of the fake suite, read by the tests below."""
    return _run_fake_suite(tmp_path_factory.mktemp("n2"), "-n", "2")


def test_minus_n_defaults_to_loadgroup_and_keeps_each_set_on_one_worker(minus_n_2):
    proc, events, _ = minus_n_2
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    tests = [e for e in events if e["event"] == "test"]
    ups = [e for e in events if e["event"] == "up"]
    # 2 tests x (lab: 8 configurations, npu: 8, many: 1) = 34
    assert len(tests) == 34, out[-2000:]
    # loadgroup's nodeid suffix is the proof that the group marks reached xdist
    assert all(e["nodeid"].endswith(("@dut3300+peer3300", "@peer136+xgs136")) for e in tests), tests[:3]
    workers_of = {}
    for e in tests:
        workers_of.setdefault("lab" if e["tunnel"] == "lab" else "xgs136-set", set()).add(e["worker"])
    assert all(len(w) == 1 for w in workers_of.values()), workers_of
    # each configuration's tunnel is brought up once in the whole run
    cases = [e["case"] for e in ups]
    assert len(cases) == len(set(cases)) == 17, cases


def test_each_process_parses_the_lab_file_once(minus_n_2):
    """The controller parses --topology once; each worker rebuilds the run's context from
    the controller's one input and parses the file once (ipsec_hil.context) -- nowhere else
    (fixtures, parametrisation, hooks) is it parsed again."""
    proc, events, parses = minus_n_2
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    by_process: dict[str, list[str]] = {}
    for p in parses:
        by_process.setdefault(f"{p['worker']} (pid {p['pid']})", []).append(Path(p["path"]).name)
    assert sorted(k.split()[0] for k in by_process) == ["controller", "gw0", "gw1"], by_process
    assert all(files == ["two.yaml"] for files in by_process.values()), by_process


def test_an_explicit_dist_mode_is_respected(tmp_path):
    """--dist load given by the user: no @group suffix (loadgroup was not forced on)."""
    proc, events, _ = _run_fake_suite(tmp_path, "-n", "2", "--dist", "load")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    tests = [e for e in events if e["event"] == "test"]
    assert tests and not any("@" in e["nodeid"] for e in tests)
