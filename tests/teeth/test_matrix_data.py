"""The fault matrix's data is complete and consistent (no root, no lab).

- every test function of tests_hil/ (as pytest collects it with the default virtual
  topology) has a row, and every row's node id is one pytest collects;
- every cell names a registered fault with parameters the registry accepts, on an
  appliance of the virtual lab; child_never_up names a child the node's tunnel really has;
- the runner's junit reading and its verdict rule behave (pass, fail, setup error, wrong
  words, missing ledger).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from . import matrix, runner

REPO = Path(__file__).resolve().parents[2]
VIRTUAL = REPO / "topologies" / "virtual.yaml"


@pytest.fixture(scope="module")
def collected() -> list[str]:
    """Node ids of tests_hil/ as pytest collects them (collect-only starts no lab)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTEST_ADDOPTS", None)
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          f"--topology={VIRTUAL}", "tests_hil"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    nodes = [ln.strip() for ln in res.stdout.splitlines() if ln.startswith("tests_hil/") and "::" in ln]
    assert res.returncode == 0 and nodes, f"collection of tests_hil failed (exit {res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
    return nodes


def test_every_acceptance_function_has_a_row(collected):
    functions = {n.removeprefix("tests_hil/").split("[", 1)[0] for n in collected}
    rows = {r.function for r in matrix.rows()}
    assert not functions - rows, f"acceptance tests missing from tests/teeth/matrix.py: {sorted(functions - rows)}"
    assert not rows - functions, f"rows for tests that no longer exist: {sorted(rows - functions)}"
    assert len(rows) == len(matrix.rows()), "one row per test function"


def test_every_row_node_is_collected_and_has_cells(collected):
    for r in matrix.rows():
        assert r.node in collected, f"{r.node}: not a node pytest collects from tests_hil (virtual topology)"
        assert r.cells, f"{r.function}: no fault breaks it (a gap must be a cell or a note, not silence)"


def test_function_names_unique_across_files(collected):
    """The runner matches junit testcases by name (function[params]); names must not collide."""
    names = [n.split("::", 1)[1].split("[", 1)[0] for n in collected]
    by_name: dict[str, set[str]] = {}
    for n in collected:
        by_name.setdefault(n.split("::", 1)[1].split("[", 1)[0], set()).add(n.split("::", 1)[0])
    dup = {k: v for k, v in by_name.items() if len(v) > 1}
    assert names and not dup, f"test names defined in more than one file: {dup}"


def test_cells_name_registered_faults_on_lab_appliances():
    from plugin.lab.topology import load_topology
    from twin.faults import REGISTRY, get_fault

    appliances = {h.name for h in load_topology(VIRTUAL).appliances()}
    for r, c in matrix.all_cells():
        f = get_fault(c.fault.name)  # raises naming the known ones
        f.coerce(c.fault.kwargs)  # raises naming a bad parameter
        assert c.fault.host in appliances, f"{r.node}: {c.fault.label}: no appliance {c.fault.host!r}"
    assert {c.fault.name for _, c in matrix.all_cells()} <= set(REGISTRY)


def test_child_never_up_names_a_child_of_the_nodes_tunnel():
    from plugin.fixtures import tunnel_cases
    from plugin.lab.provision import TunnelPlan, child_plans
    from plugin.lab.topology import load_topology

    topo = load_topology(VIRTUAL)
    cases = {c.id: c for c in tunnel_cases(topo)}
    for r, c in matrix.all_cells():
        if c.fault.name != "child_never_up":
            continue
        case = cases[r.case_id]
        kids = [k.name for k in child_plans(TunnelPlan.from_topology(topo, case.tunnel), case.config)]
        assert c.fault.kwargs["child"] in kids, f"{r.node}: child {c.fault.kwargs['child']!r} not in {kids}"


def test_groups_cover_every_cell_once():
    seen = [(r.node, c) for g in matrix.groups() for r, c in g.members] + [(r.node, c) for r, c in matrix.stepped()]
    assert sorted(map(repr, seen)) == sorted(repr((r.node, c)) for r, c in matrix.all_cells())
    for g in matrix.groups():
        assert len(set(g.nodes)) == len(g.nodes), f"{g.fault.label}: a node twice in one run"
        assert all(c.fault == g.fault for _, c in g.members)
        assert g.fault.name in matrix.ALONE
    assert not any(c.fault.name in matrix.ALONE for _, c in matrix.stepped())


JUNIT = textwrap.dedent("""\
    <?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
    <testcase classname="" name="test_a[lab-v4in4-gcm]" time="1.5"/>
    <testcase classname="" name="test_b[lab-v4in4-gcm]" time="2.0"><failure message="InvariantError: invariant broken: the peer's ESP input equals the engine's encrypt count">E   appliance  counter  before  after  delta</failure></testcase>
    <testcase classname="" name="test_c[lab-v4in4-gcm]" time="0.1"><error message="failed on setup with &quot;ProvisionError: tunnel lab (hil-lab-v4v4-gcm): 0 of 1 children established&quot;">trace</error></testcase>
    <testcase classname="" name="test_d[lab-v4in4-gcm]" time="0.1"><skipped message="no tunnel"/></testcase>
    </testsuite></testsuites>
""")


def test_parse_junit_and_judge(tmp_path):
    p = tmp_path / "j.xml"
    p.write_text(JUNIT)
    res = runner.parse_junit(p)
    assert {k: v.outcome for k, v in res.items()} == {
        "test_a[lab-v4in4-gcm]": "passed", "test_b[lab-v4in4-gcm]": "failed",
        "test_c[lab-v4in4-gcm]": "error", "test_d[lab-v4in4-gcm]": "skipped"}
    f = matrix.fault("dut3300", "drop_every", n=50)
    counter = matrix.Cell(f, r"invariant broken: the peer's ESP input", ledger=True)
    assert runner.judge(counter, res["test_b[lab-v4in4-gcm]"]) == (True, "")
    ok, why = runner.judge(counter, res["test_a[lab-v4in4-gcm]"])
    assert not ok and "expected failed, got passed" in why
    ok, why = runner.judge(matrix.Cell(f, r"something else"), res["test_b[lab-v4in4-gcm]"])
    assert not ok and "does not name the invariant" in why
    no_ledger = runner.NodeResult("failed", "invariant broken: the peer's ESP input x", "")
    ok, why = runner.judge(counter, no_ledger)
    assert not ok and "without the ledger" in why
    setup = matrix.Cell(f, r"children established", setup_error=True)
    assert runner.judge(setup, res["test_c[lab-v4in4-gcm]"])[0]
    # a bring-up error is not a failure of the test's own invariant
    assert not runner.judge(matrix.Cell(f, r"children established"), res["test_c[lab-v4in4-gcm]"])[0]


def test_render_and_figures():
    row = matrix.rows()[0]
    cell = row.cells[0]
    m = runner.MatrixResult(rows=(row,), registry=("child_never_up", "replay"))
    m.cells = [runner.CellOutcome(row, cell, runner.NodeResult("error", "0 of 1 children established"), True, "")]
    m.healthy = [{row.name: runner.NodeResult("passed")}]
    assert m.coverage_pct() == 100.0 and m.false_alarms() == [] and m.unnoticed_faults() == ["replay"]
    text = runner.render(m)
    assert "| all_children_established | lab-v4in4-gcm | FAIL | pass |" in text
    assert "faults noticed by no test: replay" in text
    m.healthy = [{row.name: runner.NodeResult("failed", "boom")}]
    assert [(i, n) for i, n, _ in m.false_alarms()] == [(1, row.node)]
