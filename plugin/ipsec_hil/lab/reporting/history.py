"""The runs' history on a lab: every run's outcomes, one JSON line a run, beside the reports.

Why (issue 52): a merge gate that fails a healthy build at random is switched off. A
reviewer who meets a failed test must tell a new defect from an old intermittent one, and
a team qualifying a lab must know its false-alarm rate. So every run of the suite appends
what each test did (`record_run`); a failed test's line on the page says how often it
failed in the last runs on the same lab (`recent`), and `ipsec-hil-flakes` runs a
selection K times and tabulates, per test, runs, failures, flips and what failed
(`flakes`) -- flips counted as the Linux netdev CI counts flakes: an outcome that left
"passed" and came back to it.

Format (`history.jsonl` in the reports directory): one object a run --
``{"lab": NAME, "started": ISO time, "tag": TAG or null, "results": {nodeid: {"outcome":
o, "invariant": text or null, "detail": text or null}}}``; a line that is not such an
object is a HistoryError naming the file and line (nothing is rewritten: the file is only
ever appended to).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ipsec_hil.lab.errors import LabError

HISTORY_NAME = "history.jsonl"
#: how many of a lab's last runs a failed test's page line looks back over
RECENT_RUNS = 20
#: the environment variable a run's history line carries as its tag (ipsec-hil-flakes sets
#: it so it can tell its own runs from the others on the same lab)
TAG_ENV = "HIL_HISTORY_TAG"

_DIFFER = re.compile(r"([\w.:+\- ]+?) ([+-][\d,]+) but ([\w.:+\- ]+?) ([+-][\d,]+) \(differ by ([+-][\d,]+)\)")


class HistoryError(LabError):
    """A history file line that is not a run's record (FILE:LINE: why)."""


@dataclass(frozen=True)
class Result:
    outcome: str
    invariant: str | None = None  # the first invariant that did not hold
    detail: str | None = None  # its measured detail ("A +N but B +M (differ by +K)")


@dataclass(frozen=True)
class Run:
    lab: str
    started: str
    tag: str | None
    results: dict[str, Result]


def record_run(directory: str | os.PathLike[str], lab: str, started: str, results: dict[str, Result],
               tag: str | None = None) -> Path:
    """Append one run to ``directory``/history.jsonl (created); returns the file's path."""
    path = Path(directory) / HISTORY_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"lab": lab, "started": started, "tag": tag if tag is not None else os.environ.get(TAG_ENV),
                       "results": {n: {"outcome": r.outcome, "invariant": r.invariant, "detail": r.detail}
                                   for n, r in results.items()}}, sort_keys=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    return path


def load(path: str | os.PathLike[str], lab: str | None = None) -> list[Run]:
    """Every run of ``path`` (of lab ``lab`` only, when given), oldest first; [] without a file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    runs = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            run = Run(str(d["lab"]), str(d["started"]), d.get("tag"),
                      {str(n): Result(str(r["outcome"]), r.get("invariant"), r.get("detail"))
                       for n, r in dict(d["results"]).items()})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise HistoryError(f"{p}:{no}: not a run's record ({type(exc).__name__}: {exc}); "
                               f"expected {{\"lab\", \"started\", \"results\"}}") from None
        if lab is None or run.lab == lab:
            runs.append(run)
    return runs


def recent(runs: Sequence[Run], nodeid: str, last: int = RECENT_RUNS) -> tuple[int, int]:
    """(failed, ran) of ``nodeid`` over the last ``last`` runs that ran it."""
    seen = [r.results[nodeid].outcome for r in runs if nodeid in r.results][-last:]
    ran = [o for o in seen if o not in ("skipped", "deselected")]
    return sum(o in ("failed", "broken") for o in ran), len(ran)


@dataclass
class Flakes:
    """One test's record over a set of runs."""

    nodeid: str
    runs: int = 0
    failures: int = 0
    flips: int = 0
    invariants: list[str] = field(default_factory=list)
    differed: list[str] = field(default_factory=list)


def flakes(runs: Iterable[Run]) -> list[Flakes]:
    """Per test (in first-seen order): how often it ran and failed, its flips (a failure
    between two passes: pass -> fail -> pass, the netdev CI's flake), the invariants that
    failed and the counters that differed."""
    table: dict[str, Flakes] = {}
    outcomes: dict[str, list[str]] = {}
    for run in runs:
        for nodeid, r in run.results.items():
            if r.outcome in ("skipped", "deselected"):
                continue
            f = table.setdefault(nodeid, Flakes(nodeid))
            f.runs += 1
            outcomes.setdefault(nodeid, []).append(r.outcome)
            if r.outcome in ("failed", "broken"):
                f.failures += 1
                if r.invariant and r.invariant not in f.invariants:
                    f.invariants.append(r.invariant)
                for m in _DIFFER.finditer(r.detail or ""):
                    f.differed.append(f"{m.group(1).strip()} {m.group(2)} vs {m.group(3).strip()} {m.group(4)} "
                                      f"({m.group(5)})")
    for nodeid, seq in outcomes.items():
        ok = [o == "passed" or o.startswith("x") for o in seq]
        table[nodeid].flips = sum(1 for i in range(1, len(ok) - 1) if not ok[i] and ok[i - 1]
                                  and any(ok[i + 1:]))
    return list(table.values())


def flakes_table(rows: Sequence[Flakes]) -> str:
    """The command's table: one row a test, failing ones first."""
    rows = sorted(rows, key=lambda f: (-f.failures, f.nodeid))
    head = ("test", "runs", "failures", "flips", "what failed")
    body = [(f.nodeid, str(f.runs), str(f.failures), str(f.flips),
             "; ".join(f.invariants + f.differed) or "-") for f in rows]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(4)]
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head[:4], widths)))
           + "  " + head[4]]
    for r in body:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r[:4], widths)))
                   + "  " + r[4])
    return "\n".join(out)


def results_of(entries: Iterable[Any]) -> dict[str, Result]:
    """A run's results from its page entries (``PageEntry``): the outcome and, for a
    failure, its first broken check (the invariant and what it measured)."""
    out = {}
    for e in entries:
        broken = next((c for c in e.checks if not c.held), None)
        out[e.nodeid] = Result(e.outcome, broken.text if broken else (e.reason if e.outcome == "failed" else None),
                               broken.detail if broken else None)
    return out


def annotate(directory: str | os.PathLike[str], lab: str, entries: Sequence[Any], started: str) -> str:
    """Give each failed page entry its record on ``lab`` before this run (``history``), then
    append this run to the history; returns the page's note on the history (where it is,
    or why it could not be read -- a broken history never breaks a run's page)."""
    path = Path(directory) / HISTORY_NAME
    try:
        runs = load(path, lab)
    except HistoryError as exc:
        runs, note = [], f"run history not read: {exc}"
    else:
        note = f"run history: {path} ({len(runs)} earlier runs on lab {lab}; ipsec-hil-flakes tabulates it)"
    for e in entries:
        if e.outcome in ("failed", "broken"):
            failed, ran = recent(runs, e.nodeid)
            e.history = (f"failed {failed} of its last {ran} runs on lab {lab} before this one" if ran
                         else f"no earlier run on lab {lab}: a new failure")
    record_run(directory, lab, started, results_of(entries))
    return note
