"""Run the fault matrix on one running virtual lab and judge each cell.

Why a subprocess per group: the acceptance suite must be exercised exactly as a user runs
it (`python -m pytest NODE --topology RESOLVED`), with its own session-scoped tunnel
fixture, against the lab whose fault is switched on from outside -- as a broken driver
would be. Cells that share one fault share one subprocess (one bring-up per
configuration); the fault is always cleared in ``finally``.

The subprocess gets ``--rootdir`` in a scratch directory so its measurement page and
plots land there, not in the repository's reports/ (which belongs to real runs);
``-c pytest.ini`` keeps the project's ini and root conftest.

Verdict per cell: the node must FAIL (or, for bring-up faults, ERROR at setup) and the
failure text must match the cell's invariant words (and carry the ledger table for counter
invariants). Healthy runs: every node passes with no fault on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from .matrix import LEDGER_RE, Cell, FaultSpec, Group, Row

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAFFIC_SECONDS = "0.2"


@dataclass(frozen=True)
class NodeResult:
    """What junit said about one node: passed | failed | error | skipped | missing."""

    outcome: str
    message: str = ""
    text: str = ""
    seconds: float = 0.0

    @property
    def detail(self) -> str:
        return f"{self.message}\n{self.text}"

    def first_line(self, width: int = 110) -> str:
        line = next((ln.strip() for ln in self.message.splitlines() if ln.strip()), "")
        return line[:width]


@dataclass
class RunOutput:
    """One pytest subprocess: per junit testcase name, its result; plus the process' tail."""

    results: dict[str, NodeResult]
    returncode: int
    seconds: float
    tail: str = ""


def parse_junit(path: Path) -> dict[str, NodeResult]:
    """junit XML -> {testcase name: NodeResult}. Names are "function[params]"."""
    out: dict[str, NodeResult] = {}
    rank = {"passed": 0, "skipped": 1, "error": 2, "failed": 3}
    root = ET.parse(path).getroot()
    for tc in root.iter("testcase"):
        name = tc.get("name", "")
        secs = float(tc.get("time") or 0.0)
        res = NodeResult("passed", seconds=secs)
        for child in tc:
            kind = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(child.tag)
            if kind is None:
                continue
            cand = NodeResult(kind, child.get("message", "") or "", child.text or "", secs)
            if rank[kind] > rank[res.outcome]:
                res = cand
        prev = out.get(name)
        if prev is None or rank[res.outcome] > rank[prev.outcome]:
            out[name] = res
    return out


def run_pytest(nodes: list[str], resolved: Path, workdir: Path, *, tag: str,
               timeout: float = 600.0, extra: tuple[str, ...] = (),
               env_extra: dict[str, str] | None = None) -> RunOutput:
    """``python -m pytest NODES --topology=RESOLVED`` in a scratch rootdir; junit parsed."""
    workdir.mkdir(parents=True, exist_ok=True)
    junit = workdir / f"{tag}.xml"
    junit.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", *nodes, f"--topology={resolved}", "-p", "no:cacheprovider",
           "-q", "--traffic-seconds", TRAFFIC_SECONDS, "--junitxml", str(junit),
           "--rootdir", str(workdir), "-c", str(REPO_ROOT / "pytest.ini"), *extra]
    env = dict(os.environ)
    env.update(env_extra or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTEST_ADDOPTS", None)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-4000:]
    except subprocess.TimeoutExpired as exc:
        rc, tail = -1, f"timeout after {exc.timeout:.0f} s"
    secs = time.monotonic() - t0
    (workdir / f"{tag}.log").write_text(tail)
    results = parse_junit(junit) if junit.exists() else {}
    for node in nodes:
        name = node.split("::", 1)[1]
        results.setdefault(name, NodeResult("missing", f"no junit result (pytest exit {rc})", tail[-1500:]))
    return RunOutput(results, rc, secs, tail)


def judge(cell: Cell, res: NodeResult) -> tuple[bool, str]:
    """Did the fault break the test as it must? (verdict, reason when not)."""
    want = "error" if cell.setup_error else "failed"
    if res.outcome != want:
        return False, f"expected {want}, got {res.outcome}: {res.first_line()}"
    text = res.detail
    if not re.search(cell.expect, text):
        return False, f"{want} but the text does not name the invariant /{cell.expect}/: {res.first_line()}"
    if cell.ledger and not re.search(LEDGER_RE, text):
        return False, f"{want} without the ledger table: {res.first_line()}"
    return True, ""


@dataclass
class CellOutcome:
    row: Row
    cell: Cell
    result: NodeResult
    broken: bool
    reason: str


@dataclass
class MatrixResult:
    cells: list[CellOutcome] = field(default_factory=list)
    healthy: list[dict[str, NodeResult]] = field(default_factory=list)  # one dict per healthy run
    rows: tuple[Row, ...] = ()
    registry: tuple[str, ...] = ()
    seconds: float = 0.0

    # -- the three figures
    def broken_rows(self) -> list[Row]:
        ok = {c.row.function for c in self.cells if c.broken}
        return [r for r in self.rows if r.function in ok]

    def coverage_pct(self) -> float:
        return 100.0 * len(self.broken_rows()) / len(self.rows) if self.rows else 0.0

    def false_alarms(self) -> list[tuple[int, str, NodeResult]]:
        out = []
        for i, run in enumerate(self.healthy, 1):
            for r in self.rows:
                res = run.get(r.name, NodeResult("missing"))
                if res.outcome != "passed":
                    out.append((i, r.node, res))
        return out

    def unnoticed_faults(self) -> list[str]:
        noticed = {c.cell.fault.name for c in self.cells if c.broken}
        return [n for n in self.registry if n not in noticed]


def set_fault(lab, spec: FaultSpec) -> None:
    lab.fault(spec.host, spec.name, **spec.kwargs)
    _poke(lab, spec.host)


def clear_fault(lab, spec: FaultSpec) -> None:
    lab.clear_fault(spec.host, spec.name)
    _poke(lab, spec.host)


def _poke(lab, host: str) -> None:
    """Make the engine re-read faults.json now (its loops would within ~0.1 s anyway)."""
    from twin.lab import control_request

    try:
        control_request(lab.host_dir(host).engine_sock, {"op": "faults"}, timeout=5.0)
    except (OSError, ValueError):
        time.sleep(0.3)


def run_group(lab, resolved: Path, group: Group, workdir: Path, tag: str) -> list[CellOutcome]:
    """Fault on, the group's nodes in one pytest, fault off (always); judge each cell."""
    set_fault(lab, group.fault)
    try:
        out = run_pytest(group.nodes, resolved, workdir, tag=tag)
    finally:
        clear_fault(lab, group.fault)
    cells = []
    for row, cell in group.members:
        res = out.results[row.name]
        ok, why = judge(cell, res)
        cells.append(CellOutcome(row, cell, res, ok, why))
    return cells


def run_stepped(lab, resolved: Path, members: list[tuple[Row, Cell]], workdir: Path,
                tag: str = "stepped") -> list[CellOutcome]:
    """Every cell in ONE pytest run: tests/teeth/stepper.py switches each cell's fault on,
    runs the node, switches it off. Nodes in table order, faults in table order per node."""
    import json

    steps: dict[str, list[dict]] = {}
    nodes: list[str] = []
    for row, cell in members:
        if row.node not in nodes:
            nodes.append(row.node)
        steps.setdefault(row.name, []).append(
            {"host": cell.fault.host, "name": cell.fault.name, "params": cell.fault.kwargs})
    results = workdir / f"{tag}.results.json"
    results.unlink(missing_ok=True)
    plan = workdir / f"{tag}.plan.json"
    workdir.mkdir(parents=True, exist_ok=True)
    plan.write_text(json.dumps({"run_dir": str(lab.run.path), "results": str(results), "steps": steps}))
    try:
        out = run_pytest(nodes, resolved, workdir, tag=tag, timeout=1200.0,
                         extra=("-p", "tests.teeth.stepper"), env_extra={"TEETH_PLAN": str(plan)})
    finally:
        for _, cell in members:  # a subprocess that died mid-run leaves nothing switched on
            clear_fault(lab, cell.fault)
    got = json.loads(results.read_text()) if results.exists() else []
    found: dict[tuple[str, str], NodeResult] = {}
    for r in got:
        spec = FaultSpec(r["fault"]["host"], r["fault"]["name"], tuple(sorted(r["fault"]["params"].items())))
        found[(r["name"], spec.label)] = NodeResult(r["outcome"], r["message"], r["text"], r["seconds"])
    cells = []
    for row, cell in members:
        res = found.get((row.name, cell.fault.label)) or NodeResult(
            "missing", f"no result from the stepped run (pytest exit {out.returncode})", out.tail[-1500:])
        ok, why = judge(cell, res)
        cells.append(CellOutcome(row, cell, res, ok, why))
    return cells


def run_healthy(resolved: Path, rows: tuple[Row, ...], workdir: Path, tag: str) -> dict[str, NodeResult]:
    out = run_pytest([r.node for r in rows], resolved, workdir, tag=tag)
    return {r.name: out.results[r.name] for r in rows}


# ------------------------------------------------------------------ the table


def _short(function: str) -> str:
    return function.split("::", 1)[1].removeprefix("test_")


def render(m: MatrixResult) -> str:
    """Markdown: tests x faults (fail = the fault broke the test as it must), the cells'
    details, the healthy runs and the three figures."""
    names = [n for n in m.registry if any(c.cell.fault.name == n for c in m.cells)]
    lines = ["# Fault matrix", "",
             "Each acceptance test (representative node) against the virtual-lab faults that must "
             "break it. `FAIL` = the test failed (or its bring-up errored) naming its invariant with "
             "the fault on; `pass!` = the fault did not break it as required; blank = not applicable. "
             "Last column: the same node on the healthy lab (every run).", ""]
    head = ["test", "node", *names, "healthy"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in m.rows:
        cols = []
        for n in names:
            mine = [c for c in m.cells if c.row.function == r.function and c.cell.fault.name == n]
            cols.append("" if not mine else ("FAIL" if all(c.broken for c in mine) else "pass!"))
        hs = [run.get(r.name, NodeResult("missing")).outcome for run in m.healthy]
        healthy = "pass" if hs and all(h == "passed" for h in hs) else ("/".join(hs) or "not run")
        lines.append("| " + " | ".join([_short(r.function), r.node.split("[", 1)[1].rstrip("]"), *cols, healthy]) + " |")
    lines += ["", "## Cells", "", "| test | fault (host) | outcome | verdict | s |", "|---|---|---|---|---|"]
    for c in m.cells:
        verdict = "broken as required" if c.broken else f"NOT BROKEN: {c.reason}"
        lines.append(f"| {_short(c.row.function)} | `{c.cell.fault.label}` | {c.result.outcome} | "
                     f"{verdict.replace('|', '/')} | {c.result.seconds:.1f} |")
    fa = m.false_alarms()
    unnoticed = m.unnoticed_faults()
    lines += ["", "## Figures", "",
              f"- acceptance tests broken by at least one fault: {len(m.broken_rows())} of {len(m.rows)} "
              f"({m.coverage_pct():.0f} %)",
              f"- false alarms on the healthy lab: {len(fa)} in {len(m.healthy)} run(s) of {len(m.rows)} nodes"
              + "".join(f"\n  - run {i}: {node}: {res.outcome}: {res.first_line()}" for i, node, res in fa),
              f"- faults noticed by no test: {', '.join(unnoticed) if unnoticed else 'none'}",
              f"- wall time: {m.seconds:.0f} s", ""]
    return "\n".join(lines)
