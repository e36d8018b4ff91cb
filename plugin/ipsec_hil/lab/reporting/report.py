"""The measurement page (Markdown), stream plots, and Allure's environment files.

Why: the pages are what reviewers read -- what ran, on which hardware and driver build,
the figures, the invariants, and "What is not established". A run of the suite writes the
same kind of page from what the tests recorded (:class:`PageEntry`, collected by the
plugin), so a gating run can be attached to an issue as it is.

Everything here is plain data in, files out: the plugin builds the entries; nothing here
talks to a lab. Secrets never reach this module (swanctl texts come from
``provision.render_masked``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from ipsec_hil.lab.measuring.baseline import HardwareInfo  # the page's hardware rows (read by live_lab)
from ipsec_hil.lab.errors import InvariantError
from ipsec_hil.lab.reporting.first_screen import summary_lines, verdict_lines
from ipsec_hil.lab.measuring.measure import Check

Outcome = Literal["passed", "failed", "broken", "skipped"]
OUTCOMES: tuple[str, ...] = ("passed", "failed", "broken", "skipped")

#: exception class names that make a test "broken" (a lab problem, not a driver defect)
LAB_PROBLEMS = ("TransportError", "ProvisionError", "HostKeyError", "CommandTimeout", "SettleTimeout",
                "ProbeError", "LockHeld", "CommandFailed", "TimeoutError", "ProfileError", "TopologyError")
DRIVER_DEFECTS = ("InvariantError", "AssertionError")


def classify(exc: BaseException) -> Outcome:
    """'failed' (driver defect: an invariant/assertion) or 'broken' (lab problem: anything else)."""
    if isinstance(exc, (InvariantError, AssertionError)):
        return "failed"
    return "broken"


@dataclass(frozen=True)
class Figure:
    """One measured figure as the page prints it ("four streams up", 2136.0, "Mbit/s")."""

    label: str
    value: Any
    unit: str = ""

    def text(self) -> str:
        v = self.value
        if isinstance(v, bool):
            s = "yes" if v else "no"
        elif isinstance(v, int):
            s = f"{v:,}"
        elif isinstance(v, float):
            s = f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"
        else:
            s = str(v)
        return f"{s} {self.unit}".strip()


@dataclass
class RunInfo:
    title: str
    topology: str
    virtual: bool
    started: _dt.datetime
    finished: _dt.datetime | None = None
    command: str = ""
    hardware: list[HardwareInfo] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the run's answer for the first screen (e.g. candidate against parent); empty: the
    #: page states the tests' own verdict
    verdict: list[str] = field(default_factory=list)
    #: the lab as the run found it, one line each, under the lab line of the first screen
    #: (a dead run's state undone before measuring: ipsec_hil.lab.dead_runs)
    lab_state: list[str] = field(default_factory=list)


@dataclass
class PageEntry:
    """What one test contributes to the page (built by the plugin from the test's record)."""

    nodeid: str
    title: str
    outcome: Outcome
    page: str | None = None  # the measurement page the test comes from ("000")
    hardware: tuple[str, ...] = ()  # markers: xgs136, xgs3300
    reason: str | None = None  # skip reason, or the failure's first line
    figures: list[Figure] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    ledgers: list[str] = field(default_factory=list)  # Ledger.table() texts
    plots: list[str] = field(default_factory=list)  # paths of PNGs
    duration: float = 0.0
    tunnel_case: str | None = None  # e.g. "lab-v4in4-gcm" (ipsec_hil.lab.cases.TunnelCase.id)
    known_issue: str | None = None  # KnownIssueVerdict.text(): the issue and whether it reproduced
    #: a failed test's record on this lab before this run ("failed 2 of its last 20 runs on
    #: lab virtual"; reporting.history), so a reviewer tells a new defect from an old flake
    history: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"PageEntry {self.nodeid}: outcome must be one of {OUTCOMES}, not {self.outcome!r}")


# --------------------------------------------------------------------------- the page


def _md_cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _first_line(s: str | None, limit: int = 300) -> str:
    if not s:
        return ""
    line = s.strip().splitlines()[0] if s.strip() else ""
    return line[:limit]


def _table(header: Sequence[str], align: str, rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table; ``align`` has one letter per column, ``l`` or ``r``."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return ["| " + " | ".join(header) + " |", rule] + [
        "| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows
    ]


#: How much of a test's record the page shows in its configuration's table; the rest is in
#: the test's Allure result (every figure, invariant, ledger and plot is attached there).
FIGURES_SHOWN = 6
#: Failed tests whose evidence (broken invariants, ledgers) the page prints in full.
FAILURES_IN_DETAIL = 5
#: The row of tests without a tunnel configuration in "Per configuration".
NO_CONFIGURATION = "(no tunnel configuration)"


def _first_screen(run: RunInfo, entries: Sequence[PageEntry]) -> list[str]:
    """Title, verdict, lab and counts, the per-model answer, the command and notes: what a
    reader sees first, however many tests ran (ipsec_hil.lab.reporting.first_screen)."""
    counts = {o: sum(1 for e in entries if e.outcome == o) for o in OUTCOMES}
    when = run.started.strftime("%Y-%m-%d %H:%M UTC")
    out: list[str] = [f"# {run.title}", ""]
    out += verdict_lines(run.verdict, entries)
    hw = ", ".join(f"{h.appliance} ({h.model}, {h.driver} md5 {(h.module_md5 or 'unknown')[:8]})"
                   for h in run.hardware) or "no appliance recorded"
    lab = "the virtual lab" if run.virtual else "the hardware lab"
    out += ["", f"Measured on {lab} `{run.topology}`, {when}: {hw}."]
    for line in run.lab_state:
        out += ["", f"**{line}**"]
    out += ["",
            f"{len(entries)} tests: {counts['passed']} passed, {counts['failed']} failed (driver defect), "
            f"{counts['broken']} broken (lab problem), {counts['skipped']} skipped.", ""]
    out += summary_lines(entries)
    out += ["", "---"]
    if run.command:
        out += ["", f"Command: `{run.command}`"]
    for n in run.notes:
        out += ["", n]
    return out


def _test_name(e: PageEntry) -> str:
    """The name pytest and Allure give the test (``test_x[param]``), the key into Allure."""
    return e.nodeid.split("::")[-1]


def _function(e: PageEntry) -> str:
    return _test_name(e).split("[", 1)[0]


def _figures_cell(e: PageEntry) -> str:
    shown = [f"{f.label} {f.text()}" for f in e.figures[:FIGURES_SHOWN]]
    more = len(e.figures) - FIGURES_SHOWN
    return "; ".join(shown) + (f"; +{more} more" if more > 0 else "") if shown else "-"


def _checks_cell(e: PageEntry) -> str:
    if not e.checks:
        return "-" if e.outcome != "failed" else f"**{_first_line(e.reason, 120)}**"
    held = sum(1 for c in e.checks if c.held)
    broken = [f"**BROKEN**: {c.text}" + (f" ({c.detail})" if c.detail else "") for c in e.checks if not c.held]
    return "; ".join([f"{held}/{len(e.checks)} held", *broken])


def _allure_cell(e: PageEntry, allure: Mapping[str, str] | None) -> str:
    link = (allure or {}).get(e.nodeid)
    if not link:
        return "-"
    uuid = Path(link).name.split("-result.json")[0]
    return f"[{uuid[:8]}]({link})"


def render_page(run: RunInfo, entries: Sequence[PageEntry], base: Path | None = None,
                allure: Mapping[str, str] | None = None) -> str:
    """The page's Markdown: a few hundred lines, whatever the number of tests.

    Why this shape (issue 39): the page is what is attached to an issue and read by a
    person. Its first screen answers the question (:func:`_first_screen`); below it, per
    tunnel configuration, one table row per test with its leading figures and its
    invariants (how many held, each broken one in full), and a link to the test's Allure
    result, which holds every figure, invariant, counter ledger and plot of the test.
    Only failed tests (the first :data:`FAILURES_IN_DETAIL`) keep their ledgers here: that
    evidence is what the issue is about. ``allure``: node id -> the test's Allure result
    file, relative to the page (:func:`allure_result_links`); plot paths are made relative
    to ``base`` (the page's folder).
    """
    out = _first_screen(run, entries)
    w = out.append

    w("")
    w("## The hardware and the driver build")
    w("")
    out += _table(
        ("appliance", "model", "driver", "module md5", "module size", "loaded", "kernel"), "llllrll",
        [(h.appliance, h.model, h.driver, h.module_md5 or "unknown",
          f"{h.module_size:,} bytes" if h.module_size is not None else "unknown",
          {True: "yes", False: "no", None: "unknown"}[h.module_loaded], h.kernel or "unknown") for h in run.hardware]
        or [("(none recorded)", "", "", "", "", "", "")],
    )

    w("")
    w("## What ran")
    w("")
    w("One row per test function; its configurations are in the next section.")
    w("")
    functions: dict[str, list[PageEntry]] = {}
    for e in entries:
        functions.setdefault(_function(e), []).append(e)
    out += _table(("test", "page", "hardware", "runs", "passed", "failed", "broken", "skipped", "seconds"),
                  "lllrrrrrr",
                  [(name, ", ".join(sorted({e.page for e in es if e.page})) or "-",
                    ", ".join(sorted({h for e in es for h in e.hardware})) or "-", len(es),
                    *(sum(1 for e in es if e.outcome == o) for o in OUTCOMES),
                    f"{sum(e.duration for e in es):.1f}") for name, es in functions.items()])

    w("")
    w("## Per configuration")
    w("")
    w("Each test's leading figures and its invariants; every figure, invariant, counter ledger and plot "
      "of a test is in its Allure result (the last column; the Allure report finds the test by its name).")
    configs: dict[tuple[str, str], list[PageEntry]] = {}
    for e in entries:
        if e.outcome == "skipped":
            continue  # listed under "What is not established"
        configs.setdefault((e.tunnel_case or NO_CONFIGURATION, ", ".join(e.hardware) or "-"), []).append(e)
    for (case, hardware), es in sorted(configs.items(), key=lambda kv: (kv[0][0] == NO_CONFIGURATION, kv[0])):
        w("")
        w(f"### {case} ({hardware})")
        w("")
        out += _table(("test", "outcome", "figures", "invariants", "Allure"), "lllll",
                      [(_test_name(e), e.outcome, _figures_cell(e), _checks_cell(e), _allure_cell(e, allure))
                       for e in es])
        plots = [(e, p) for e in es for p in e.plots]
        if plots:
            w("")
            w("Plots: " + ", ".join(f"[{_md_cell(_test_name(e))}]({os.path.relpath(p, base) if base else p})"
                                    for e, p in plots))

    failed = [e for e in entries if e.outcome == "failed"]
    if failed:
        w("")
        w("## Failed tests in detail")
        for e in failed[:FAILURES_IN_DETAIL]:
            w("")
            w(f"### {e.title}")
            w("")
            w(f"`{e.nodeid}` -- **driver defect:** {_md_cell(_first_line(e.reason))}")
            if e.history:
                w(f"- history: {_md_cell(e.history)}")
            for c in e.checks:
                if not c.held:
                    w(f"- **BROKEN**: {_md_cell(c.text)}" + (f" ({_md_cell(c.detail)})" if c.detail else ""))
            for t in e.ledgers:
                w("")
                w("```")
                w(t.rstrip("\n"))
                w("```")
        if len(failed) > FAILURES_IN_DETAIL:
            w("")
            w(f"... and {len(failed) - FAILURES_IN_DETAIL} more failed tests: their ledgers are in their Allure results.")

    broken_checks = [(e, c) for e in entries for c in e.checks if not c.held]
    w("")
    w("## Invariants broken")
    w("")
    if broken_checks:
        for e, c in broken_checks:
            w(f"- {_md_cell(e.title)}: {_md_cell(c.text)} ({_md_cell(c.detail)})")
    else:
        w("None." if any(e.checks for e in entries) else "None checked.")

    counted = [(e, c) for e in entries for c in e.checks if c.loss]
    if counted:  # issue 52: a frame a door counted is loss, shown with its counter, not a vanished one
        w("")
        w("## Counted loss")
        w("")
        for e, c in counted:
            w(f"- {_md_cell(e.title)}: {_md_cell(c.text)} -- {_md_cell(c.detail)}")

    w("")
    w("## What is not established")
    w("")
    gaps = [e for e in entries if e.outcome in ("skipped", "broken")]
    if not gaps:
        w("Every test ran to a verdict.")
    for e in gaps:
        why = _first_line(e.reason) or "no reason recorded"
        if e.outcome == "skipped":
            w(f"- {_md_cell(e.title)}: not run -- {_md_cell(why)}")
        else:
            w(f"- {_md_cell(e.title)}: not measured, the lab failed -- {_md_cell(why)}")
    return "\n".join(out) + "\n"


def allure_result_links(results: str | os.PathLike[str] | None, base: Path) -> dict[tuple[str, str], str]:
    """(module, test name) -> the test's Allure result file (``UUID-result.json``), relative to ``base``.

    Allure names a pytest test's result ``name`` = the test's name with its parameters and
    ``fullName`` = ``module#function``; a node id's file stem and last part give the same
    pair. A retried test has several results: the latest is linked. Results that are not
    JSON objects are skipped (a run's own result files are never that; another tool's may be).
    """
    if results is None or not Path(results).is_dir():
        return {}
    latest: dict[tuple[str, str], tuple[int, Path]] = {}
    for f in Path(results).glob("*-result.json"):
        try:
            r = json.loads(f.read_text(encoding="utf-8"))
            key = (str(r["fullName"]).split("#", 1)[0].rsplit(".", 1)[-1], str(r["name"]))
            stop = int(r.get("stop") or 0)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if key not in latest or stop >= latest[key][0]:
            latest[key] = (stop, f)
    return {key: os.path.relpath(f, base) for key, (_, f) in latest.items()}


def page_links(entries: Sequence[PageEntry], allure_results: str | os.PathLike[str] | None,
               base: Path) -> dict[str, str]:
    """Node id -> the test's Allure result file, relative to ``base`` (the page's folder)."""
    by_key = allure_result_links(allure_results, base)
    return {e.nodeid: by_key[k] for e in entries
            if (k := (Path(e.nodeid.split("::", 1)[0]).stem, _test_name(e))) in by_key}


def write_page(run: RunInfo, entries: Sequence[PageEntry], directory: str | os.PathLike[str],
               name: str = "measurement-page.md", allure_results: str | os.PathLike[str] | None = None) -> Path:
    """Write the page of ``run`` and ``entries`` alone into ``directory`` (created); returns
    its path. ``allure_results``: the run's Allure results directory, to link each test's
    result from the page. A run's page, with its parts' sections: ``reporting.page.PageDocument``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(render_page(run, entries, base=d, allure=page_links(entries, allure_results, d)), encoding="utf-8")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- plots

Series = Sequence[tuple[float, float, float]]  # (start s, end s, bits per second)


def plot_stream_rates(series: Mapping[str, Series], path: str | os.PathLike[str], title: str) -> Path:
    """One line per stream of interval rates (Mbit/s over time) -> PNG (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    if not series or not any(series.values()):
        raise ValueError(f"plot {title!r}: no interval data")
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    try:
        total: dict[float, float] = {}
        for name, pts in series.items():
            xs = [end for _, end, _ in pts]
            ys = [bps / 1e6 for _, _, bps in pts]
            ax.plot(xs, ys, marker=".", linewidth=1, label=name)
            for x, y in zip(xs, ys):
                total[round(x, 3)] = total.get(round(x, 3), 0.0) + y
        if len(series) > 1:
            tx = sorted(total)
            ax.plot(tx, [total[x] for x in tx], color="black", linewidth=2, label="sum")
        ax.set_xlabel("seconds")
        ax.set_ylabel("Mbit/s")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, format="png")
    finally:
        plt.close(fig)
    return p


def iperf_series(result: Any) -> dict[str, list[tuple[float, float, float]]]:
    """Per-stream interval rates from parsers.iperf3's IperfResult (omitted intervals skipped).

    ``result.intervals`` holds ``Interval(start, end, bps, stream_bps, omitted)``; each
    stream becomes one series of (start, end, bits per second).
    """
    out: dict[str, list[tuple[float, float, float]]] = {}
    for iv in getattr(result, "intervals", None) or ():
        if getattr(iv, "omitted", False):
            continue
        per_stream = tuple(getattr(iv, "stream_bps", ()) or ()) or (iv.bps,)
        for i, bps in enumerate(per_stream):
            out.setdefault(f"stream {i + 1}", []).append((float(iv.start), float(iv.end), float(bps)))
    return out


def plot_iperf(result: Any, path: str | os.PathLike[str], title: str) -> Path:
    return plot_stream_rates(iperf_series(result), path, title)


# --------------------------------------------------------------------------- Allure files


def _prop_escape(s: str) -> str:
    return str(s).replace("\\", "\\\\").replace("\n", "\\n").replace("=", "\\=").replace(":", "\\:")


def environment_properties(run: RunInfo) -> str:
    lines = [
        ("lab.topology", run.topology),
        ("lab.virtual", "true" if run.virtual else "false"),
        ("run.started", run.started.isoformat(timespec="seconds")),
    ]
    for h in run.hardware:
        lines += [
            (f"{h.appliance}.model", h.model),
            (f"{h.appliance}.driver", h.driver),
            (f"{h.appliance}.module.md5", h.module_md5 or "unknown"),
            (f"{h.appliance}.module.size", str(h.module_size) if h.module_size is not None else "unknown"),
            (f"{h.appliance}.kernel", h.kernel or "unknown"),
        ]
    return "".join(f"{_prop_escape(k)}={_prop_escape(v)}\n" for k, v in lines)


CATEGORIES: list[dict[str, Any]] = [
    {
        "name": "driver defect",
        "matchedStatuses": ["failed"],
        "traceRegex": "(?s).*(" + "|".join(DRIVER_DEFECTS) + ").*",
    },
    {
        "name": "lab problem",
        "matchedStatuses": ["broken"],
        "traceRegex": "(?s).*(" + "|".join(LAB_PROBLEMS) + ").*",
    },
    # status-only fallbacks: Allure 3's classic plugin never matches regex rules
    {"name": "driver defect", "matchedStatuses": ["failed"]},
    {"name": "lab problem", "matchedStatuses": ["broken"]},
]


def write_allure_files(
    alluredir: str | os.PathLike[str],
    run: RunInfo,
    build_order: int | None = None,
    build_name: str | None = None,
    report_url: str | None = None,
    environment: Mapping[str, str] | None = None,
) -> list[Path]:
    """environment.properties, executor.json, categories.json into the results directory,
    each written once; ``environment``: the parts' own ``key=value`` lines (the build
    under test, the gate's figures), after the run's.

    Call it from the controller's ``pytest_sessionfinish`` (workers' --clean-alluredir would
    delete files written earlier; see the reference notes).
    """
    d = Path(alluredir)
    d.mkdir(parents=True, exist_ok=True)
    ci = bool(os.environ.get("CI"))
    executor = {
        "name": "ipsec-hil (CI)" if ci else "ipsec-hil",
        "type": "ci" if ci else "local",
        "buildName": build_name or f"{run.title} {run.started:%Y-%m-%d %H:%M}",
        "reportName": run.title,
    }
    if build_order is not None:
        executor["buildOrder"] = build_order
    if report_url:
        executor["reportUrl"] = report_url
    files = {
        "environment.properties": environment_properties(run)
        + "".join(f"{_prop_escape(k)}={_prop_escape(v)}\n" for k, v in (environment or {}).items()),
        "executor.json": json.dumps(executor, indent=2) + "\n",
        "categories.json": json.dumps(CATEGORIES, indent=2) + "\n",
    }
    out = []
    for name, text in files.items():
        p = d / name
        tmp = d / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
        out.append(p)
    return out

