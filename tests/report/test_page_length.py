"""The measurement page of a full ``-m xgs136`` run is a page a person reads (issue 39).

Why: the page is attached to an issue and read there. At 2b60ac4 a full run's page held
every test's figures, invariants and counter ledgers inline: ~8,000 lines on a real run,
11,408 for the records here. Now the per-test detail is in each test's Allure result
(linked from the page) and the page keeps, per configuration, one row per test. The
first screen -- the answer -- must not change in content: it is compared with the one the
old renderer wrote from the same records (tests/data/page_first_screen_xgs136.md).

The records: tests/report/page_run.py (the real 152 node ids of ``-m xgs136``, each test
with the figures, invariants and ledgers its kind records; a full run takes 17 min).
"""

from __future__ import annotations

import json
from pathlib import Path

from ipsec_hil.lab.reporting.report import render_page, write_page

from . import page_run

DATA = Path(__file__).resolve().parents[1] / "data"
#: Lines the plugins may append to the page after the renderer (where the time went ~15,
#: known issues, a gate's or a comparison's section): the rendered page must leave them room
#: under 500.
APPENDED = 50


def test_a_full_runs_page_is_under_500_lines_and_its_first_screen_unchanged():
    entries = page_run.page_entries()
    assert len(entries) == 152
    text = render_page(page_run.run_info(), entries)
    lines = text.splitlines()
    assert len(lines) < 500 - APPENDED, f"the page has {len(lines)} lines"
    first_screen = text.split("## The hardware and the driver build")[0]
    assert first_screen == (DATA / "page_first_screen_xgs136.md").read_text()
    # every test that ran is on the page, in its configuration's table
    for e in entries:
        if e.outcome != "skipped":
            assert f"| {e.nodeid.split('::')[-1]} | {e.outcome} |" in text, e.nodeid
    # the failure's evidence stays on the page: its broken invariant and its ledgers
    detail = text.split("## Failed tests in detail")[1].split("\n## ")[0]
    assert "**BROKEN**: frames handed = frames decrypted (2,358,711 vs 2,358,288)" in detail
    failed = next(e for e in entries if e.outcome == "failed")
    assert all(ledger.rstrip("\n") in detail for ledger in failed.ledgers)
    # and no passed test's ledger is
    passed = next(e for e in entries if e.outcome == "passed" and e.ledgers)
    assert passed.ledgers[0].rstrip("\n") not in text


def _result(d: Path, uuid: str, module: str, name: str, stop: int) -> None:
    (d / f"{uuid}-result.json").write_text(json.dumps({"uuid": uuid, "name": name, "fullName": f"{module}#x",
                                                       "stop": stop, "status": "passed"}))


def test_each_row_links_its_tests_allure_result_the_latest_retry(tmp_path):
    entries = page_run.page_entries()[:3]
    results = tmp_path / "reports" / "allure-results"
    results.mkdir(parents=True)
    module, name = Path(entries[0].nodeid.split("::")[0]).stem, entries[0].nodeid.split("::")[-1]
    _result(results, "aaaaaaaa-1111", f"tests_hil.{module}", name, stop=1)
    _result(results, "bbbbbbbb-2222", module, name, stop=2)  # the retry, as an installed run names it
    _result(results, "cccccccc-3333", "other_module", entries[1].nodeid.split("::")[-1], stop=3)
    (results / "dddddddd-result.json").write_text("[not a result]")
    page = write_page(page_run.run_info(), entries, tmp_path / "reports", allure_results=results).read_text()
    row = next(line for line in page.splitlines() if line.startswith(f"| {name} |"))
    assert row.endswith("| [bbbbbbbb](allure-results/bbbbbbbb-2222-result.json) |"), row
    other = next(line for line in page.splitlines() if line.startswith(f"| {entries[1].nodeid.split('::')[-1]} |"))
    assert other.endswith("| - |"), "a result of another module was linked"
