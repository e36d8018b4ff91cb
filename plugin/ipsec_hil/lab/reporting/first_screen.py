"""The measurement page's first screen: the answer, per model, in the shape of the 001 page.

Why (issue 14): a driver engineer reads one screen -- did the build do worse, which
configuration, which invariant broke and why, which known issues came back, what the run
could not establish. Below it the page has one row per test, per configuration, and each
test's whole detail is in its Allure result (issue 39). This module turns the page's
entries into those lines; :func:`ipsec_hil.lab.reporting.report.render_page` puts them right
under the title. Plain data in, Markdown lines out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

#: ``lab-v4in6-gcm-c6`` -> inner 4, outer 6, cipher gcm, children 6 (TunnelConfig.id)
CASE_ID_RE = re.compile(r"^(?P<tunnel>.+)-v(?P<inner>[46])in(?P<outer>[46])-(?P<cipher>[a-z]+)(?:-c(?P<kids>\d+))?$")
CIPHERS = {"gcm": "AES-GCM-16", "cbc": "AES-CBC + HMAC-SHA256"}


def _cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _one_line(s: str | None, limit: int = 200) -> str:
    text = (s or "").strip()
    return (text.splitlines()[0] if text else "no reason recorded")[:limit]


def _mbit(entries: Sequence[Any], pick) -> str:
    vals = [f.value for e in entries for f in e.figures if f.unit == "Mbit/s" and isinstance(f.value, (int, float))
            and pick(f.label.lower())]
    return f"{max(vals):,.1f}" if vals else "-"


def _search_figure(entries: Sequence[Any], name: str) -> str:
    """NDR/PDR: the proved rate, or the search's words when it did not bracket one
    ("at least X Mbit/s, not bracketed: the bench's limit", issue 41)."""
    words = [f.value for e in entries for f in e.figures if f.label.lower() == name and isinstance(f.value, str)]
    return words[0] if words else _mbit(entries, lambda label: label.startswith(name))


def _pmtu(entries: Sequence[Any]) -> str:
    for e in entries:
        for f in e.figures:
            m = re.search(r"path MTU (\d+)", f.label)
            if m:
                return f"{m.group(1)}: own inner {f.text()}"
    return "-"


def _conservation(entries: Sequence[Any]) -> str:
    cons = [e for e in entries if "conservation" in e.nodeid]
    if not cons:
        return "-"
    if any(e.outcome == "failed" or any(not c.held for c in e.checks) for e in cons):
        return "**no**"
    if all(e.outcome in ("skipped", "broken") for e in cons):
        return "not measured"
    return "yes"


def model_rows(entries: Sequence[Any]) -> dict[str, list[list[str]]]:
    """model -> rows (tunnel, outer, inner, cipher, rate, NDR, PDR, PMTU, conservation)."""
    cases: dict[tuple[str, str], list[Any]] = {}
    for e in entries:
        if e.tunnel_case:
            for model in e.hardware or ("-",):
                cases.setdefault((model, e.tunnel_case), []).append(e)
    out: dict[str, list[list[str]]] = {}
    for (model, case), es in sorted(cases.items()):
        m = CASE_ID_RE.match(case)
        tunnel, outer, inner, cipher = (m["tunnel"], f"IPv{m['outer']}", f"IPv{m['inner']}",
                                        CIPHERS.get(m["cipher"], m["cipher"]) + (f", {m['kids']} children" if m["kids"] else "")
                                        ) if m else (case, "?", "?", "?")
        out.setdefault(model, []).append([
            tunnel, outer, inner, cipher,
            _mbit(es, lambda label: "stream" in label and "floor" not in label and "after boot" not in label),
            _search_figure(es, "ndr"), _search_figure(es, "pdr"),
            _pmtu(es), _conservation(es)])
    return out


def verdict_lines(verdict: Sequence[str], entries: Sequence[Any]) -> list[str]:
    """The page's first line after the title: the run's answer (a plugin's, e.g. candidate
    against parent, else the tests' own)."""
    failed = sum(1 for e in entries if e.outcome == "failed")
    broken = sum(1 for e in entries if e.outcome == "broken")
    if verdict:
        return [f"**Verdict: {_cell(verdict[0])}**"] + [f"- {_cell(line)}" for line in verdict[1:]]
    if failed or broken:
        return [f"**Verdict: {failed} test(s) failed, {broken} could not be measured.**"]
    return ["**Verdict: every test that ran passed.**"]


def summary_lines(entries: Sequence[Any]) -> list[str]:
    """Per model the 001 page's table, then what failed, known issues, what is not established."""
    failed = [e for e in entries if e.outcome == "failed"]
    out: list[str] = []
    rows = model_rows(entries)
    header = ("tunnel", "outer", "inner", "cipher", "rate Mbit/s", "NDR Mbit/s", "PDR Mbit/s", "PMTU line",
              "conservation held")
    for model, model_rows_ in rows.items():
        out += [f"**{model}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in model_rows_]
        out.append("")
    bad = [f"- {_cell(e.title)}: {_cell(c.text)} ({_cell(c.detail)})" for e in entries for c in e.checks if not c.held]
    bad += [f"- {_cell(e.title)}: {_cell(_one_line(e.reason))}" for e in failed if not any(not c.held for c in e.checks)]
    out += ["**Failed invariants and tests**", ""] + (bad or ["- none"]) + [""]
    known = [f"- {_cell(e.known_issue)} -- {_cell(e.title)}" for e in entries if e.known_issue]
    out += ["**Known issues**", ""] + (known or ["- none met by this run"]) + [""]
    gaps = [f"- {_cell(e.title)}: {'not run' if e.outcome == 'skipped' else 'lab failed'} -- "
            f"{_cell(_one_line(e.reason, 120))}" for e in entries if e.outcome in ("skipped", "broken")]
    out += ["**Not established**", ""] + (gaps[:12] or ["- nothing: every test ran to a verdict"])
    if len(gaps) > 12:
        out.append(f"- ... and {len(gaps) - 12} more (see \"What is not established\" at the end)")
    return out
