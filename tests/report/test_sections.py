"""The four library records' page sections, rendered in reporting/ (issue 53): the text is
the one the records' own renderers wrote before the move (tests/report/golden_sections/,
written by ``timeshare.markdown``, ``Comparison.markdown``, ``Holds.page_section`` and
``Found.section`` over tests/report/_section_samples.py's objects), so the page did not change."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipsec_hil.lab.measuring.baseline import Comparison
from ipsec_hil.lab.reporting import sections
from ipsec_hil.lab.reporting.page import render_section
from ipsec_hil.lab.sharing.holds import Holds
from ipsec_hil.lab.timeshare import Breakdown
from tests.report import _section_samples

GOLDEN = Path(__file__).parent / "golden_sections"
#: the one text that changed: the old dead-runs renderer put a second blank line under its
#: heading when nothing was undone (notes or failures only); Markdown renders both alike
BLANK_LINE_GONE = {"dead-runs-notes", "dead-runs-left"}


def _render(sample) -> str:
    if isinstance(sample, tuple) and isinstance(sample[0], Breakdown):
        b, wall, traffic = sample
        section = sections.time_share(b, run_wall=wall, traffic_asked=traffic)
    elif isinstance(sample, Comparison):
        section = sections.baseline_comparison(sample)
    elif isinstance(sample, Holds):
        section = sections.lost_leases(sample)
    else:
        section = sections.dead_runs(sample)
    return render_section(section) + "\n" if section is not None else ""


@pytest.mark.parametrize("name", sorted(_section_samples.samples()))
def test_each_section_is_the_text_its_record_rendered_before(name):
    before = (GOLDEN / f"{name}.md").read_text(encoding="utf-8")
    if name in BLANK_LINE_GONE:
        assert before.startswith("## Recovered from dead runs\n\n\n")
        before = before.replace("\n\n\n", "\n\n", 1)
    assert _render(_section_samples.samples()[name]) == before


def test_the_gates_attachment_is_the_pages_section():
    c = _section_samples.comparisons()["baseline-full"]
    assert sections.baseline_comparison_markdown(c) == (GOLDEN / "baseline-full.md").read_text(encoding="utf-8")


def test_the_records_keep_data_only():
    """No renderer left in the records: their sections are made in reporting/ only."""
    from ipsec_hil.lab import dead_runs, timeshare
    from ipsec_hil.lab.sharing import holds

    assert not hasattr(timeshare, "markdown") and not hasattr(Comparison, "markdown")
    assert not hasattr(holds.Holds, "page_section") and not hasattr(dead_runs.Found, "section")



def test_no_section_heading_is_spelled_outside_reporting():
    """A page section's ``## Title`` is spelled in lab/reporting/ only: a library or glue
    module that starts rendering a section of its own again fails here (file:line)."""
    import ast

    root = Path(__file__).resolve().parents[2] / "plugin" / "ipsec_hil"
    hits = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts or (root / "lab" / "reporting") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value.startswith("## ") or "\n## " in node.value):
                hits.append(f"{path.relative_to(root.parents[1])}:{node.lineno}: {node.value[:40]!r}")
    assert not hits, "render page sections in ipsec_hil.lab.reporting.sections:\n" + "\n".join(hits)
