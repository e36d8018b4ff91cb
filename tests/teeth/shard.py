"""The fault matrix of ONE model on its own virtual lab: every acceptance test fails on its
fault, passes without.

Why one shard per model: the whole matrix is ~30 minutes of node runs (three healthy runs
of every row, and its cells); the two shards run on two xdist workers at once, and each
splits its rows by tunnel configuration among ``TEETH_PARTS`` (default 2) pytest
subprocesses (tests/teeth/runner.py, tests/teeth/stepper.py), each on a lab of its own.
Rows are per (function, model) already, so a model's coverage is decided by its shard
alone. tests/teeth/test_fault_matrix_<model>.py each import this module and say which
model they run (the ``matrix_model`` fixture).

Every row's node runs ``TEETH_HEALTHY_RUNS`` times healthy (default 3: the acceptance
criterion is three clean runs) and once per cell with the cell's fault on, each cell
judged strictly by its own assertion's message. The table, with the functions covered /
selected for the model (what ``pytest -m MODEL`` selects from tests_hil), goes to the
terminal and to reports/fault-matrix-<model>.md.

``TEETH_ONLY=name,name`` keeps only the cells of those faults (debugging; coverage is
then not asserted). ``TEETH_WORK=DIR`` keeps the subprocess's plan, results and log there
(in DIR/<model>).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lab_factory import QUIET_RATE_MBIT, lab_fixture, start_lab

from . import matrix, runner

REPO = Path(__file__).resolve().parents[2]


__all__ = ["teeth_lab", "result", "test_every_cell_broken_by_its_fault",
           "test_every_acceptance_test_broken_by_a_fault_on_each_model",
           "test_no_false_alarm_on_the_healthy_lab", "test_every_fault_noticed_by_some_test"]


def report_path(model: str) -> Path:
    return REPO / "reports" / f"fault-matrix-{model}.md"


def _only() -> set[str]:
    return {x.strip() for x in os.environ.get("TEETH_ONLY", "").split(",") if x.strip()}


def _rows(model: str) -> tuple[matrix.Row, ...]:
    """The model's rows: all, or with TEETH_ONLY the rows having a cell of those faults
    (their other cells dropped)."""
    only = _only()
    if not only:
        return matrix.rows(model)
    out = []
    for r in matrix.rows(model):
        cells = tuple(c for c in r.cells if c.fault.name in only)
        if cells:
            out.append(matrix.Row(r.function, r.node, cells, r.note, r.fresh, r.gap))
    return tuple(out)


#: Every port and link at QUIET_RATE_MBIT: a fault's effect on a test does not depend on the
#: link's rate (the floors scale with it, plugin.lab.expect), but the engines' CPU does.
teeth_lab = lab_fixture(name="teeth_lab", rate_mbit=QUIET_RATE_MBIT)


#: a node's tunnel case in its parameters: ``[lab-v4in4-gcm]``, ``[npu-v6in6-cbc-own]``, ``[many-v4in4-gcm-c6]``
CASE_ID = re.compile(r"\[([A-Za-z0-9_]+-v[46]in[46]-(?:gcm|cbc)(?:-c\d+)?)")


def split_rows(rows: tuple[matrix.Row, ...], parts: int, healthy_runs: int) -> list[tuple[matrix.Row, ...]]:
    """``rows`` in ``parts`` groups of about equal work, whole tunnel configurations
    together (the rows of one configuration share its bring-up in one subprocess); the
    work of a row is its node runs (healthy runs + cells). Each group keeps the rows' order."""
    by_case: dict[str, list[matrix.Row]] = {}
    for r in rows:
        m = CASE_ID.search(r.node)
        by_case.setdefault(m.group(1) if m else r.node, []).append(r)
    work = {case: sum(healthy_runs + len(r.cells) for r in group) for case, group in by_case.items()}
    loads = [0] * parts
    member: dict[str, int] = {}
    for case in sorted(work, key=lambda c: -work[c]):
        k = loads.index(min(loads))
        member[case] = k
        loads[k] += work[case]
    out: list[list[matrix.Row]] = [[] for _ in range(parts)]
    for case, group in by_case.items():
        out[member[case]].extend(group)
    order = {r.name: i for i, r in enumerate(rows)}
    return [tuple(sorted(g, key=lambda r: order[r.name])) for g in out if g]


@pytest.fixture(scope="module")
def result(matrix_model, teeth_lab, tmp_path_factory, request) -> runner.MatrixResult:
    """The model's matrix, run in ``TEETH_PARTS`` (default 2) subprocesses at once, each on
    a virtual lab of its own (the shard's lab and ``TEETH_PARTS - 1`` more), the rows split
    by tunnel configuration; the results are merged before anything is judged.

    Why parts: a node run waits far more than it computes (SSH round trips, the settles'
    half-second pauses, rekey timers), so two subprocesses per model finish in little more
    than half the time on two cores (issue 15: the own tests in 10 minutes)."""
    from twin.faults import REGISTRY

    work = (Path(os.environ["TEETH_WORK"]) / matrix_model if os.environ.get("TEETH_WORK")
            else tmp_path_factory.mktemp(f"teeth-{matrix_model}"))
    rows = _rows(matrix_model)
    if not rows:
        pytest.fail(f"the fault matrix has no row on {matrix_model} (TEETH_ONLY={os.environ.get('TEETH_ONLY', '')})")
    healthy_runs = int(os.environ.get("TEETH_HEALTHY_RUNS", "3"))
    parts = split_rows(rows, max(1, int(os.environ.get("TEETH_PARTS", "2"))), healthy_runs)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    t0 = time.monotonic()
    collections = [runner.Collection(matrix_model, teeth_lab.resolved, REPO)]
    m = runner.MatrixResult(rows=rows, registry=tuple(REGISTRY), load=load)
    labs = [teeth_lab]
    try:
        for _ in parts[1:]:  # one at a time: a lab started before a failing one is still closed below
            labs.append(start_lab(tmp_path_factory, rate_mbit=QUIET_RATE_MBIT))
        with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="teeth-part") as pool:
            futures = [pool.submit(runner.run_matrix, lab.attach(), lab.resolved, part, work,
                                   healthy_runs=healthy_runs, tag=f"matrix-part{i}")
                       for i, (lab, part) in enumerate(zip(labs, parts), 1)]
            done = [f.result() for f in futures]
        m.cells, m.healthy, m.leftovers = runner.merge_parts(rows, done)
        m.selected = {c.marker: c.functions() for c in collections}
    finally:
        for c in collections:  # never leave a collection running past the fixture
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
        for extra in labs[1:]:
            extra.close()
    m.seconds = time.monotonic() - t0
    m.parts = len(parts)
    text = runner.render(m)
    report = report_path(matrix_model)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text)
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None:
        # around the fixture pytest captures fd 1: print past it, the table is the result
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            tr.write_line("")
            for line in text.splitlines():
                tr.write_line(line)
            tr.write_line(f"(written to {report}; subprocess logs and results in {work})")
    return m


def test_every_cell_broken_by_its_fault(result):
    """Every cell, except those of a row that declares its gap (reported in the table)."""
    bad = [f"{c.row.node} with {c.cell.fault.label}: {c.reason}" for c in result.cells
           if not c.broken and not c.row.gap]
    assert result.cells, "no cell ran"
    assert not bad, "faults that did not break their test as required:\n" + "\n".join(bad)


def test_every_acceptance_test_broken_by_a_fault_on_each_model(result):
    if _only():
        pytest.skip("TEETH_ONLY restricts the faults: coverage is not the whole matrix")
    gaps = result.declared_gaps()
    undeclared = [u for u in result.uncovered() if u not in gaps]
    assert not undeclared, (
        f"test functions with no strict teeth on a model they run on (covered/selected "
        f"{result.per_model()}): {undeclared}")
    closed = sorted(set(gaps) - set(result.uncovered()))
    assert not closed, f"declared gaps a cell now covers (remove the row's gap: in tests/teeth/matrix.yaml): {closed}"


def test_no_false_alarm_on_the_healthy_lab(result):
    alarms = result.false_alarms()
    assert len(result.healthy) >= 1
    assert not alarms, "healthy lab, no fault on, yet:\n" + "\n".join(
        f"run {i}: {node}: {res.outcome}: {res.message.strip()[:3000]}" for i, node, res in alarms) + "".join(
        f"\n(lab leftover {x})" for x in result.leftovers)


def test_every_fault_noticed_by_some_test(result):
    if _only():
        pytest.skip("TEETH_ONLY restricts the faults")
    assert not result.unnoticed_faults(), f"faults no acceptance test notices: {result.unnoticed_faults()}"
