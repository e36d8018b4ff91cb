"""The page's sections of four library records, each a function over the record's typed object.

Why here (issue 53, "Markdown only in reporting/"): the time share, the gate's comparison
with a baseline, the lost leases and the dead runs' recovery each rendered their own
Markdown inside the library (``timeshare.markdown``, ``Comparison.markdown``,
``Holds.page_section``, ``Found.section``), and the page carried the strings as
``page.Markdown``. The records now keep the data only; these functions turn it into a
:class:`~ipsec_hil.lab.reporting.page.Section` the page renders with every other section, so
the page's Markdown is spelled in one folder. The text is the old renderers' (the one
difference: a dead-runs section with nothing undone lost a double blank line under its
heading); tests/report/test_sections.py compares it with theirs, kept in
tests/report/golden_sections/.
"""

from __future__ import annotations

from ipsec_hil.lab.dead_runs import JOURNALS, Found, Undone
from ipsec_hil.lab.measuring.baseline import NOISE_FLOOR, NOISE_STDEVS, Comparison
from ipsec_hil.lab.reporting.page import Bold, Bullets, Code, Item, Paragraph, Section, Table, render_section
from ipsec_hil.lab.sharing.holds import Holds
from ipsec_hil.lab.timeshare import SSH, Breakdown, ratio_text, share_text

__all__ = ["baseline_comparison", "baseline_comparison_markdown", "dead_runs", "lost_leases", "time_share"]


def time_share(b: Breakdown, *, run_wall: float, traffic_asked: float) -> Section:
    """"Where the time went": the table, the ratio wall / traffic asked, and how to read it."""
    of = "wall" if b.processes <= 1 else f"the {b.processes} workers' summed wall time ({b.wall:,.1f} s)"
    rows = [(c, f"{s:,.1f}", share_text(s, b.wall)) for c, s in b.rows()]
    rows.append((Bold("wall"), Bold(f"{b.wall:,.1f}"), "100.0 %"))
    blocks: list = [
        Table(("category", "seconds", f"share of {'wall' if b.processes <= 1 else 'worker time'}"), tuple(rows),
              ("left", "right", "right")),
        Paragraph((f"Wall time {run_wall:,.1f} s for {traffic_asked:,.1f} s of traffic asked: ",
                   Bold(ratio_text(run_wall, traffic_asked)), ".")),
    ]
    if b.processes > 1:
        blocks.append(Paragraph(f"Shares are of {of}: the workers ran side by side."))
    blocks.append(Paragraph(
        f"SSH and shell commands (SFTP included): {b.calls.get(SSH, 0):,}, {b.inclusive.get(SSH, 0.0):,.1f} s "
        "in all; the \"ssh\" row is the ones run outside every other category (inside one they are "
        "that category's time). Each second is counted once, in the innermost category open "
        "in the thread running the tests; \"other\" is the rest (collection, pytest, the tests' "
        "own work, waits on helper threads). Traffic is the seconds asked; what an iperf3 client "
        "takes beyond them is stream start/stop."))
    return Section("Where the time went", tuple(blocks))


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def baseline_comparison(c: Comparison) -> Section:
    """"Compared with baseline": the builds, the rule, the verdict and one row per rate."""
    blocks: list = [
        Paragraph(("Baseline ", Code(c.source), f" ({c.repeats} repeat(s)). Driver builds compared: "
                   f"{c.builds_line()}.")),
        Paragraph(f"Rule: noise = max({NOISE_STDEVS:g} x stdev of the repeats, {NOISE_FLOOR * 100:g} % of their "
                  "mean); a rate below mean - noise is a regression."),
        *(Paragraph(f"Warning: {w}") for w in c.warnings),
        Paragraph(Bold(f"Verdict: {c.summary()}.")),
    ]
    rows = []
    for r in c.rows:
        base = f"{r.mean:,.1f} +- {r.noise:,.1f}" if r.mean is not None and r.noise is not None else "-"
        cur = f"{r.current:,.1f}" if r.current is not None else "-"
        ch = f"{r.change_pct:+.1f} %" if r.change_pct is not None else "-"
        verdict = Bold(r.verdict.upper()) if r.verdict == "regression" else r.verdict
        rows.append((_cell(r.key), base, cur, ch, verdict))
    if not c.rows:
        rows.append(("(no rate recorded by either run)", "", "", "", ""))
    blocks.append(Table(("figure", "baseline (Mbit/s)", "this run (Mbit/s)", "change", "verdict"), tuple(rows),
                        ("left", "right", "right", "right", "left")))
    return Section("Compared with baseline", tuple(blocks))


def baseline_comparison_markdown(c: Comparison) -> str:
    """The same section as one Markdown text: the gate's Allure attachment."""
    return render_section(baseline_comparison(c)) + "\n"


def lost_leases(h: Holds) -> Section | None:
    """"Lease lost: the run stopped": each loss, what was left and who restores it (None:
    nothing was lost)."""
    lines = h.summary_lines()
    if not lines:
        return None
    return Section("Lease lost: the run stopped", (Bullets(tuple(Item(line) for line in lines)),))


def _undone_item(u: Undone) -> Item:
    head = f", {JOURNALS[u.journal]} journal"
    if u.dead:
        head += f", of the dead run {u.run or '(not recorded)'}: {'; '.join(u.dead)}"
    if u.died_after:
        head += f"; it died after its last journalled change: {u.died_after}"
    subs = [Item(f"undone: {line}") for line in u.undone_lines()]
    if u.now:
        subs.append(Item(f"now: {u.now}"))
    return Item((Bold(u.host), head), tuple(subs))


def dead_runs(f: Found) -> Section | None:
    """"Recovered from dead runs": each journal undone (whose run, where it died, what now),
    what could not be undone, and what was said only (None: nothing found)."""
    if not f:
        return None
    blocks: list = []
    if f.undone:
        blocks += [Paragraph("This run found what earlier runs had left when they died, and undid it before it "
                             "measured anything there (each host under its lease). A change is journalled before it "
                             "is made, so the last journalled change is the last step each run reached on that "
                             "host."),
                   Bullets(tuple(_undone_item(u) for u in f.undone))]
    if f.left:
        blocks += [Paragraph((Bold("Not undone"), " (the run stopped; the journals keep it for the next run):")),
                   Bullets(tuple(Item(t) for t in f.left))]
    if f.notes:
        blocks += [Paragraph("Said, not undone:"), Bullets(tuple(Item(t) for t in f.notes))]
    return Section("Recovered from dead runs", tuple(blocks))
