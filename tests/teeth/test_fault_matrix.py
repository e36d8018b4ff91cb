"""The fault matrix on one virtual lab: every acceptance test fails on its fault, passes without.

One lab for the whole module (plugin.virtual_lab.start, always stopped). For each group
of cells sharing a fault: fault on, the nodes in one pytest subprocess, fault off (in
finally), each cell judged (tests/teeth/runner.py). Then the healthy run(s): every node
with no fault on, ``TEETH_HEALTHY_RUNS`` times (default 1; the acceptance criterion is 3
consecutive clean runs). The table goes to the terminal and to reports/fault-matrix.md.

``TEETH_ONLY=name,name`` runs only the groups of those faults (debugging; the coverage
figure is then not asserted).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from . import matrix, runner

pytestmark = [pytest.mark.needs_root]

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "reports" / "fault-matrix.md"


def _only() -> set[str]:
    return {x.strip() for x in os.environ.get("TEETH_ONLY", "").split(",") if x.strip()}


@pytest.fixture(scope="module")
def teeth_lab(tmp_path_factory):
    from plugin import virtual_lab
    from twin.lab import Lab

    vl = virtual_lab.start(REPO / "topologies" / "virtual.yaml", owner_pid=os.getpid())
    try:
        yield vl, Lab.attach(run_dir=vl.run_dir)
    finally:
        virtual_lab.stop(vl)


@pytest.fixture(scope="module")
def result(teeth_lab, tmp_path_factory, request) -> runner.MatrixResult:
    from twin.faults import REGISTRY

    vl, lab = teeth_lab
    work = tmp_path_factory.mktemp("teeth")
    only = _only()
    t0 = time.monotonic()
    m = runner.MatrixResult(rows=matrix.rows(), registry=tuple(REGISTRY))
    try:
        stepped = [(r, c) for r, c in matrix.stepped() if not only or c.fault.name in only]
        if stepped:
            m.cells += runner.run_stepped(lab, vl.resolved, stepped, work)
        for i, g in enumerate(matrix.groups(), 1):
            if only and g.fault.name not in only:
                continue
            m.cells += runner.run_group(lab, vl.resolved, g, work, tag=f"g{i:02d}-{g.fault.name}")
        order = {id(c): k for k, (_, c) in enumerate(matrix.all_cells())}
        m.cells.sort(key=lambda co: order[id(co.cell)])
        for k in range(int(os.environ.get("TEETH_HEALTHY_RUNS", "1"))):
            m.healthy.append(runner.run_healthy(vl.resolved, matrix.rows(), work, tag=f"healthy{k + 1}"))
    finally:
        lab.clear_faults()
    m.seconds = time.monotonic() - t0
    text = runner.render(m)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(text)
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None:
        # around the fixture pytest captures fd 1: print past it, the table is the result
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            tr.write_line("")
            for line in text.splitlines():
                tr.write_line(line)
            tr.write_line(f"(written to {REPORT}; subprocess logs in {work})")
    return m


def test_every_cell_broken_by_its_fault(result):
    bad = [f"{c.row.node} with {c.cell.fault.label}: {c.reason}" for c in result.cells if not c.broken]
    assert result.cells, "no cell ran"
    assert not bad, "faults that did not break their test as required:\n" + "\n".join(bad)


def test_every_acceptance_test_broken_by_a_fault(result):
    if _only():
        pytest.skip("TEETH_ONLY restricts the faults: coverage is not the whole matrix")
    missing = [r.function for r in result.rows if r not in result.broken_rows()]
    assert result.coverage_pct() == 100.0, f"acceptance tests no fault broke: {missing}"


def test_no_false_alarm_on_the_healthy_lab(result):
    alarms = result.false_alarms()
    assert not alarms, "healthy lab, no fault on, yet:\n" + "\n".join(
        f"run {i}: {node}: {res.outcome}: {res.first_line()}" for i, node, res in alarms)


def test_every_fault_noticed_by_some_test(result):
    if _only():
        pytest.skip("TEETH_ONLY restricts the faults")
    assert not result.unnoticed_faults(), f"faults no acceptance test notices: {result.unnoticed_faults()}"
