"""What each test measured, carried to the controller, and turned into the page.

Why through ``user_properties``: under xdist a test runs in a worker but the page must be
one document; pytest already ships each report's ``user_properties`` from the worker to the
controller, where ``pytest_runtest_logreport`` sees them. So a test's :class:`TestRecord`
(figures, ledger tables, invariants checked, plots) is serialised into one property at
teardown, and the controller assembles :class:`plugin.lab.report.PageEntry` records from
the reports: the outcome and reason from setup/call, the measurements from teardown.
Nothing secret is ever put into a record (ledgers hold counters, not keys).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from plugin.lab.measure import Check, Ledger
from plugin.lab.report import Figure, PageEntry, RunInfo, hardware_info, write_allure_files, write_page

log = logging.getLogger(__name__)

PROPERTY = "hil_record"
ENTRIES_KEY = pytest.StashKey[dict[str, dict[str, Any]]]()
#: Where this run's page was written (controller, after pytest_sessionfinish), so other
#: plugins (the gate) add to this run's page and never to a concurrent run's.
PAGE_PATH_KEY = pytest.StashKey[Path]()


@dataclass
class TestRecord:
    """A test's contribution to the page; the ``record`` fixture hands one to each test."""

    nodeid: str
    title: str
    page: str | None = None
    hardware: tuple[str, ...] = ()
    figures: list[Figure] = field(default_factory=list)
    ledgers: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    traffic_seconds: float = 0.0  # seconds of traffic the test asked for (concurrent streams count once)
    tunnel_case: str | None = None

    def figure(self, label: str, value: Any, unit: str = "") -> Any:
        """Record one figure for the page (and Allure); returns the value for chaining."""
        self.figures.append(Figure(label, value, unit))
        _allure_attach(f"{label}", f"{Figure(label, value, unit).text()}\n", "text")
        return value

    def ledger(self, ledger: Ledger) -> Ledger:
        """Record a counter ledger: the page's table, and CSV + table in Allure."""
        table = ledger.table()
        self.ledgers.append(table)
        _allure_attach(f"ledger {ledger.title}".strip() + ".csv", ledger.csv(), "csv")
        _allure_attach(f"ledger {ledger.title}".strip(), table, "text")
        return ledger

    def plot(self, path: str | os.PathLike[str]) -> None:
        self.plots.append(str(path))
        _allure_attach_file(Path(path), "png")

    def to_json(self) -> str:
        d = asdict(self)
        d["hardware"] = list(self.hardware)
        return json.dumps(d, default=str)

    @staticmethod
    def from_json(text: str) -> dict[str, Any]:
        return json.loads(text)


def _allure_attach(name: str, body: str, kind: str) -> None:
    try:
        import allure

        atype = {"text": allure.attachment_type.TEXT, "csv": allure.attachment_type.CSV,
                 "json": allure.attachment_type.JSON}[kind]
        allure.attach(body, name=name, attachment_type=atype)
    except Exception:  # allure not active or not installed: the page still has it
        pass


def _allure_attach_file(path: Path, kind: str) -> None:
    try:
        import allure

        atype = {"png": allure.attachment_type.PNG, "pcap": allure.attachment_type.PCAP}[kind]
        allure.attach.file(str(path), name=path.name, attachment_type=atype)
    except Exception:
        pass


# ----------------------------------------------------------------- controller side


def _entries(config: pytest.Config) -> dict[str, dict[str, Any]]:
    if ENTRIES_KEY not in config.stash:
        config.stash[ENTRIES_KEY] = {}
    return config.stash[ENTRIES_KEY]


def _reason(report: pytest.TestReport) -> str | None:
    if report.skipped:
        lr = report.longrepr
        if isinstance(lr, tuple) and len(lr) == 3:
            return str(lr[2]).removeprefix("Skipped: ")
        return str(lr)
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            return crash.message.split("\n", 1)[0][:300]
        return str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else None
    return None


def _outcome(report: pytest.TestReport) -> str:
    if report.skipped:
        return "skipped"
    if report.passed:
        return "passed"
    crash = getattr(report.longrepr, "reprcrash", None)
    msg = crash.message if crash is not None else str(report.longrepr)
    first = msg.split(":", 1)[0].strip().split(".")[-1]
    if report.when == "call" and first in ("InvariantError", "AssertionError", "assert", "Failed"):
        return "failed"
    if report.when == "call" and "InvariantError" in msg.split("\n", 1)[0]:
        return "failed"
    return "broken"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _CONFIG.get("config")
    if config is None or hasattr(config, "workerinput"):
        return
    if not report.nodeid.startswith("tests_hil"):
        return
    e = _entries(config).setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "duration": 0.0})
    e["duration"] = e.get("duration", 0.0) + float(report.duration or 0.0)
    if report.when in ("setup", "call") and not report.passed:
        if e.get("outcome") in ("passed", None):
            e["outcome"] = _outcome(report)
            e["reason"] = _reason(report)
    if report.when == "teardown":
        if report.failed and e.get("outcome") == "passed":
            e["outcome"] = "broken"
            e["reason"] = _reason(report)
        for name, value in report.user_properties:
            if name == PROPERTY:
                e["record"] = TestRecord.from_json(value)


_CONFIG: dict[str, pytest.Config] = {}


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG["config"] = config


def _page_entry(e: dict[str, Any]) -> PageEntry:
    r = e.get("record") or {}
    title = r.get("title") or e["nodeid"].split("::")[-1]
    return PageEntry(
        nodeid=e["nodeid"],
        title=title,
        outcome=e.get("outcome", "passed"),
        page=r.get("page"),
        hardware=tuple(r.get("hardware") or ()),
        reason=e.get("reason"),
        figures=[Figure(**f) for f in r.get("figures", [])],
        checks=[Check(**c) for c in r.get("checks", [])],
        ledgers=list(r.get("ledgers", [])),
        plots=list(r.get("plots", [])),
        duration=float(e.get("duration", 0.0)),
    )


def timing_note(entries, wall_seconds: float) -> str:
    """Wall time against the traffic the tests asked for (issue 5's budget: at most 1.3x the
    traffic seconds plus one bring-up per configuration)."""
    recs = [e.get("record") or {} for e in entries]
    traffic = sum(float(r.get("traffic_seconds") or 0.0) for r in recs)
    configs = len({r.get("tunnel_case") for r in recs if r.get("tunnel_case")})
    ratio = f"{wall_seconds / traffic:.2f}x" if traffic else "n/a"
    return (f"wall time {wall_seconds:,.0f} s for {traffic:,.0f} s of traffic asked ({ratio}), "
            f"{configs} tunnel configuration(s) brought up")


def write_page_and_allure_files(config: pytest.Config, started: _dt.datetime) -> Path | None:
    """Controller, end of run: the measurement page and Allure's run-level files."""
    from plugin.fixtures import build_appliances
    from plugin.session import active_topology, command_line, reports_dir, virtual_lab_of

    entries = _entries(config)
    if not entries:
        return None
    topology = active_topology(config)
    hardware = []
    try:
        apps, hosts = build_appliances(topology)
        try:
            for app in apps.values():
                hardware.append(hardware_info(app))
        finally:
            for h in hosts.values():
                h.close()
    except Exception as exc:  # the page says so rather than not existing
        log.warning("page: could not read the appliances' driver builds: %s", exc)
    lab = virtual_lab_of(config)
    finished = _dt.datetime.now(_dt.timezone.utc)
    notes = [f"virtual lab {lab.prefix}: every figure was counted from packets that crossed its namespaces"] if lab else []
    notes.append(timing_note(entries.values(), (finished - started).total_seconds()))
    run = RunInfo(
        title=f"IPsec offload acceptance, {topology.lab.name} lab",
        topology=str(topology.source or ""),
        virtual=bool(topology.lab.virtual),
        started=started,
        finished=finished,
        command=command_line(config),
        hardware=hardware,
        notes=notes,
    )
    page_entries = [_page_entry(e) for e in sorted(entries.values(), key=lambda x: x["nodeid"])]
    out = reports_dir(config)
    path = write_page(run, page_entries, out)
    config.stash[PAGE_PATH_KEY] = path
    alluredir = getattr(config.option, "allure_report_dir", None)
    if alluredir:
        write_allure_files(alluredir, run)
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.write_line(f"measurement page: {path}")
    return path
