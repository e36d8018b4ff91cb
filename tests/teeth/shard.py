"""The fault matrix of ONE model on its own virtual lab: every acceptance test fails on its
fault, passes without.

Why one shard per model: the whole matrix is ~30 minutes of node runs (three healthy runs
of every row, and its cells); the two shards run on two xdist workers at once, and each
splits its rows by their measured seconds among ``TEETH_PARTS`` (default 3) pytest
subprocesses (tests/teeth/runner.py, tests/teeth/stepper.py), each on a lab of its own.
Rows are per (function, model) already, so a model's coverage is decided by its shard
alone. tests/teeth/test_fault_matrix.py imports this module and parametrises the
``matrix_model`` fixture by the hardware registry's models (matrix.models()): one shard per
model, none written by hand; under ``--dist loadfile`` each shard is a work unit of its own
(tests/file_order.py shard_scope), so the shards still run on separate xdist workers.

Every row's node runs ``TEETH_HEALTHY_RUNS`` times healthy (default 2: once before its
cells, on the tunnel it builds, and once after them, where a fault that left damage behind
shows as a false alarm; a row whose every fault is matrix.STATELESS gets the first only:
such a fault leaves nothing behind to find) and once per cell with the cell's fault on, each cell judged
strictly by its own assertion's message; and the cheap nodes of the cells' green samples
run once more with a fault on that must leave them green -- further clean runs of the
configurations, each also evidence that the fault is specific.

Why 2, not 3 (issue 42: the matrix was 582 of the own tests' 2,354 worker-seconds): in a
run measured on 12-06 the healthy runs were 62 % of the XGS 136 shard's node-run seconds,
and a third run repeated the second's evidence (the same node, the same tunnel, after the
same cells); ``TEETH_HEALTHY_RUNS=3`` still runs three. The table, with the functions covered /
selected for the model (what ``pytest -m MODEL`` selects from tests_hil), goes to the
terminal and to reports/fault-matrix-<model>.md.

``TEETH_ONLY=name,name`` keeps only the cells of those faults (debugging; coverage is
then not asserted). ``TEETH_WORK=DIR`` keeps the subprocess's plan, results and log there
(in DIR/<model>).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.lab_factory import QUIET_RATE_MBIT, start_lab

from . import matrix, runner

REPO = Path(__file__).resolve().parents[2]


__all__ = ["teeth_lab", "result", "test_every_cell_broken_by_its_fault",
           "test_every_acceptance_test_broken_by_a_fault_on_each_model",
           "test_no_false_alarm_on_the_healthy_lab", "test_other_tests_stay_green_under_each_fault",
           "test_every_fault_noticed_by_some_test"]


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


@pytest.fixture(scope="module")
def teeth_lab(matrix_model, tmp_path_factory):
    """The shard's own virtual lab, one per model (``matrix_model`` is a module-scoped
    parameter: in one process the second model's shard gets a fresh lab, so a model's rows
    never meet what another's faults left -- a rebooted appliance, a torn-down tunnel).

    Every port and link at QUIET_RATE_MBIT: a fault's effect on a test does not depend on
    the link's rate (the floors scale with it, ipsec_hil.lab.expectations.expect), but the
    engines' CPU does."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the virtual lab: network namespaces, TUN)")
    lab = start_lab(tmp_path_factory, rate_mbit=QUIET_RATE_MBIT)
    try:
        yield lab
    finally:
        lab.close()


#: Seconds each row's node runs took (its healthy runs and cells together) in a measured
#: matrix run, by "model item-name": what split_rows balances. Written by
#: ``TEETH_WRITE_SECONDS=1 pytest tests/teeth/test_fault_matrix.py -k <model>`` (that model's
#: rows replaced); tests/teeth/test_matrix_data.py fails naming a row it lacks.
ROW_SECONDS = Path(__file__).with_name("row_seconds.json")


def load_row_seconds(path: Path = ROW_SECONDS) -> dict[str, float]:
    """{"model item-name": seconds}; a file that is not such a table fails naming it."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: line {exc.lineno}: {exc.msg}") from None
    seconds = data.get("seconds") if isinstance(data, dict) else None
    if not isinstance(seconds, dict) or not all(isinstance(v, (int, float)) for v in seconds.values()):
        raise ValueError(f"{path}: expected {{\"seconds\": {{\"model item-name\": number}}}}")
    return {str(k): float(v) for k, v in seconds.items()}


def row_key(row: matrix.Row) -> str:
    return f"{row.model} {row.name}"


def row_weights(rows: tuple[matrix.Row, ...], healthy_runs: int,
                seconds: dict[str, float] | None = None) -> dict[str, float]:
    """{item name: weight}: the measured seconds, else the row's node runs (healthy runs +
    cells + their green samples) at the median measured second a run (1 s when nothing is
    measured)."""
    seconds = {} if seconds is None else seconds
    runs = {r.name: runner.healthy_runs_of(r, healthy_runs) + sum(1 + len(c.green) for c in r.cells) for r in rows}
    known = [seconds[row_key(r)] / runs[r.name] for r in rows if row_key(r) in seconds]
    per_run = statistics.median(known) if known else 1.0
    return {r.name: seconds.get(row_key(r), runs[r.name] * per_run) for r in rows}


def split_rows(rows: tuple[matrix.Row, ...], parts: int, healthy_runs: int,
               seconds: dict[str, float] | None = None) -> list[tuple[matrix.Row, ...]]:
    """``rows`` in ``parts`` groups of about equal seconds (longest first, each to the
    least loaded part); each group keeps the rows' order.

    A row's weight: row_weights (``seconds`` from ROW_SECONDS). Why rows, not whole
    tunnel configurations: one configuration holds most of a model's time (npu-v4in4-gcm:
    315 of the XGS 136 shard's 700 node-run seconds, 12-05), and kept whole it alone set
    the shard's wall time; a part that shares a configuration with another brings its
    tunnel up once more (about a second on the virtual lab)."""
    weight = row_weights(rows, healthy_runs, seconds)
    loads = [0.0] * max(1, parts)
    member: dict[str, int] = {}
    for r in sorted(rows, key=lambda r: -weight[r.name]):
        k = loads.index(min(loads))
        member[r.name] = k
        loads[k] += weight[r.name]
    return [g for k in range(len(loads)) if (g := tuple(r for r in rows if member[r.name] == k))]


def measured_seconds(m: runner.MatrixResult) -> dict[str, float]:
    """{"model item-name": seconds} of every row's node runs in this result."""
    out: dict[str, float] = {}
    for c in m.cells:  # a cell's green samples run in its row's part: the row's seconds
        out[row_key(c.row)] = out.get(row_key(c.row), 0.0) + c.result.seconds + sum(r.seconds for _, r in c.green)
    for r in m.rows:
        out[row_key(r)] = out.get(row_key(r), 0.0) + sum(run[r.name].seconds for run in m.healthy if r.name in run)
    return {k: round(v, 1) for k, v in out.items()}


def write_row_seconds(model: str, measured: dict[str, float], path: Path = ROW_SECONDS) -> None:
    """Replace ``model``'s rows in ROW_SECONDS with this run's figures."""
    old = load_row_seconds(path) if path.exists() else {}
    keep = {k: v for k, v in old.items() if not k.startswith(f"{model} ")}
    merged = dict(sorted({**keep, **measured}.items()))
    path.write_text(json.dumps({"source": "tests/teeth/shard.py with TEETH_WRITE_SECONDS=1: seconds of each "
                                          "row's node runs (healthy runs and cells) in a measured matrix run",
                                "seconds": merged}, indent=1) + "\n")


@pytest.fixture(scope="module")
def result(matrix_model, teeth_lab, tmp_path_factory, request) -> runner.MatrixResult:
    """The model's matrix, run in ``TEETH_PARTS`` (default 3) subprocesses at once, each on
    a virtual lab of its own (the shard's lab and ``TEETH_PARTS - 1`` more), the rows split
    by their measured seconds (split_rows); the results are merged before anything is judged.

    Why parts: a node run waits far more than it computes (SSH round trips, the settles'
    half-second pauses, rekey timers, a health check's 5 s of pings): a shard used 148
    CPU-s in 415 s of wall time in a CI run of 12-05 (SELFTESTS_CPU_BY_FILE=1), so its
    parts share the cores with little loss (issue 15: the own tests in 10 minutes)."""
    from ipsec_hil_twin.faults import REGISTRY

    work = (Path(os.environ["TEETH_WORK"]) / matrix_model if os.environ.get("TEETH_WORK")
            else tmp_path_factory.mktemp(f"teeth-{matrix_model}"))
    rows = _rows(matrix_model)
    if not rows:
        pytest.fail(f"the fault matrix has no row on {matrix_model} (TEETH_ONLY={os.environ.get('TEETH_ONLY', '')})")
    healthy_runs = int(os.environ.get("TEETH_HEALTHY_RUNS", "2"))
    parts = split_rows(rows, max(1, int(os.environ.get("TEETH_PARTS", "3"))), healthy_runs,
                       load_row_seconds() if ROW_SECONDS.exists() else None)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    t0 = time.monotonic()
    collections = [runner.Collection(matrix_model, teeth_lab.resolved, REPO)]
    m = runner.MatrixResult(rows=rows, registry=tuple(REGISTRY), load=load,
                            absent=[a for a in matrix.ABSENT if a[0] == matrix_model])
    labs = [teeth_lab]  # every lab started, closed below (the shard's own by its fixture)
    lock = threading.Lock()

    def run_part(i: int, part: tuple[matrix.Row, ...]):
        """Part i on a lab of its own: part 1 on the shard's, the others each start theirs
        in their own thread, so the labs come up at once instead of one after the other
        (a lab is ~10 s of wall time on a loaded machine, mostly waiting for its daemons)."""
        if i == 1:
            lab = teeth_lab
        else:
            lab = start_lab(tmp_path_factory, rate_mbit=QUIET_RATE_MBIT)
            with lock:
                labs.append(lab)
        return runner.run_matrix(lab.attach(), lab.resolved, part, work, healthy_runs=healthy_runs,
                                 tag=f"matrix-part{i}")

    try:
        with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="teeth-part") as pool:
            futures = [pool.submit(run_part, i, part) for i, part in enumerate(parts, 1)]
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
    if os.environ.get("TEETH_WRITE_SECONDS") == "1" and not _only():
        write_row_seconds(matrix_model, measured_seconds(m))
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


def test_other_tests_stay_green_under_each_fault(result):
    """The other half of "a fault breaks its test": each cell's stated sample of other tests
    of its configuration passed with the fault on (matrix.yaml ``green``)."""
    assert sum(len(c.green) for c in result.cells) or _only(), "no green sample ran"
    assert not result.not_green(), "faults that broke tests they must leave alone:\n" + "\n".join(result.not_green())


def test_every_fault_noticed_by_some_test(result):
    if _only():
        pytest.skip("TEETH_ONLY restricts the faults")
    assert not result.unnoticed_faults(), f"faults no acceptance test notices: {result.unnoticed_faults()}"
