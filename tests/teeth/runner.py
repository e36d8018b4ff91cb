"""Run the fault matrix on one running virtual lab, in ONE pytest run, and judge each cell.

Why one subprocess: the acceptance suite must be exercised exactly as a user runs it
(`python -m pytest NODES --topology RESOLVED`), with its own session-scoped tunnel
fixtures, against a lab whose faults are switched on from outside -- as a broken driver
would be. A pytest process per fault pays interpreter start, collection and bring-ups each
time; instead tests/teeth/stepper.py runs every node of the matrix several times in one
process: its healthy runs and one run per cell, the cell's fault switched on around it
(a fresh tunnel for faults that act on bring-up, matrix.FRESH). The subprocess runs in a
scratch rootdir (tests/lab_factory.py's suite_run) so its page and plots land there.

Step order per node: healthy run 1 (which builds the tunnel healthy), the cells, the
node's runs as another cell's green sample (below), then the other healthy runs -- a fault
that left damage behind shows as a false alarm (one fewer for a row whose every fault is
matrix.STATELESS: nothing is left behind to find, healthy_runs_of).

A cell's ``green`` sample (other tests of its configuration that must pass with its fault
on) runs in the same subprocess as the cell: each sample node gets one more step with the
cell's fault switched on around it. A sample node that is no row of this part is collected
for its sample runs alone. A sample counts only when it PASSED (a skip establishes nothing).

Verdict per cell (strict): the node must FAIL in the CALL phase with an AssertionError
(InvariantError is one) whose MESSAGE matches the cell's invariant words (and carries the
ledger table for counter invariants); for a ``setup_error`` cell, error in the SETUP phase
with the words in the message. A healthy run counts only when the node passed.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.lab_factory import subprocess_env, suite_run

from .matrix import AWAITING_TEST, FRESH, LEDGER_RE, STATELESS, Cell, FaultSpec, Row

TRAFFIC_SECONDS = "0.1"
"""``--traffic-seconds`` of the node runs: a page's 10 s stream runs 1 s (the fixture's
floor), its 30 s six streams 3 s. A fault breaks its test whatever the duration (a floor,
a count, a line), so the longer traffic of 0.2 bought no evidence: on 12-06, two workers,
the matrix took 435 CPU-s in 265 s at 0.2, 368 and 332 CPU-s in 234 and 207 s at 0.1
(issue 39's 10 minutes)."""


@dataclass(frozen=True)
class NodeResult:
    """One run of one node: outcome (passed | failed | error | skipped | xfailed | missing),
    and for a failure the phase, the exception class, whether it is an AssertionError and
    its message."""

    outcome: str
    message: str = ""
    phase: str = ""
    exc_type: str = ""
    assertion: bool = False
    seconds: float = 0.0

    def first_line(self, width: int = 110) -> str:
        line = next((ln.strip() for ln in self.message.splitlines() if ln.strip()), "")
        return line[:width]


def judge(cell: Cell, res: NodeResult) -> tuple[bool, str]:
    """Did the fault break the test as it must? (verdict, reason when not)."""
    if cell.setup_error:
        if res.outcome != "error" or res.phase != "setup":
            return False, f"expected an error at setup, got {res.outcome} ({res.phase or '-'}): {res.first_line()}"
    elif res.outcome != "failed" or res.phase != "call" or not res.assertion:
        return False, (f"expected the test's own assertion to fail in the call phase, got {res.outcome} "
                       f"({res.phase or '-'}, {res.exc_type or '-'}): {res.first_line()}")
    if not re.search(cell.expect, res.message):
        return False, f"{res.outcome} but the message does not name the invariant /{cell.expect}/: {res.first_line()}"
    if cell.ledger and not re.search(LEDGER_RE, res.message):
        return False, f"{res.outcome} without the ledger table in its message: {res.first_line()}"
    return True, ""


@dataclass
class CellOutcome:
    row: Row
    cell: Cell
    result: NodeResult
    broken: bool
    reason: str
    #: (node, its run with this cell's fault on) for each node of the cell's green sample
    green: list[tuple[str, NodeResult]] = field(default_factory=list)

    def green_failures(self) -> list[tuple[str, NodeResult]]:
        """Sample nodes that did not pass under the fault (a fault that breaks them too)."""
        return [(n, r) for n, r in self.green if r.outcome != "passed"]


@dataclass
class MatrixResult:
    """The cells' verdicts, the healthy runs, and what ``pytest -m MODEL`` selects."""

    cells: list[CellOutcome] = field(default_factory=list)
    healthy: list[dict[str, NodeResult]] = field(default_factory=list)  # one dict per healthy run
    rows: tuple[Row, ...] = ()
    registry: tuple[str, ...] = ()
    selected: dict[str, set[str]] = field(default_factory=dict)  # model -> functions it selects
    seconds: float = 0.0
    load: str = ""
    leftovers: list[str] = field(default_factory=list)
    """"after NODE TAG: host: ..." -- associations a tunnel's teardown left in an engine
    (the stepper flushed them before the next row; shown with any false alarm)."""
    parts: int = 1  # subprocesses (each on its own lab) the rows were split among
    #: (model, fault, why) -- faults of the registry with no cell on the model (matrix.yaml)
    absent: list[tuple[str, str, str]] = field(default_factory=list)

    def covered(self, model: str) -> set[str]:
        """Functions of ``model`` with teeth: a non-setup cell broken as required on its node."""
        return {c.row.function for c in self.cells
                if c.broken and not c.cell.setup_error and c.row.model == model}

    def per_model(self) -> dict[str, tuple[int, int]]:
        """{model: (functions covered, functions selected)}."""
        return {m: (len(self.covered(m) & sel), len(sel)) for m, sel in sorted(self.selected.items())}

    def uncovered(self) -> list[str]:
        """"model: function" selected on a model and not covered there."""
        return [f"{m}: {f}" for m, sel in sorted(self.selected.items()) for f in sorted(sel - self.covered(m))]

    def declared_gaps(self) -> dict[str, str]:
        """{"model: function": why} of the rows that declare a gap."""
        return {f"{r.model}: {r.function}": r.gap for r in self.rows if r.gap}

    def false_alarms(self) -> list[tuple[int, str, NodeResult]]:
        """Healthy runs of a node that did not pass -- but a skip of a row that declares its
        gap is that gap, listed by :meth:`declared_skips`, not an alarm."""
        out = []
        for i, run in enumerate(self.healthy, 1):
            for r in self.rows:
                if r.name not in run:  # no such run planned for the row (healthy_runs_of)
                    continue
                res = run[r.name]
                if res.outcome != "passed" and not (r.gap and res.outcome == "skipped"):
                    out.append((i, r.node, res))
        return out

    def declared_skips(self) -> list[str]:
        """Nodes of gap rows that skipped in some healthy run (shown in the figures)."""
        return [r.node for r in self.rows
                if r.gap and any(run.get(r.name, NodeResult("missing")).outcome == "skipped" for run in self.healthy)]

    def not_green(self) -> list[str]:
        """"NODE under FAULT: outcome: message" for each green-sample run that did not pass."""
        return [f"{n} under {c.cell.fault.label} (the fault of {c.row.name}): {r.outcome}: {r.first_line(400)}"
                for c in self.cells for n, r in c.green_failures()]

    def unnoticed_faults(self) -> list[str]:
        """Faults this run had cells of, none of them broken as required. (That every fault
        of the registry has a cell somewhere is checked on the table itself,
        tests/teeth/test_matrix_data.py: a model's shard only sees its own rows.)"""
        ran = {c.cell.fault.name for c in self.cells}
        noticed = {c.cell.fault.name for c in self.cells if c.broken}
        return [n for n in self.registry if n in ran and n not in noticed]


def _fault_json(spec: FaultSpec) -> dict:
    return {"host": spec.host, "name": spec.name, "params": spec.kwargs}


def item_name(node: str) -> str:
    """The pytest item name of a node id: ``function[params]``."""
    return node.split("::", 1)[1]


def green_tag(row: Row, cell: Cell) -> str:
    """The step tag of a green-sample run: the cell's fault and the row it belongs to."""
    return f"green {cell.fault.label} of {row.name}"


def green_nodes(rows: tuple[Row, ...]) -> list[str]:
    """The sample nodes of ``rows``' cells that are no row of ``rows`` (collected for their
    sample runs alone), in the table's order."""
    own = {r.node for r in rows}
    return list(dict.fromkeys(g for r in rows for c in r.cells for g in c.green if g not in own))


def healthy_runs_of(row: Row, healthy_runs: int) -> int:
    """How many healthy runs the row's node gets: ``healthy_runs``, one fewer (never below
    one) when every cell's fault is matrix.STATELESS and the row is not ``fresh``.

    Why: the healthy runs after the cells look for damage a fault left behind; a fault
    that only acts on each packet while switched on leaves none, and those rows hold the
    longest node runs (a rate, a conservation ledger, an every-size sweep: 231 of 1,328
    normalised node-run seconds of a 12-06 run were their second healthy runs)."""
    if row.fresh or not row.cells or any(c.fault.name not in STATELESS for c in row.cells):
        return healthy_runs
    return max(1, healthy_runs - 1)


def plan_steps(rows: tuple[Row, ...], healthy_runs: int) -> dict[str, list[dict]]:
    """{item name: steps}: healthy run 1, each cell, its runs as a green sample of other
    rows' cells, the remaining healthy runs (a sample node that is no row: its sample runs)."""
    steps: dict[str, list[dict]] = {}
    samples: dict[str, list[dict]] = {}
    for r in rows:
        for c in r.cells:
            for g in c.green:
                if g == r.node:
                    raise ValueError(f"{r.node}: {c.fault.label}: its own node in its green sample")
                samples.setdefault(item_name(g), []).append(
                    {"fault": _fault_json(c.fault), "fresh": c.fault.name in FRESH, "tag": green_tag(r, c)})
    for r in rows:
        if r.name in steps:
            raise ValueError(f"{r.node}: two rows share one node")
        healthy = [{"fault": None, "fresh": r.fresh, "tag": f"healthy{k}"}
                   for k in range(1, healthy_runs_of(r, healthy_runs) + 1)]
        cells = [{"fault": _fault_json(c.fault), "fresh": r.fresh or c.fault.name in FRESH, "tag": c.fault.label}
                 for c in r.cells]
        mine = [dict(s, fresh=s["fresh"] or r.fresh) for s in samples.pop(r.name, [])]
        steps[r.name] = healthy[:1] + cells + mine + healthy[1:]
    steps.update(samples)
    return steps


def run_matrix(lab, resolved: Path, rows: tuple[Row, ...], workdir: Path, *, healthy_runs: int,
               tag: str = "matrix", timeout: float = 3600.0
               ) -> tuple[list[CellOutcome], list[dict[str, NodeResult]], list[str]]:
    """Every row's node in ONE pytest run (tests/teeth/stepper.py); judge the cells.
    Returns the cells, the healthy runs and the engines' leftovers after teardowns."""
    workdir.mkdir(parents=True, exist_ok=True)
    results = workdir / f"{tag}.results.json"
    results.unlink(missing_ok=True)
    plan = workdir / f"{tag}.plan.json"
    plan.write_text(json.dumps({"run_dir": str(lab.run.path), "results": str(results),
                                "steps": plan_steps(rows, healthy_runs)}))
    args = [*dict.fromkeys(r.node for r in rows), *green_nodes(rows), f"--topology={resolved}", "-q", "--traffic-seconds",
            TRAFFIC_SECONDS, "-p", "tests.teeth.stepper",
            # each node judged by its own assertion; the configuration's health is
            # ipsec_hil.config_health's, proved by tests/health/test_config_health.py
            "--no-config-health"]
    try:
        proc = suite_run(args, workdir, timeout=timeout, env=subprocess_env(TEETH_PLAN=str(plan)))
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-4000:]
    except subprocess.TimeoutExpired as exc:
        rc, tail = -1, f"timeout after {exc.timeout:.0f} s"
    finally:
        lab.clear_faults()  # a subprocess that died mid-run leaves nothing switched on
    (workdir / f"{tag}.log").write_text(tail)
    got = json.loads(results.read_text()) if results.exists() else []
    found: dict[tuple[str, str], NodeResult] = {
        (g["name"], g["tag"]): NodeResult(g["outcome"], g["message"] + (f"\n[{g['torn']}]" if g.get("torn") else ""),
                                          g["phase"], g["type"], g["assertion"], g["seconds"])
        for g in got}
    missing = NodeResult("missing", f"no result from the matrix run (pytest exit {rc}): {tail[-800:]}")
    cells = []
    for r in rows:
        for c in r.cells:
            res = found.get((r.name, c.fault.label), missing)
            ok, why = judge(c, res)
            green = [(g, found.get((item_name(g), green_tag(r, c)), missing)) for g in c.green]
            cells.append(CellOutcome(r, c, res, ok, why, green))
    healthy = [{r.name: found.get((r.name, f"healthy{k}"), missing) for r in rows if k <= healthy_runs_of(r, healthy_runs)}
               for k in range(1, healthy_runs + 1)]
    leftovers = [f"after {g['name']} {g['tag']}: {x}" for g in got for x in g.get("leftovers", [])]
    return cells, healthy, leftovers


def merge_parts(rows: tuple[Row, ...], parts: list[tuple[list[CellOutcome], list[dict[str, NodeResult]], list[str]]]
                ) -> tuple[list[CellOutcome], list[dict[str, NodeResult]], list[str]]:
    """The results of several :func:`run_matrix` calls over disjoint rows as one: cells in
    the rows' order, healthy run k of every part as one run, leftovers together."""
    order = {r.name: i for i, r in enumerate(rows)}
    cells = sorted((c for p in parts for c in p[0]), key=lambda c: order[c.row.name])
    runs = max((len(p[1]) for p in parts), default=0)
    healthy = [{name: res for p in parts if k < len(p[1]) for name, res in p[1][k].items()} for k in range(runs)]
    return cells, healthy, [x for p in parts for x in p[2]]


class Collection:
    """``pytest -m MARKER --collect-only tests_hil`` started now, read later: the matrix's
    own run does not wait for it (each collection is ~10 s of interpreter and imports)."""

    def __init__(self, marker: str, topology: Path, cwd: Path) -> None:
        import os
        import sys

        env = dict(os.environ, PYTHONPATH=str(cwd))
        env.pop("PYTEST_ADDOPTS", None)
        self.marker = marker
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                                      "no:cacheprovider", "-m", marker, f"--topology={topology}", "tests_hil"],
                                     cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def functions(self, timeout: float = 300.0) -> set[str]:
        """The tests_hil functions ("file::name") the marker selects."""
        out, err = self.proc.communicate(timeout=timeout)
        nodes = [ln.strip() for ln in out.splitlines() if ln.startswith("tests_hil/") and "::" in ln]
        if self.proc.returncode != 0 or not nodes:
            raise RuntimeError(f"pytest -m {self.marker} --collect-only tests_hil failed (exit "
                               f"{self.proc.returncode}):\n{out[-2000:]}{err[-2000:]}")
        return {n.removeprefix("tests_hil/").split("[", 1)[0] for n in nodes}


# ------------------------------------------------------------------ the table


def _short(function: str) -> str:
    return function.split("::", 1)[1].removeprefix("test_")


def render(m: MatrixResult) -> str:
    """Markdown: per model the functions covered / selected, tests x faults, the cells'
    details, the healthy runs and the figures."""
    names = [n for n in m.registry if any(c.cell.fault.name == n for c in m.cells)]
    lines = ["# Fault matrix", "",
             "Each acceptance test (one representative node per model) against the virtual-lab faults "
             "that must break it. `FAIL` = the test's own assertion failed in its call phase, the "
             "message naming its invariant (`ERR` = a declared bring-up fault errored at setup: never "
             "a function's teeth alone); `pass!` = the fault did not break it as required. Last "
             "column: the same node on the healthy lab, every healthy run.", "",
             "| model | functions covered / selected |", "|---|---|"]
    for model, (cov, sel) in m.per_model().items():
        lines.append(f"| {model} | {cov} / {sel} |")
    head = ["test", "model", "node", *names, "healthy"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in m.rows:
        cols = []
        for n in names:
            mine = [c for c in m.cells if c.row is r and c.cell.fault.name == n]
            ok = "ERR" if mine and all(c.cell.setup_error for c in mine) else "FAIL"
            cols.append("" if not mine else (ok if all(c.broken for c in mine) else "pass!"))
        hs = [run[r.name].outcome for run in m.healthy if r.name in run]
        healthy = "pass" if hs and all(h == "passed" for h in hs) else ("/".join(hs) or "not run")
        lines.append("| " + " | ".join([_short(r.function), r.model, r.node.split("[", 1)[1].rstrip("]"),
                                        *cols, healthy]) + " |")
    lines += ["", "## Cells", "", "| test | model | fault (host) | outcome | verdict | s |", "|---|---|---|---|---|---|"]
    for c in m.cells:
        verdict = "broken as required" if c.broken else f"NOT BROKEN: {c.reason}"
        lines.append(f"| {_short(c.row.function)} | {c.row.model} | `{c.cell.fault.label}` | {c.result.outcome} | "
                     f"{verdict.replace('|', '/')} | {c.result.seconds:.1f} |")
    lines += ["", "## Other tests under each fault (green samples)", "",
              "The other half of \"a fault breaks its test\": with the cell's fault on, these other tests "
              "must still pass (`pass`); a fault that breaks everything proves little.", "",
              "| fault (host) | its test | other tests, each with the fault on |", "|---|---|---|"]
    for c in m.cells:
        if c.green:
            runs = "; ".join(f"{item_name(n)}: {'pass' if r.outcome == 'passed' else r.outcome.upper()}"
                             f" ({r.seconds:.1f} s)" for n, r in c.green)
        elif c.cell.green_none:
            runs = f"none: {c.cell.green_none}"
        else:
            continue
        lines.append(f"| `{c.cell.fault.label}` | {_short(c.row.function)} [{c.row.case_id}] | {runs.replace('|', '/')} |")
    if m.absent:
        lines += ["", "## Faults without a cell on a model (matrix.yaml's reasons)", "",
                  "| model | fault | why no cell |", "|---|---|---|"]
        lines += [f"| {model} | {name} | {why.replace('|', '/')} |" for model, name, why in m.absent]
    fa = m.false_alarms()
    unnoticed = m.unnoticed_faults()
    lines += ["", "## Figures", ""]
    lines += [f"- {model}: {cov} of {sel} test functions broken by a fault (strict verdict)"
              for model, (cov, sel) in m.per_model().items()]
    gaps = m.declared_gaps()
    lines += [f"- not covered: {', '.join(m.uncovered()) or 'none'}"
              + "".join(f"\n  - {k}: declared gap: {v}" for k, v in gaps.items() if k in m.uncovered()),
              f"- false alarms on the healthy lab: {len(fa)} in {len(m.healthy)} run(s) of {len(m.rows)} nodes"
              + "".join(f"\n  - run {i}: {node}: {res.outcome}: {res.first_line(width=1500)}" for i, node, res in fa),
              f"- associations a tunnel's teardown left in an engine (flushed before the next row): "
              + (str(len(m.leftovers)) if m.leftovers else "none") + "".join(f"\n  - {x}" for x in m.leftovers),
              f"- healthy runs that skipped (declared gaps, not passes): {', '.join(m.declared_skips()) or 'none'}",
              f"- faults noticed by no test: {', '.join(unnoticed) if unnoticed else 'none'}",
              f"- green-sample runs that did not pass under their fault: {len(m.not_green())} of "
              f"{sum(len(c.green) for c in m.cells)}" + "".join(f"\n  - {x}" for x in m.not_green()),
              f"- faults the matrix does not run (not counted as noticed): "
              + (", ".join(f"{k} ({v})" for k, v in AWAITING_TEST.items()) or "none"),
              f"- wall time: {m.seconds:.0f} s" + (f", rows split among {m.parts} subprocesses on labs of their own"
                                                    if m.parts > 1 else "")
              + (f" (load average before: {m.load})" if m.load else ""), ""]
    return "\n".join(lines)
