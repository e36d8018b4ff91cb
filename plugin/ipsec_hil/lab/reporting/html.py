"""Turn a run's Allure results into the HTML report a person opens (Allure 2).

One call after any run that wrote ``--alluredir reports/allure-results``
(:func:`build_reports`; the command line is ``ipsec-hil-report``, ipsec_hil.report_cli, and
in a checkout ``tools/report``) writes

  reports/allure-report/             the multi-file Allure 2 report (keeps history/)
  reports/allure-report-single/index.html
                                     the same report as ONE self-contained HTML file
                                     (data and attachments inlined): attach it to an issue

Why two reports: Allure 2's --single-file mode writes no history/ (allure2 issue #2740),
so the multi-file report is what carries the trend from run to run. Before generating,
the previous multi-file report's history/ is copied into the results as results/history/
(Allure's documented way), so both reports show the trend and the retries of earlier runs.
Each run also gets the next buildOrder in executor.json (unless the run set one), so the
trend's points are numbered 1, 2, 3, ... instead of all unnumbered.

Allure 2 itself is a Java program found by :func:`find_allure`: in a checkout the npm
package allure-commandline (pinned in tools/node/package.json; tools/setup runs ``npm ci``
there), else ``allure`` on PATH, or a path given. ALLURE_NO_ANALYTICS=true keeps Allure's
analytics script out of the page (the value "1" does not -- see the reference).

Only the standard library, so tools/report runs it with any python3, with or without the venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

#: The checkout this module sits in (plugin/ipsec_hil/lab/reporting/ -> the repository);
#: an installed suite has no tools/node next to it.
CHECKOUT = Path(__file__).resolve().parents[4]
CHECKOUT_ALLURE = CHECKOUT / "tools" / "node" / "node_modules" / ".bin" / "allure"
REPORT_NAME = "IPsec offload acceptance"


class ReportError(Exception):
    """A problem the user can act on; printed as one line, exit status 2."""


def _count_results(results: Path) -> int:
    return sum(1 for _ in results.glob("*-result.json"))


def carry_history(previous_report: Path, results: Path) -> int:
    """Copy ``previous_report/history`` to ``results/history``; returns files copied.

    A results/history left by an earlier tools/report on the same results is replaced by
    the report's (which then already holds that run: reporting one run twice adds a second
    point for it to the trend, as Allure does).
    """
    src = previous_report / "history"
    dst = results / "history"
    if dst.exists():
        shutil.rmtree(dst)
    if not src.is_dir():
        return 0
    shutil.copytree(src, dst)
    return sum(1 for p in dst.iterdir() if p.is_file())


def _previous_build_order(history: Path) -> int:
    """Highest buildOrder in a history-trend.json (0 if none or unreadable)."""
    trend = history / "history-trend.json"
    try:
        items = json.loads(trend.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    orders = [i.get("buildOrder") for i in items if isinstance(i, dict)]
    return max((o for o in orders if isinstance(o, int)), default=0)


def _read_object(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ReportError(f"{path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def number_build(results: Path) -> int | None:
    """Give executor.json the next buildOrder after the carried history's, if it has none.

    Returns the buildOrder the run now has (None when there is no executor.json: the run
    was not made by this suite's plugin, and nothing is invented for it).
    """
    ex = results / "executor.json"
    # The run's own file is kept aside: numbering again starts from it, so a second
    # tools/report on the same results numbers it after the carried history again. A
    # file without buildOrder is the run's own (fresh from the plugin): it replaces the copy.
    orig = results / ".executor.json.orig"
    if not ex.is_file():
        return None
    current = _read_object(ex)
    if "buildOrder" not in current or not orig.is_file():
        shutil.copyfile(ex, orig)
    data = _read_object(orig)
    if isinstance(data.get("buildOrder"), int):
        return data["buildOrder"]
    data["buildOrder"] = _previous_build_order(results / "history") + 1
    tmp = ex.with_name(".executor.json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, ex)
    return data["buildOrder"]


def find_allure(given: str | os.PathLike[str] | None = None) -> Path:
    """The Allure 2 command line: ``given`` (``--allure PATH``), else the checkout's
    tools/node one (tools/setup installs it; present when this package runs from a
    checkout), else ``allure`` on PATH (an installed suite: the driver repository's own)."""
    if given is not None:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ReportError(f"--allure {given}: not an executable file")
        return path
    if CHECKOUT_ALLURE.exists():
        return CHECKOUT_ALLURE
    on_path = shutil.which("allure")
    if on_path:
        return Path(on_path)
    raise ReportError(f"no Allure 2 command line: {CHECKOUT_ALLURE} is missing (in a checkout: run tools/setup, "
                      "it runs `npm ci` in tools/node), no `allure` on PATH; or give --allure PATH")


def allure_generate(results: Path, out: Path, *, single_file: bool, name: str, allure: Path | None = None) -> float:
    """Run ``allure generate`` (Allure 2) into ``out`` (replaced); returns seconds taken."""
    allure = allure if allure is not None else find_allure()
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ReportError("java not found (Allure 2 needs a JRE): run tools/setup (default-jre-headless)")
    cmd = [str(allure), "generate", str(results), "-o", str(out), "--clean", "--name", name]
    if single_file:
        cmd.append("--single-file")
    env = dict(os.environ, ALLURE_NO_ANALYTICS="true")
    # A short-lived JVM: C1 only and the serial collector start faster and halved the time
    # on this 2-core machine under load (68 s -> 33 s for both reports). The caller's
    # JAVA_OPTS wins.
    env.setdefault("JAVA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise ReportError(f"allure generate{' --single-file' if single_file else ''} exited "
                          f"{proc.returncode}:\n{tail}")
    return took


def build_reports(results: Path, report: Path, single: Path, name: str = REPORT_NAME,
                  allure: Path | None = None) -> dict:
    """The whole job; returns what was done (paths, counts, seconds) for the summary line.

    ``allure``: the command line to use (default :func:`find_allure`'s choice)."""
    if not results.is_dir():
        raise ReportError(f"{results}: no such results directory (run pytest with --alluredir {results})")
    n = _count_results(results)
    if n == 0:
        raise ReportError(f"{results}: no *-result.json in it (did the run write Allure results?)")
    allure = allure if allure is not None else find_allure()
    carried = carry_history(report, results)
    order = number_build(results)
    t_multi = allure_generate(results, report, single_file=False, name=name, allure=allure)
    t_single = allure_generate(results, single, single_file=True, name=name, allure=allure)
    index = single / "index.html"
    if not index.is_file():
        raise ReportError(f"allure wrote no {index}")
    return {"results": n, "allure": allure, "history_files": carried, "build_order": order, "report": report,
            "single": index, "single_bytes": index.stat().st_size,
            "seconds": round(t_multi + t_single, 1)}
