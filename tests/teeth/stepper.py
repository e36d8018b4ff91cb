"""pytest plugin for the fault-matrix subprocess: run each selected node once per fault.

Why: a pytest process per (fault, node) pays interpreter start, collection and a tunnel
bring-up every time (~35 s on a loaded 2-core machine), which alone would exceed the
matrix's time budget. Faults that act on a running tunnel (drops, corruption, replay,
wrong next header, PMTU behaviour) do not need a fresh tunnel, so one subprocess runs
every such cell: for each collected node, each fault of its plan is switched on, the
node runs (setup, call, teardown, through pytest's own ``runtestprotocol``, so the
session-scoped tunnel stays up between runs as for consecutive tests), the fault is
switched off (always) and the outcome is written to a JSON results file. The same
mechanism as pytest-rerunfailures (``runtestprotocol`` on one item more than once); between
runs the item is torn down to its parent, else pytest would keep it "set up" and the next
run would find its function fixtures finalized but never filled again.

Loaded with ``-p tests.teeth.stepper``; the plan is the JSON file named by
``$TEETH_PLAN``: ``{"run_dir": RUN, "results": PATH, "steps": {name: [fault, ...]}}``
where ``name`` is the node's ``function[params]`` and a fault is ``{host, name, params}``.
Faults are written with ``twin.faults`` into the lab's host directories (this plugin is
part of the project's tests, not of the suite's plugin/, which never imports twin).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

_PLAN: dict[str, Any] | None = None


def _plan() -> dict[str, Any] | None:
    global _PLAN
    if _PLAN is None and os.environ.get("TEETH_PLAN"):
        _PLAN = json.loads(Path(os.environ["TEETH_PLAN"]).read_text())
    return _PLAN


def _switch(run_dir: str, f: dict[str, Any], on: bool) -> None:
    from twin import faults as F
    from twin.lab import control_request
    from twin.runtime import RunDir

    hd = RunDir(run_dir).host_dir(f["host"])
    if on:
        F.set_fault(hd, f["name"], **f.get("params", {}))
    else:
        F.clear_fault(hd, f["name"])
    try:  # the engine re-reads faults.json now (its loops would within ~0.1 s anyway)
        control_request(hd.engine_sock, {"op": "faults"}, timeout=5.0)
    except (OSError, ValueError):
        time.sleep(0.3)


def _outcome(reports: list[pytest.TestReport]) -> tuple[str, str, str]:
    """(passed|failed|error|skipped, first line, full text) from one run's reports."""
    for rep in reports:
        if rep.failed:
            kind = "failed" if rep.when == "call" else "error"
            crash = getattr(rep.longrepr, "reprcrash", None)
            if crash is not None:
                msg = crash.message
            else:
                lines = str(rep.longrepr or "").splitlines()
                msg = lines[-1] if lines else ""
            return kind, msg, rep.longreprtext
    for rep in reports:
        if rep.skipped:
            return "skipped", str(rep.longrepr)[-300:], ""
    return "passed", "", ""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    plan = _plan()
    if plan is None:
        return None
    steps = plan["steps"].get(item.name, [])
    results: list[dict[str, Any]] = []
    path = Path(plan["results"])
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for k, f in enumerate(steps):
        last = k == len(steps) - 1
        t0 = time.monotonic()
        _switch(plan["run_dir"], f, True)
        try:
            # between runs of one node, tear down to its parent: the node's own function
            # fixtures are finalized (and set up afresh next time) while the session's
            # tunnel stays; after the last run, pytest's real next item decides
            reports = runtestprotocol(item, nextitem=nextitem if last else item.parent, log=False)
        finally:
            _switch(plan["run_dir"], f, False)
        outcome, msg, text = _outcome(reports)
        results.append({"name": item.name, "fault": f, "outcome": outcome, "message": msg, "text": text,
                        "seconds": round(time.monotonic() - t0, 2)})
        # the terminal shows one letter per run
        tr = item.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write({"passed": ".", "failed": "F", "error": "E", "skipped": "s"}[outcome])
    done = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(done + results))
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
