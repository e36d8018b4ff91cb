"""`ipsec-hil-flakes`: run an acceptance selection K times on a lab and say, per test, how
often it failed -- the gate's false-alarm rate, measured (issue 52).

    ipsec-hil-flakes --runs 5 -- -m xgs136                       # the virtual lab, 5 runs
    ipsec-hil-flakes --runs 3 -- -m xgs3300 --topology topologies/real-lab.yaml
    ipsec-hil-flakes --table-only --lab virtual --last 20        # what the history holds

Each run is `python -m pytest ARGS` in the current directory (the checkout, or a driver
repository with the suite installed), tagged through the environment
(ipsec_hil.lab.reporting.history.TAG_ENV) so its line in the reports' history.jsonl is
found again. The table: per test, runs, failures, flips (pass -> fail -> pass, as the
Linux netdev CI counts flakes), the invariants that failed and the counters that differed.
On a real lab this is how a team qualifies it; on the virtual lab it is the evidence that
a healthy lab passes every time.

Exit status: 0 every run passed every test it ran; 1 a test failed in some run; 2 what was
typed cannot be used (ipsec_hil.cli); 3 a run recorded nothing (it collected no acceptance
test, or stopped before its page): a run that measured nothing is not a pass.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from ipsec_hil.cli import ArgumentParser, InputError
from ipsec_hil.lab.reporting import history

NOTHING_RECORDED = 3


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, pytest_args = args[:cut], args[cut + 1:]
    ap = ArgumentParser(prog="ipsec-hil-flakes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="how many times to run the selection (default 5)")
    ap.add_argument("--reports", type=Path, default=Path("reports"),
                    help="the reports directory the runs write (default ./reports: the checkout's)")
    ap.add_argument("--table-only", action="store_true", help="run nothing: tabulate the history's last runs")
    ap.add_argument("--lab", help="with --table-only: the lab whose runs to tabulate (default: every lab)")
    ap.add_argument("--last", type=int, default=history.RECENT_RUNS, help="with --table-only: how many runs")
    opts = ap.parse_args(args)
    path = opts.reports / history.HISTORY_NAME
    try:
        if opts.table_only:
            runs = history.load(path, opts.lab)[-opts.last:] if opts.last > 0 else []
            if not runs:
                raise InputError(f"ipsec-hil-flakes: {path} holds no run{' of lab ' + opts.lab if opts.lab else ''}")
            return _print(runs, f"the last {len(runs)} runs in {path}")
        if opts.runs < 1:
            raise InputError(f"ipsec-hil-flakes: --runs must be at least 1, not {opts.runs}")
        if not pytest_args:
            raise InputError("ipsec-hil-flakes: name the selection after `--`, e.g. `ipsec-hil-flakes -- -m xgs136`")
    except (InputError, history.HistoryError) as exc:
        return exc.report() if isinstance(exc, InputError) else InputError(f"ipsec-hil-flakes: {exc}").report()
    tag = f"flakes-{uuid.uuid4().hex[:12]}"
    env = {**os.environ, history.TAG_ENV: tag}
    statuses = []
    for i in range(1, opts.runs + 1):
        t0 = time.monotonic()
        rc = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], env=env).returncode
        statuses.append(rc)
        print(f"ipsec-hil-flakes: run {i} of {opts.runs}: exit {rc}, {time.monotonic() - t0:.0f} s", flush=True)
    try:
        runs = [r for r in history.load(path) if r.tag == tag]
    except history.HistoryError as exc:
        return InputError(f"ipsec-hil-flakes: {exc}").report()
    rc = _print(runs, f"{len(runs)} of {opts.runs} runs of `pytest {' '.join(pytest_args)}`")
    if len(runs) < opts.runs:
        print(f"ipsec-hil-flakes: {opts.runs - len(runs)} of {opts.runs} runs recorded nothing in {path} "
              f"(exits {statuses}): they measured nothing, which is no pass", file=sys.stderr)
        return NOTHING_RECORDED
    return rc


def _print(runs: list[history.Run], what: str) -> int:
    rows = history.flakes(runs)
    print(f"ipsec-hil-flakes: {what}")
    print(history.flakes_table(rows))
    failed = [f for f in rows if f.failures]
    print(f"ipsec-hil-flakes: {len(rows)} tests, {sum(f.runs for f in rows)} test runs, "
          f"{sum(f.failures for f in rows)} failures in {len(failed)} tests, {sum(f.flips for f in rows)} flips")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
