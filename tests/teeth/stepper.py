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
``$TEETH_PLAN``: ``{"run_dir": RUN, "results": PATH, "steps": {name: [step, ...]}}`` where
``name`` is the node's ``function[params]`` and a step is ``{"fault": {host, name, params}
or null (a healthy run), "fresh": bool, "tag": str}``. A ``fresh`` step runs on a tunnel
built while its fault is on: the session's tunnel fixture of the node is finalized before
the step and again after it (the fault off), so the next run builds it healthy.
Faults are written with ``ipsec_hil_twin.faults`` into the lab's host directories (this plugin is
part of the project's tests, not of the suite's plugin/ipsec_hil/, which never imports twin).

Per run it records what the strict verdict needs (tests/teeth/runner.py judge), from the
exception itself rather than from a junit text that mixes in the test's source lines: the
phase that failed (setup | call | teardown), the exception's class and whether it is an
AssertionError (InvariantError is one), and ``str(exception)`` -- the message. And what a
tunnel's teardown during the step left in the lab's engines (``leftovers``, flushed: see
:func:`_flush_leftovers`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

_PLAN: dict[str, Any] | None = None
_FAILURE = pytest.StashKey[list]()


def _plan() -> dict[str, Any] | None:
    global _PLAN
    if _PLAN is None and os.environ.get("TEETH_PLAN"):
        _PLAN = json.loads(Path(os.environ["TEETH_PLAN"]).read_text())
    return _PLAN


def _switch(run_dir: str, f: dict[str, Any], on: bool) -> None:
    from ipsec_hil_twin import faults as F
    from ipsec_hil_twin.lifecycle.lab import control_request
    from ipsec_hil_twin.machinery.runtime import RunDir

    hd = RunDir(run_dir).host_dir(f["host"])
    if on:
        F.set_fault(hd, f["name"], **f.get("params", {}))
    else:
        F.clear_fault(hd, f["name"])
    try:  # the engine re-reads faults.json now (its loops would within ~0.1 s anyway)
        control_request(hd.engine_sock, {"op": "faults"}, timeout=5.0)
    except (OSError, ValueError) as exc:
        print(f"stepper: engine of {f['host']} not poked ({exc}); it re-reads within 0.1 s")
        time.sleep(0.3)
    if not on:
        _lab_settled(run_dir)


#: Seconds an appliance may take to come back from a reboot a fault caused (the twin: ~2 s).
BACK_S = 120.0


def _lab_settled(run_dir: str) -> None:
    """Return once no appliance of the lab is rebooting, and none will for the fault just
    switched off (silent_reboot): the next run must find every appliance answering.

    Why: a reboot takes the appliance's sshd away for a few seconds; a run started inside
    that window fails at once (connection refused), and so does every run after it -- the
    whole rest of a shard once ran inside one reboot window. The supervisor is
    single-threaded and reboots from its loop, so its answer to a status request comes
    after any reboot under way; the fault is off by then, so its loop starts none later.
    """
    from ipsec_hil_twin.machinery.runtime import RunDir
    from ipsec_hil_twin.lifecycle.supervisor import request

    run = RunDir(run_dir)
    deadline = time.monotonic() + BACK_S
    while True:
        try:
            hosts = request(run, {"op": "status"}, timeout=BACK_S)["status"]["hosts"]
        except Exception as exc:  # noqa: BLE001 -- a lab without a supervisor answering: say so, go on
            print(f"stepper: lab status not read ({exc}); going on")
            return
        down = sorted(h for h, v in hosts.items() if v.get("state") not in (None, "up"))
        if not down or time.monotonic() > deadline:
            if down:
                print(f"stepper: {', '.join(down)} still not up after {BACK_S:g} s")
            return
        time.sleep(0.2)


#: what the last tunnel teardowns left in the lab's engines (flushed), for the step that ran them
_LEFT: list[str] = []


def _flush_leftovers(run_dir: str) -> list[str]:
    """After a tunnel's teardown no engine of the lab holds an association (one tunnel is up
    at a time here, and its teardown checked both ends' listings). Any still there -- the
    two halves of a child installed while its IKE_SA went, a fault's leftover -- are named
    and flushed, so the next row starts on a clean lab: once such an orphan outbound
    association, older than any new one, carried a whole later row's traffic into nothing
    and failed its every healthy run."""
    from ipsec_hil_twin.machinery.labruns import control_request
    from ipsec_hil_twin.machinery.runtime import RunDir

    found = []
    for hd in RunDir(run_dir).host_dirs():
        if not hd.engine_sock.exists():
            continue
        try:
            sas = control_request(hd.engine_sock, {"op": "list_sas"}, timeout=10.0)["sas"]
            if sas:
                control_request(hd.engine_sock, {"op": "flush"}, timeout=10.0)
        except (OSError, ValueError, KeyError) as exc:
            found.append(f"{hd.name}: engine not read ({exc})")
            continue
        if sas:
            found.append(f"{hd.name}: " + ", ".join(f"{s['direction']} {int(s['spi']):08x} of {s.get('conn') or '?'}"
                                                     for s in sas))
    return found


@pytest.hookimpl
def pytest_fixture_post_finalizer(fixturedef, request) -> None:
    plan = _plan()
    if plan is not None and fixturedef.argname == "tunnel":
        _LEFT.extend(_flush_leftovers(plan["run_dir"]))


def _finish_tunnel(item: pytest.Item) -> str:
    """Finalize the session-scoped ``tunnel`` fixture the node uses (its tunnel torn down,
    its cached value or bring-up error dropped): the next run builds it again."""
    defs = item._fixtureinfo.name2fixturedefs.get("tunnel")  # noqa: SLF001 -- pytest's own record
    if not defs:
        return ""
    try:
        # finish() reads only request.node (its error message); between runs the item's own
        # request is gone, so hand it the node
        defs[-1].finish(SimpleNamespace(node=item))
    except Exception as exc:  # noqa: BLE001 -- recorded with the step: the tunnel did not come down cleanly
        return f"tunnel teardown failed: {type(exc).__name__}: {exc}"
    return ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each failed phase's exception (class, AssertionError or not, message)."""
    report = yield
    if report.failed and call.excinfo is not None and _plan() is not None:
        exc = call.excinfo.value
        item.stash.setdefault(_FAILURE, []).append({
            "phase": call.when, "type": type(exc).__name__,
            "assertion": isinstance(exc, AssertionError), "message": str(exc)})
    return report


def _outcome(item: pytest.Item, reports: list[pytest.TestReport]) -> dict[str, Any]:
    """One run's verdict material: outcome, and for a failure its phase, type, message."""
    failures = item.stash.get(_FAILURE, [])
    for rep in reports:
        if rep.failed:
            f = next((x for x in failures if x["phase"] == rep.when), None) or {
                "phase": rep.when, "type": "?", "assertion": False, "message": rep.longreprtext[-2000:]}
            return {"outcome": "failed" if rep.when == "call" else "error", **f}
    for rep in reports:
        if rep.skipped:
            kind = "xfailed" if getattr(rep, "wasxfail", "") else "skipped"
            return {"outcome": kind, "phase": rep.when, "type": "", "assertion": False,
                    "message": getattr(rep, "wasxfail", "") or str(rep.longrepr)[-300:]}
    return {"outcome": "passed", "phase": "", "type": "", "assertion": False, "message": ""}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    plan = _plan()
    if plan is None:
        return None
    steps = plan["steps"].get(item.name, [])
    results: list[dict[str, Any]] = []
    path = Path(plan["results"])
    tr = item.config.pluginmanager.get_plugin("terminalreporter")
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for k, step in enumerate(steps):
        last = k == len(steps) - 1
        f = step.get("fault")
        t0 = time.monotonic()
        item.stash[_FAILURE] = []
        torn = _finish_tunnel(item) if step.get("fresh") else ""
        if f:
            _switch(plan["run_dir"], f, True)
        try:
            # between runs of one node, tear down to its parent: the node's own function
            # fixtures are finalized (and set up afresh next time) while the session's
            # tunnel stays; after the last run, pytest's real next item decides
            reports = runtestprotocol(item, nextitem=nextitem if last else item.parent, log=False)
        finally:
            if f:
                _switch(plan["run_dir"], f, False)
        if step.get("fresh"):
            torn = "; ".join(x for x in (torn, _finish_tunnel(item)) if x)
        res = _outcome(item, reports)
        left, _LEFT[:] = list(_LEFT), []
        results.append({"name": item.name, "tag": step["tag"], "fault": f, **res, "torn": torn,
                        "leftovers": left, "seconds": round(time.monotonic() - t0, 2)})
        if tr is not None:  # the terminal shows one letter per run
            tr.write({"passed": ".", "failed": "F", "error": "E", "skipped": "s", "xfailed": "x"}[res["outcome"]])
    done = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(done + results))
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
