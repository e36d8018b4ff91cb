"""``ipsec-hil-report`` (or ``python -m ipsec_hil.report_cli``; ``tools/report`` in a checkout):
a run's Allure results -> the HTML report (ipsec_hil.lab.reporting.html says what and why).

    ipsec-hil-report                     # ./reports/allure-results -> ./reports/allure-report*
    ipsec-hil-report --reports DIR       # the three directories under DIR instead
    ipsec-hil-report --allure PATH       # this Allure 2 command line

Exit 0 when both reports were written; 2 with one line naming the problem (a missing or
empty results directory, a bad executor.json, no Allure or no Java, an option it does not
know: ipsec_hil.cli) otherwise. It reads a run's results, never a lab file: run the
acceptance tests first. Only the standard library: tools/report runs it with any python3.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ipsec_hil.cli import INPUT_ERROR, ArgumentParser
from ipsec_hil.lab.reporting.html import REPORT_NAME, ReportError, build_reports, find_allure


def main(argv: list[str] | None = None, *, reports: Path | None = None, prog: str = "ipsec-hil-report") -> int:
    """``reports``: the default reports directory (./reports; tools/report passes the checkout's)."""
    ap = ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--reports", type=Path, default=reports or Path("reports"),
                    help="the run's reports directory, for the three defaults below (default: %(default)s)")
    ap.add_argument("--results", type=Path, help="Allure results of the run (default: REPORTS/allure-results)")
    ap.add_argument("--out", type=Path, help="multi-file report, keeps history/ (default: REPORTS/allure-report)")
    ap.add_argument("--single", type=Path,
                    help="directory of the single-file index.html (default: REPORTS/allure-report-single)")
    ap.add_argument("--name", default=REPORT_NAME, help=f"report title (default: {REPORT_NAME!r})")
    ap.add_argument("--allure", metavar="PATH",
                    help="the Allure 2 command line (default: the checkout's tools/node one, else `allure` on PATH)")
    a, extra = ap.parse_known_args(argv)
    lab = next((x for x in extra if x.endswith((".yaml", ".yml"))), None)
    if lab is not None and not any(x.startswith("-") for x in extra):  # a lab file where results are read
        print(f"{prog}: {lab} is a lab file; the report reads a run's Allure results: run the acceptance "
              f"tests on it first (`ipsec-hil-acceptance --topology {lab}`), then {prog}", file=sys.stderr)
        return INPUT_ERROR
    if extra:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    results = a.results or a.reports / "allure-results"
    out = a.out or a.reports / "allure-report"
    single = a.single or a.reports / "allure-report-single"
    try:
        done = build_reports(results.resolve(), out.resolve(), single.resolve(), a.name,
                             allure=find_allure(a.allure) if a.allure else None)
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return INPUT_ERROR
    order = f", build {done['build_order']}" if done["build_order"] is not None else ""
    print(f"report: {done['results']} results, {done['history_files']} history files carried{order}, "
          f"{done['seconds']} s")
    print(f"report: multi-file  {done['report']}/index.html")
    print(f"report: single file {done['single']} ({done['single_bytes']:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
