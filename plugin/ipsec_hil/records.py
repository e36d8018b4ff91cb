"""What each test measured, carried to the controller, and turned into the page's entries.

Why through ``user_properties``: under xdist a test runs in a worker but the page must be
one document; pytest already ships each report's ``user_properties`` from the worker to the
controller, where ``pytest_runtest_logreport`` sees them. So a test's :class:`TestRecord`
(figures, ledger tables, invariants checked, plots, a known issue's verdict) is serialised
into one property at teardown, and the controller (ipsec_hil.session.HilSession) gathers
:class:`Entries` from the reports: the outcome and reason from setup/call, the
measurements from teardown. Nothing secret is ever put into a record (ledgers hold
counters, not keys). No pytest hooks live here: this module is data and its conversions.
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
        d = asdict(self)
        d["hardware"] = list(self.hardware)
        return json.dumps(d, default=str)

    @staticmethod
    def from_json(text: str) -> dict[str, Any]:
        return json.loads(text)


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
            if not rec or rec.get("tunnel_case") != case:
                continue
            rec.setdefault("ledgers", []).extend(verdict["tables"])
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
            ki = (e.get("record") or {}).get("known_issue")
            if ki:
                out.append((nodeid, KnownIssueVerdict(**ki)))
        return out

    def known_issue_lines(self) -> list[str]:
        return [f"{v.text()} -- {nodeid}" for nodeid, v in self.known_issues()]

    def known_issues_section(self) -> str | None:
        """The page's "Known issues" section: which open issues reproduced, which did not."""
        found = self.known_issues()
        if not found:
            return None
        lines = ["## Known issues", ""]
        lines += [f"- **{v.text()}** -- `{nodeid}`" if not v.reproduced else f"- {v.text()} -- `{nodeid}`"
                  for nodeid, v in found]
        return "\n".join(lines) + "\n"

    def config_health_section(self) -> str | None:
        """The page's "Health around each configuration": one row per configuration judged
        (ipsec_hil.config_health), each sick end's table in full."""
        if not self.config_health:
            return None
        lines = ["## Health around each configuration", "",
                 "Both ends after the configuration's bring-up against after its last test, with each "
                 "model's tolerances (ipsec_hil.config_health).", "",
                 "| configuration | verdict |", "|---|---|"]
        sick = []
        for case, v in sorted(self.config_health.items()):
            lines.append(f"| {case} | {'healthy' if v['ok'] else '**DEFECT**: every test of it failed'} |")
            if not v["ok"]:
                sick += [f"### {case}", "", "```", *(t.rstrip() for t in v["tables"]), "```", ""]
        return "\n".join(lines + [""] + sick) + "\n"

    def traffic_seconds(self) -> float:
        """Seconds of traffic the run's tests asked for (each record's ``traffic_seconds``)."""
        return sum(float((e.get("record") or {}).get("traffic_seconds") or 0.0) for e in self.by_nodeid.values())

    def timing_note(self, wall_seconds: float) -> str:
        """Wall time against the traffic the tests asked for (issue 5's budget: at most 1.3x the
        traffic seconds plus one bring-up per configuration)."""
        recs = [e.get("record") or {} for e in self.by_nodeid.values()]
        traffic = self.traffic_seconds()
        configs = len({r.get("tunnel_case") for r in recs if r.get("tunnel_case")})
        ratio = f"{wall_seconds / traffic:.2f}x" if traffic else "n/a"
        return (f"wall time {wall_seconds:,.0f} s for {traffic:,.0f} s of traffic asked ({ratio}), "
                f"{configs} tunnel configuration(s) brought up")


def _page_entry(e: dict[str, Any]) -> PageEntry:
    r = e.get("record") or {}
    title = r.get("title") or e["nodeid"].split("::")[-1]
    ki = r.get("known_issue")
    reason = e.get("reason") or (KnownIssueVerdict(**ki).text() if ki else None)
    return PageEntry(
        nodeid=e["nodeid"],
        title=title,
        outcome=e.get("outcome", "passed"),
        page=r.get("page"),
        hardware=tuple(r.get("hardware") or ()),
        reason=reason,
        figures=[Figure(**f) for f in r.get("figures", [])],
        checks=[Check(**c) for c in r.get("checks", [])],
        ledgers=list(r.get("ledgers", [])),
        plots=list(r.get("plots", [])),
        duration=float(e.get("duration", 0.0)),
        tunnel_case=r.get("tunnel_case"),
        known_issue=KnownIssueVerdict(**ki).text() if ki else None,
    )


def _replace_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def append_sections(page: Path, sections: list[str]) -> None:
    """Append Markdown sections to the page this run just wrote."""
    text = page.read_text(encoding="utf-8").rstrip("\n")
    for s in sections:
        text += "\n\n" + s.rstrip("\n")
    _replace_atomically(page, text + "\n")


def _prop(s: str) -> str:
    return str(s).replace("\\", "\\\\").replace("\n", "\\n").replace("=", "\\=").replace(":", "\\:")


def append_allure_environment(alluredir: Path, values: dict[str, str]) -> None:
    """Add ``key=value`` lines to Allure's environment.properties (written just before)."""
    if not values:
        return
    p = alluredir / "environment.properties"
    old = p.read_text(encoding="utf-8") if p.exists() else ""
    _replace_atomically(p, old + "".join(f"{_prop(k)}={_prop(v)}\n" for k, v in values.items()))


__all__ = ["PROPERTY", "Entries", "KnownIssueVerdict", "TestRecord", "append_sections", "append_allure_environment"]
