"""What each test measured, carried to the controller, and turned into the page's entries.

Why through ``user_properties``: under xdist a test runs in a worker but the page must be
one document; pytest already ships each report's ``user_properties`` from the worker to the
controller, where ``pytest_runtest_logreport`` sees them. So a test's :class:`TestRecord`
(figures, ledger tables, invariants checked, plots, a known issue's verdict) is serialised
into one property at teardown (JSON: the one form that crosses the process boundary), and
the controller (ipsec_hil.session.HilSession) gathers :class:`Entries` from the reports: the
outcome and reason from setup/call, the record from teardown -- typed again on arrival
(:meth:`TestRecord.from_json`), so the page's entries are made from typed records. Nothing secret is ever put into a record (ledgers hold
counters, not keys). No pytest hooks live here: this module is data and its conversions;
the page's sections it gives are typed (``ipsec_hil.lab.reporting.page``), rendered there.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import allure
import pytest

from ipsec_hil import config_health
from ipsec_hil.lab.measuring.measure import Check, Ledger
from ipsec_hil.lab.reporting.page import Bold, Bullets, Code, Item, Paragraph, Preformatted, Section, Subsection, Table
from ipsec_hil.lab.reporting.report import Figure, PageEntry

PROPERTY = "hil_record"


@dataclass
class KnownIssueVerdict:
    """What a test found of a known issue: reproduced (an expected failure) or not (may be fixed)."""

    number: int
    summary: str
    reproduced: bool
    detail: str = ""

    def text(self) -> str:
        if self.reproduced:
            return f"issue {self.number} reproduced ({self.summary}): {self.detail}"
        return f"issue {self.number} did not reproduce: may be fixed ({self.summary})"


@dataclass
class TestRecord:
    """A test's contribution to the page; the ``record`` fixture hands one to each test."""

    __test__ = False  # not a test class, whatever its name

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
    known_issue: KnownIssueVerdict | None = None

    def figure(self, label: str, value: Any, unit: str = "") -> Any:
        """Record one figure for the page (and Allure); returns the value for chaining."""
        self.figures.append(Figure(label, value, unit))
        allure.attach(f"{Figure(label, value, unit).text()}\n", name=label, attachment_type=allure.attachment_type.TEXT)
        return value

    def ledger(self, ledger: Ledger) -> Ledger:
        """Record a counter ledger: the page's table, and CSV + table in Allure."""
        table = ledger.table()
        self.ledgers.append(table)
        name = f"ledger {ledger.title}".strip()
        allure.attach(ledger.csv(), name=f"{name}.csv", attachment_type=allure.attachment_type.CSV)
        allure.attach(table, name=name, attachment_type=allure.attachment_type.TEXT)
        return ledger

    def table(self, title: str, text: str) -> None:
        """A preformatted table for the page (shown like a ledger) and Allure (e.g. search trials)."""
        self.ledgers.append(f"{title}\n{text}")
        allure.attach(text, name=title, attachment_type=allure.attachment_type.TEXT)

    def plot(self, path: str | os.PathLike[str]) -> None:
        self.plots.append(str(path))
        allure.attach.file(str(path), name=Path(path).name, attachment_type=allure.attachment_type.PNG)

    def to_json(self) -> str:
        """The record as one JSON text: how it crosses from an xdist worker to the controller
        (a report's ``user_properties``); :meth:`from_json` gives the typed record back."""
        d = asdict(self)
        d["hardware"] = list(self.hardware)
        return json.dumps(d, default=str)

    @classmethod
    def from_json(cls, text: str) -> TestRecord:
        d = json.loads(text)
        ki = d.pop("known_issue", None)
        return cls(**{**d, "hardware": tuple(d.get("hardware") or ()),
                      "figures": [Figure(**f) for f in d.get("figures") or []],
                      "checks": [Check(**c) for c in d.get("checks") or []]},
                   known_issue=KnownIssueVerdict(**ki) if ki else None)


# ----------------------------------------------------------------- controller side


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


class Entries:
    """Every acceptance test of the run, by node id: outcome, reason, duration, record."""

    def __init__(self) -> None:
        self.by_nodeid: dict[str, dict[str, Any]] = {}
        self.config_health: dict[str, dict[str, Any]] = {}  # case id -> its verdict (config_health)

    def __bool__(self) -> bool:
        return bool(self.by_nodeid)

    def add(self, report: pytest.TestReport) -> None:
        e = self.by_nodeid.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "duration": 0.0})
        e["duration"] = e.get("duration", 0.0) + float(report.duration or 0.0)
        if report.when in ("setup", "call") and not report.passed:
            if e.get("outcome") in ("passed", None):
                e["outcome"] = _outcome(report)
                e["reason"] = _reason(report)
                # an expected failure (a known issue reproducing) is a verdict, not a test that did not run
                e["xfail"] = bool(getattr(report, "wasxfail", None) is not None)
        if report.when == "teardown":
            if report.failed and e.get("outcome") == "passed":
                e["outcome"] = "broken"
                e["reason"] = _reason(report)
            for name, value in report.user_properties:
                if name == PROPERTY:
                    e["record"] = TestRecord.from_json(value)
            for verdict in config_health.findings_of(report.user_properties):
                self._configuration_health(verdict, report.nodeid)

    def _configuration_health(self, verdict: dict[str, Any], carrier: str) -> None:
        """A configuration's health verdict (ipsec_hil.config_health), carried by its last
        test (``carrier``, whose teardown raised on a defect): the tables go to every test of
        that configuration; a defect fails every one that passed, and the carrier."""
        case = verdict["case"]
        self.config_health[case] = verdict
        first = "appliance health changed around the configuration (driver defect)"
        for e in self.by_nodeid.values():
            rec = e.get("record")
            if rec is None or rec.tunnel_case != case:
                continue
            rec.ledgers.extend(verdict["tables"])
            if not verdict["ok"] and (e.get("outcome") == "passed" or e["nodeid"] == carrier and e.get("outcome") == "broken"):
                e["outcome"], e["reason"] = "failed", f"{first}: {case}"

    def not_run(self) -> list[dict[str, Any]]:
        """The entries of tests that were skipped (not an expected failure): they established nothing."""
        return [e for e in self.by_nodeid.values() if e.get("outcome") == "skipped" and not e.get("xfail")]

    def page_entries(self) -> list[PageEntry]:
        return [_page_entry(e) for e in sorted(self.by_nodeid.values(), key=lambda x: x["nodeid"])]

    def known_issues(self) -> list[tuple[str, KnownIssueVerdict]]:
        out = []
        for nodeid, e in sorted(self.by_nodeid.items()):
            rec = e.get("record")
            if rec is not None and rec.known_issue is not None:
                out.append((nodeid, rec.known_issue))
        return out

    def known_issue_lines(self) -> list[str]:
        return [f"{v.text()} -- {nodeid}" for nodeid, v in self.known_issues()]

    def known_issues_section(self) -> Section | None:
        """The page's "Known issues" section: which open issues reproduced, which did not."""
        found = self.known_issues()
        if not found:
            return None
        return Section("Known issues", (Bullets(tuple(
            Item((Bold(v.text()) if not v.reproduced else v.text(), " -- ", Code(nodeid))) for nodeid, v in found)),))

    def config_health_section(self) -> Section | None:
        """The page's "Health around each configuration": one row per configuration judged
        (ipsec_hil.config_health), each sick end's table in full."""
        if not self.config_health:
            return None
        verdicts = sorted(self.config_health.items())
        return Section("Health around each configuration", (
            Paragraph("Both ends after the configuration's bring-up against after its last test, with each "
                      "model's tolerances (ipsec_hil.config_health)."),
            Table(("configuration", "verdict"),
                  tuple((case, "healthy" if v["ok"] else (Bold("DEFECT"), ": every test of it failed"))
                        for case, v in verdicts)),
            *(Subsection(case, (Preformatted("\n".join(t.rstrip() for t in v["tables"])),))
              for case, v in verdicts if not v["ok"]),
        ))

    def traffic_seconds(self) -> float:
        """Seconds of traffic the run's tests asked for (each record's ``traffic_seconds``)."""
        return sum(float(e["record"].traffic_seconds or 0.0) for e in self.by_nodeid.values() if e.get("record"))

    def timing_note(self, wall_seconds: float) -> str:
        """Wall time against the traffic the tests asked for (issue 5's budget: at most 1.3x the
        traffic seconds plus one bring-up per configuration)."""
        recs = [e["record"] for e in self.by_nodeid.values() if e.get("record")]
        traffic = self.traffic_seconds()
        configs = len({r.tunnel_case for r in recs if r.tunnel_case})
        ratio = f"{wall_seconds / traffic:.2f}x" if traffic else "n/a"
        return (f"wall time {wall_seconds:,.0f} s for {traffic:,.0f} s of traffic asked ({ratio}), "
                f"{configs} tunnel configuration(s) brought up")


def _page_entry(e: dict[str, Any]) -> PageEntry:
    r: TestRecord | None = e.get("record")
    ki = r.known_issue if r is not None else None
    return PageEntry(
        nodeid=e["nodeid"],
        title=(r.title if r is not None else None) or e["nodeid"].split("::")[-1],
        outcome=e.get("outcome", "passed"),
        page=r.page if r is not None else None,
        hardware=tuple(r.hardware) if r is not None else (),
        reason=e.get("reason") or (ki.text() if ki else None),
        figures=list(r.figures) if r is not None else [],
        checks=list(r.checks) if r is not None else [],
        ledgers=list(r.ledgers) if r is not None else [],
        plots=list(r.plots) if r is not None else [],
        duration=float(e.get("duration", 0.0)),
        tunnel_case=r.tunnel_case if r is not None else None,
        known_issue=ki.text() if ki else None,
    )


__all__ = ["PROPERTY", "Entries", "KnownIssueVerdict", "TestRecord"]
