"""The single-file Allure report, opened in headless Chromium, shows what a reviewer needs.

Why a real run: the report is only worth attaching to an issue if the suites, the counter
ledger and the rate plot of a real acceptance run are in it and render. So the module
runs two acceptance tests against the virtual lab (tests_hil, started by the plugin as in
any run), builds the reports with tools/report, and drives Debian's chromium over the
DevTools pipe (tests/report/cdp.py): expands the Suites tree, opens the conservation
test and clicks its plot and ledger attachments. A missing ledger or plot fails the test.

Screenshots are kept in reports/screenshots/ (git-ignored); their paths are printed.
The inner run has a scratch rootdir of its own (tests/lab_factory.py): its measurement
page and plots stay there, out of the repository's reports/.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.lab_factory import subprocess_env, suite_run

from .cdp import CHROMIUM, Browser

REPO = Path(__file__).resolve().parents[2]
ALLURE = REPO / "tools" / "node" / "node_modules" / ".bin" / "allure"
SCREENSHOTS = REPO / "reports" / "screenshots"

CASE = "lab-v4in4-gcm"
CONSERVATION = "test_appliance_sourced_conservation"
BRINGUP = "test_all_children_established"

pytestmark = pytest.mark.needs_root


@dataclass
class Built:
    results: Path
    multi: Path
    single: Path  # the index.html
    embedded: dict[str, bytes]  # path inside the report -> content, from the single file
    report_stdout: str

    def json(self, name: str):
        return json.loads(self.embedded[name])


def embedded_files(index: Path) -> dict[str, bytes]:
    """What Allure 2's single-file mode inlines: ``d('data/...json','<base64>')`` calls."""
    text = index.read_text(encoding="utf-8")
    return {k: base64.b64decode(v) for k, v in re.findall(r"d\('([^']+)','([^']*)'\)", text)}


def _tail(proc: subprocess.CompletedProcess, n: int = 40) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-n:])


def run_report(results: Path, multi: Path, single_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "tools" / "report"), "--results", str(results),
                           "--out", str(multi), "--single", str(single_dir)],
                          capture_output=True, text=True, timeout=600, env=subprocess_env())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    missing = [what for what, ok in (("chromium", Path(CHROMIUM).exists()),
                                     ("java", shutil.which("java") is not None),
                                     (str(ALLURE), ALLURE.exists())) if not ok]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run tools/setup", pytrace=False)
    base = tmp_path_factory.mktemp("report")
    results = base / "allure-results"
    run = suite_run(["tests_hil/test_bringup.py", "tests_hil/test_conservation.py",
                     "-k", f"{CASE} and ({BRINGUP} or {CONSERVATION})", "--traffic-seconds", "0.3",
                     "--alluredir", str(results), "-q"], base / "checkout", timeout=900)
    # 1 = a test failed (e.g. a rate floor on a busy machine): its results still carry the
    # ledger and the plot, which is what this module checks.
    assert run.returncode in (0, 1), f"acceptance run exited {run.returncode}:\n{_tail(run)}"
    assert len(list(results.glob("*-result.json"))) == 2, f"expected 2 results:\n{_tail(run)}"
    rep = run_report(results, base / "allure-report", base / "allure-report-single")
    assert rep.returncode == 0, f"tools/report exited {rep.returncode}:\n{_tail(rep)}"
    index = base / "allure-report-single" / "index.html"
    return Built(results, base / "allure-report", index, embedded_files(index), rep.stdout)


def _test_case(built: Built, name: str) -> dict:
    for path, body in built.embedded.items():
        if path.startswith("data/test-cases/"):
            tc = json.loads(body)
            if tc["name"].startswith(name):
                return tc
    raise AssertionError(f"no test case {name!r} embedded in {built.single}")


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def _say(capsys, text: str) -> None:
    with capsys.disabled():
        print(f"\n{text}")


def test_single_file_is_one_self_contained_page(built):
    html = built.single.read_text(encoding="utf-8")
    assert list(built.single.parent.iterdir()) == [built.single]
    assert "googletagmanager" not in html, "ALLURE_NO_ANALYTICS=true did not take effect"
    assert not re.search(r"""(src|href)=["']https?://""", html), "the page loads something from the network"
    cases = [p for p in built.embedded if p.startswith("data/test-cases/")]
    assert len(cases) == 2, cases
    env = built.json("widgets/environment.json")
    assert any(e["name"] == "lab.virtual" and e["values"] == ["true"] for e in env), env


def test_suites_tree_lists_both_modules_and_tests(built, tmp_path, capsys):
    with Browser(tmp_path / "profile") as b:
        b.goto(built.single.as_uri() + "#suites")
        b.wait_for("!!document.querySelector('.node__title')", "the Suites tree")
        # expand every group, one click per round: a click re-renders the tree
        for _ in range(50):
            clicked = b.js("""(() => { window.__open = window.__open || new Set();
                for (const g of document.querySelectorAll('.node[data-node-kind=group]')) {
                  const u = g.dataset.nodeUid;
                  if (!window.__open.has(u)) { window.__open.add(u);
                    g.querySelector(':scope > .node__title').click(); return 1; } }
                return 0; })()""")
            if not clicked:
                break
        nodes = b.js("[...document.querySelectorAll('.node')].map(e => [e.dataset.nodeKind || 'test', "
                     "e.querySelector('.node__name').textContent])")
        shot = b.screenshot(SCREENSHOTS / "report-suites.png")
    _say(capsys, f"screenshot: {shot}")
    groups = {n for kind, n in nodes if kind == "group"}
    tests = {n for kind, n in nodes if kind == "test"}
    assert {"tests_hil", "test_bringup", "test_conservation"} <= groups, nodes
    assert tests == {f"{BRINGUP}[{CASE}]", f"{CONSERVATION}[{CASE}]"}, nodes


def test_conservation_result_shows_its_plot_and_ledger(built, tmp_path, capsys):
    tc = _test_case(built, CONSERVATION)
    with Browser(tmp_path / "profile") as b:
        b.goto(built.single.as_uri() + f"#testresult/{tc['uid']}")
        b.wait_for("document.querySelectorAll('.attachment-row').length", "the test's attachments")
        rows = b.js("[...document.querySelectorAll('.attachment-row')].map(r => ({type: r.dataset.type, "
                    "uid: r.dataset.uid, name: r.querySelector('.attachment-row__name').textContent}))")
        plots = [r for r in rows if r["type"] == "image/png"]
        ledgers = [r for r in rows if r["name"].startswith("ledger ") and r["type"] == "text/plain"]
        assert plots, f"no PNG plot attached: {rows}"
        assert ledgers, f"no 'ledger ...' table attached: {rows}"

        # the plot: click it open, the browser decodes the embedded image
        b.js(f"document.querySelector('.attachment-row[data-uid=\"{plots[0]['uid']}\"]').click()")
        shown = b.wait_for("(() => { const i = document.querySelector('img.attachment-preview__media');"
                           " return i && i.complete && i.naturalWidth ? [i.naturalWidth, i.naturalHeight] : null })()",
                           "the plot to render")
        png = built.embedded[f"data/attachments/{plots[0]['uid']}.png"]
        assert tuple(shown) == _png_size(png), (shown, _png_size(png))
        assert shown[0] >= 300 and shown[1] >= 200, shown
        shot = b.screenshot(SCREENSHOTS / "report.png")

        # the ledger: click it open, the table's text is on the page
        b.js(f"document.querySelector('.attachment-row[data-uid=\"{ledgers[0]['uid']}\"]').click()")
        text = b.wait_for("(() => { const p = [...document.querySelectorAll('.attachment-row__preview, "
                          ".attachment-row + *, pre, code')].map(e => e.innerText).join('\\n');"
                          " return /ledger:/.test(p) ? p : null })()", "the ledger table to render")
    _say(capsys, f"screenshot: {shot}")
    assert re.search(r"appliance\s+counter\s+before\s+after\s+delta", text), text[:500]
    assert "tx_encrypt" in text and "dut3300" in text, text[:500]


def test_second_report_carries_history(built, tmp_path):
    """Run tools/report again on the same results: the trend has two builds, 2 and 1."""
    multi, single = tmp_path / "multi", tmp_path / "single"
    shutil.copytree(built.multi, multi)
    results = tmp_path / "results"
    shutil.copytree(built.results, results)
    rep = run_report(results, multi, single)
    assert rep.returncode == 0, _tail(rep)
    assert "history files carried" in rep.stdout and "build 2" in rep.stdout, rep.stdout
    trend = json.loads((multi / "history" / "history-trend.json").read_text())
    assert [p.get("buildOrder") for p in trend] == [2, 1], trend
    embedded = embedded_files(single / "index.html")
    assert len(json.loads(embedded["widgets/history-trend.json"])) == 2
    # single-file mode writes no history/ of its own (allure2 #2740): the multi-file keeps it
    assert not (single / "history").exists()
