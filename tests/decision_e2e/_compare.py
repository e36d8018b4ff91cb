"""What the parent-against-candidate modules share (issue 14): the fake builds, one
comparison run on a lab, and its verdicts by figure.

Two modules use it, each with a lab at its own rate (tests/lab_factory.py says why): the
TCP-stream comparisons (test_parent_vs_candidate.py) at ``QUIET_STREAM_RATE_MBIT``, the
PDR comparison (test_parent_vs_candidate_pdr.py) at ``QUIET_RATE_MBIT``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ipsec_hil.lab.comparing.build_comparison import figure_name
from tests.lab_factory import TestLab, suite_run

TEST = "tests_hil/test_rates.py::test_forwarded_rate[lab-v4in4-gcm-1x10s-up]"
PAIRS, SECONDS = 4, 2  # 3 pairs of 1 s trials missed the 20 % once with the machine at load 9
UP, DOWN = f"1 TCP stream up, {SECONDS} s", f"1 TCP stream down, {SECONDS} s"
CPU = figure_name("cpu", SECONDS)
SLOW_MARKER = b"twin-rate-factor=0.8\n"
"""The twin's marker for a build whose engine paces offloaded SAs to 80 % of the
appliance's slowest port (twin/ipsec_hil_twin/fbsd/kld.py): a 20 % slower candidate."""
COSTLY_MARKER = b"twin-cpu-factor=1.25\n"
"""The twin's marker for a build that costs 25 % more kernel CPU per packet it carries
(twin/ipsec_hil_twin/fbsd/kld.py) and is as fast: a regression only the CPU figure sees."""


def build(path: Path, tag: str, marker: bytes = b"") -> Path:
    """A fake module file: the twin reads only its marker lines; the random tail gives
    every build its own md5."""
    path.write_bytes(b"\x7fELF octep " + tag.encode() + b"\n" + marker + os.urandom(2048))
    return path


def compare(lab: TestLab, rootdir: Path, parent: Path, candidate: Path, *extra: str, pairs: int = PAIRS):
    """One suite run on ``lab``: the functional test on the candidate, then the comparison
    phase of ``pairs`` pairs; (the completed process, reports/comparison.json's results,
    wall seconds). The figures are the two streams unless ``extra`` names others (the last
    ``--compare-figures`` wins): the gate's default adds the CPU figure, which 2 s trials
    cannot decide within these modules' budgets (issue 54: ~25 pairs), and the CPU figure
    has a module test of its own (test_a_costlier_build_...)."""
    t0 = time.monotonic()
    r = suite_run([TEST, "--traffic-seconds", "0.1", "--driver", f"xgs3300={candidate}",
                   "--parent-driver", f"xgs3300={parent}", "--compare-pairs", str(pairs),
                   "--compare-seconds", str(SECONDS), "--compare-figures", "up,down", *extra],
                  rootdir, lab=lab)
    wall = time.monotonic() - t0
    path = rootdir / "reports" / "comparison.json"
    results = json.loads(path.read_text()) if path.exists() else []
    return r, results, wall


def by_figure(results: list[dict]) -> dict[str, dict]:
    """Every comparison of every model's result, by its figure's name."""
    return {c["figure"]: c for res in results for c in res["comparisons"]}
