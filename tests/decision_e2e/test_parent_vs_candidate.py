"""End to end: candidate against parent in one run on the virtual lab (issue 14).

The parent is a plain fake build; the slow candidate carries the twin's
``twin-rate-factor=0.8`` marker (twin/fbsd/kld.py): its engine paces offloaded SAs to
80 % of the appliance's slowest port, so the "up" stream (bench -> DUT, encrypted by the
DUT's offloaded SA) is about 20 % slower. The "down" stream is encrypted by the peer's
kernel cipher (the lab tunnel's remote end is not offloaded) and only its ACKs cross the
slow engine; on the default lab's 100 Mbit/s links it measured 10 % faster in one run, no
change in another and 13 % slower in a third (CPU-bound: the engines share two busy cores),
on this module's 40 Mbit/s links x0.996. Its verdict is printed, not asserted: the claim
tested is that a 20 % slower figure is caught, with its figure and interval.

Identical builds: two files that differ only in their bytes (different md5, same speed)
compared a few times; the 19-of-20 statistic is the library's (tests/decision, simulated);
here every run must say "no change" on both figures.

The lab's ports and links run at 40 Mbit/s (``lab_factory.QUIET_RATE_MBIT``), not the
default lab's 100/120. At 100 a stream is as fast as the twin's engines get CPU, and CPU
is what the other xdist worker takes: a CI run beside the fault matrix measured the 20 %
slower build at x0.904 [0.764, 1.058] ("unresolved") and identical builds as a
"progression" on the down figure. At 40 every stream is the link's (or the slow build's
paced engine's) figure whatever the neighbour does, so the verdicts judge the builds.

A parent that cannot be loaded (it does not link) stops the comparison: exit 23 ("not
measured", the lab side), no verdict, and the candidate is loaded again.

One functional test runs first (the gate's short rate test): the functional tests run on
the candidate, the comparison phase follows. One lab for the module; each run has its own
scratch rootdir.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from lab_factory import QUIET_RATE_MBIT, TestLab, lab_fixture, suite_run
from plugin.exitcodes import HilExitCode

TEST = "tests_hil/test_rates.py::test_forwarded_rate[lab-v4in4-gcm-1x10s-up]"
PAIRS, SECONDS = 4, 2  # 3 pairs of 1 s trials missed the 20 % once with the machine at load 9
UP, DOWN = f"1 TCP stream up, {SECONDS} s", f"1 TCP stream down, {SECONDS} s"
IDENTICAL_REPEATS = 3
pytestmark = pytest.mark.needs_root

lab = lab_fixture(rate_mbit=QUIET_RATE_MBIT)  # the figures are the links', not the neighbour's


def _build(path: Path, tag: str, marker: bytes = b"") -> Path:
    path.write_bytes(b"\x7fELF octep " + tag.encode() + b"\n" + marker + os.urandom(2048))
    return path


def _compare(lab: TestLab, rootdir: Path, parent: Path, candidate: Path, *extra: str):
    t0 = time.monotonic()
    r = suite_run([TEST, "--traffic-seconds", "0.1", "--driver", f"xgs3300={candidate}",
                   "--parent-driver", f"xgs3300={parent}", "--compare-pairs", str(PAIRS), "--compare-seconds", str(SECONDS), *extra],
                  rootdir, lab=lab)
    wall = time.monotonic() - t0
    path = rootdir / "reports" / "comparison.json"
    results = json.loads(path.read_text()) if path.exists() else []
    return r, results, wall


def _by_figure(results: list[dict]) -> dict[str, dict]:
    return {c["figure"]: c for res in results for c in res["comparisons"]}


def test_a_20_percent_slower_candidate_is_a_regression(lab, tmp_path):
    parent = _build(tmp_path / "octep-parent.ko", "parent")
    slow = _build(tmp_path / "octep-slow.ko", "candidate", b"twin-rate-factor=0.8\n")
    allure = tmp_path / "allure"
    r, results, wall = _compare(lab, tmp_path / "run", parent, slow, "--alluredir", str(allure))
    out = r.stdout
    assert r.returncode == HilExitCode.CANDIDATE_REGRESSION, f"exit {r.returncode}:\n{out[-5000:]}\n{r.stderr[-2000:]}"
    figures = _by_figure(results)
    up = figures[UP]
    assert up["verdict"] == "regression", up
    assert up["ci_high"] < 0.95 and 0.6 < up["ratio"] < 0.9, up
    assert re.search(r"REGRESSION in [12] figure\(s\): xgs3300 1 TCP stream up, 2 s x0\.\d+ \[0\.\d+, 0\.\d+\]", out), out
    page = (tmp_path / "run" / "reports" / "measurement-page.md").read_text()
    assert "## Candidate against parent" in page and "REGRESSION" in page
    assert (tmp_path / "run" / "reports" / "plots" / "parent-vs-candidate-xgs3300.png").stat().st_size > 1000
    runlevel = [json.loads(p.read_text()) for p in allure.glob("*-result.json")]
    (up_result,) = [x for x in runlevel if x["fullName"] == f"compare::xgs3300::{UP}"]
    assert up_result["status"] == "failed" and up_result["attachments"][0]["type"] == "image/png"
    assert (allure / up_result["attachments"][0]["source"]).read_bytes()[:4] == b"\x89PNG"
    added = results[0]["wall_seconds"]
    down = figures[DOWN]
    print(f"\nslow candidate: up x{up['ratio']:.3f} [{up['ci_low']:.3f}, {up['ci_high']:.3f}]; down {down['verdict']} "
          f"x{down['ratio']:.3f}; "
          f"comparison phase {added:.1f} s of a {wall:.1f} s run")


def test_a_20_percent_slower_candidate_is_a_pdr_regression(lab, tmp_path):
    """--compare-figures pdr: one PDR search per trial (UDP, 0.5 % loss) instead of a stream;
    the slow build's engine paces offloaded SAs to 80 % of the port, so the PDR through the
    DUT's offloaded SA falls by about a fifth and the verdict says so with its interval."""
    parent = _build(tmp_path / "octep-parent.ko", "parent")
    slow = _build(tmp_path / "octep-slow.ko", "candidate", b"twin-rate-factor=0.8\n")
    r, results, wall = _compare(lab, tmp_path / "run", parent, slow, "--compare-figures", "pdr")
    first = results[0]["comparisons"][0] if results and results[0]["comparisons"] else None
    if (r.returncode == 0 and first and first["verdict"] == "no change" and not first["equivalence_proved"]
            and first["ratio"] < 0.9):
        # One PDR search that met a stall of the shared 2-core machine halves that trial
        # (CI, stop 19: parent 106/96/82/52 Mbit/s, x0.81 [0.60, 1.19], "more trials
        # needed"). Only that case -- slower by the point estimate, the interval unresolved --
        # is measured once more; both attempts are printed, and the second must be the verdict.
        print(f"\nfirst attempt unresolved: x{first['ratio']:.3f} [{first['ci_low']:.3f}, {first['ci_high']:.3f}], "
              f"trials {[t['mbit'] for t in results[0]['trials']]} Mbit/s; measuring again")
        r, results, wall = _compare(lab, tmp_path / "run2", parent, slow, "--compare-figures", "pdr")
    out = r.stdout
    assert r.returncode == HilExitCode.CANDIDATE_REGRESSION, f"exit {r.returncode}:\n{out[-5000:]}\n{r.stderr[-2000:]}"
    (pdr,) = results[0]["comparisons"]
    assert pdr["figure"].startswith("PDR (loss <= 0.5 %"), pdr
    assert pdr["verdict"] == "regression" and pdr["ci_high"] < 0.95 and 0.6 < pdr["ratio"] < 0.9, pdr
    trials = results[0]["trials"]
    assert len(trials) == 2 * PAIRS and all(t["mbit"] > 0 for t in trials), trials
    assert re.search(r"REGRESSION in 1 figure\(s\): xgs3300 PDR \(loss <= 0\.5 %", out), out
    print(f"\nslow candidate, PDR: x{pdr['ratio']:.3f} [{pdr['ci_low']:.3f}, {pdr['ci_high']:.3f}]; parent "
          f"{[t['mbit'] for t in trials if t['role'] == 'parent']} candidate "
          f"{[t['mbit'] for t in trials if t['role'] == 'candidate']} Mbit/s; comparison phase "
          f"{results[0]['wall_seconds']:.1f} s of a {wall:.1f} s run")


def test_identical_builds_are_no_change(lab, tmp_path):
    parent = _build(tmp_path / "octep-parent.ko", "parent")
    same = _build(tmp_path / "octep-same.ko", "same speed")
    no_change, lines = 0, []
    for i in range(IDENTICAL_REPEATS):
        r, results, wall = _compare(lab, tmp_path / f"run{i}", parent, same)
        assert r.returncode == 0, f"run {i}: exit {r.returncode}:\n{r.stdout[-5000:]}\n{r.stderr[-2000:]}"
        verdicts = {f: c["verdict"] for f, c in _by_figure(results).items()}
        assert set(verdicts) == {UP, DOWN}, verdicts
        no_change += all(v == "no change" for v in verdicts.values())
        lines.append(f"run {i}: {verdicts}, phase {results[0]['wall_seconds']:.1f} s of {wall:.1f} s")
    print("\n" + "\n".join(lines) + f"\nidentical builds: no change in {no_change} of {IDENTICAL_REPEATS}")
    assert no_change == IDENTICAL_REPEATS


def test_a_parent_that_cannot_load_is_not_measured_not_a_verdict(lab, tmp_path):
    """The lab side failing mid-comparison (here: the parent does not link) gives exit 23,
    no verdict, and the candidate loaded again for the --driver restore."""
    broken = _build(tmp_path / "octep-broken-parent.ko", "parent", b"twin-unresolved-symbol=crypto_dispatch_async\n")
    cand = _build(tmp_path / "octep-cand.ko", "candidate")
    r, results, _ = _compare(lab, tmp_path / "run", broken, cand)
    out = r.stdout
    assert r.returncode == HilExitCode.COMPARISON_NOT_MEASURED, f"exit {r.returncode}:\n{out[-5000:]}\n{r.stderr[-2000:]}"
    assert "candidate vs parent: NOT MEASURED: xgs3300: swapping to" in out and "crypto_dispatch_async" in out
    assert results and results[0]["comparisons"] == [] and "AND the candidate" not in (results[0]["error"] or "")
    assert "previous module restored and loaded" in out
