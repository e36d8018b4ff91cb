"""End to end: candidate against parent on the PDR figure (issue 14; the TCP-stream
figures: test_parent_vs_candidate.py, which says what the fake builds are).

``--compare-figures pdr``: one PDR search per trial (UDP, 0.5 % loss) instead of a stream.
The lab's ports and links run at ``lab_factory.QUIET_RATE_MBIT`` (40 Mbit/s), not at the
stream module's 20: at 20 the 20 % slower build's PDR measured x0.926, not a regression
(12-04): the search's resolution is a share of the link, and a fifth of a 20 Mbit/s link is
too few datagrams per trial.
"""

from __future__ import annotations

import re

import pytest

from tests.decision_e2e._compare import SLOW_MARKER, build, compare
from ipsec_hil.lab.decision.compare import Rule
from tests.lab_factory import QUIET_RATE_MBIT, lab_fixture
from ipsec_hil.exitcodes import HilExitCode

pytestmark = pytest.mark.needs_root

lab = lab_fixture(rate_mbit=QUIET_RATE_MBIT)
PDR_PAIRS = Rule().min_pairs
"""The verdict rule's fewest pairs (3), not the stream module's 4: a PDR search is ~25 s
of trials, and at 40 Mbit/s every search of a build found the same figure (12-04: parent
44.0 x4, slow candidate 33.935 x4, x0.771 [0.771, 0.771]), so a fourth pair adds 50 s
and no information. A stalled search is what the one re-measurement below is for."""


def test_a_20_percent_slower_candidate_is_a_pdr_regression(lab, tmp_path):
    """--compare-figures pdr: one PDR search per trial (UDP, 0.5 % loss) instead of a stream;
    the slow build's engine paces offloaded SAs to 80 % of the port, so the PDR through the
    DUT's offloaded SA falls by about a fifth and the verdict says so with its interval."""
    parent = build(tmp_path / "octep-parent.ko", "parent")
    slow = build(tmp_path / "octep-slow.ko", "candidate", SLOW_MARKER)
    r, results, wall = compare(lab, tmp_path / "run", parent, slow, "--compare-figures", "pdr", pairs=PDR_PAIRS)
    first = results[0]["comparisons"][0] if results and results[0]["comparisons"] else None
    if (r.returncode == HilExitCode.COMPARISON_UNRESOLVED and first and first["verdict"] == "unresolved"
            and first["ratio"] < 0.9):
        # One PDR search that met a stall of the shared 2-core machine halves that trial
        # (CI, stop 19: parent 106/96/82/52 Mbit/s, x0.81 [0.60, 1.19], "more trials
        # needed"). Only that case -- slower by the point estimate, the interval unresolved --
        # is measured once more; both attempts are printed, and the second must be the verdict.
        print(f"\nfirst attempt unresolved: x{first['ratio']:.3f} [{first['ci_low']:.3f}, {first['ci_high']:.3f}], "
              f"trials {[t['value'] for t in results[0]['trials']]} Mbit/s; measuring again")
        r, results, wall = compare(lab, tmp_path / "run2", parent, slow, "--compare-figures", "pdr", pairs=PDR_PAIRS)
    out = r.stdout
    assert r.returncode == HilExitCode.CANDIDATE_REGRESSION, f"exit {r.returncode}:\n{out[-5000:]}\n{r.stderr[-2000:]}"
    (pdr,) = results[0]["comparisons"]
    assert pdr["figure"].startswith("PDR (loss <= 0.5 %"), pdr
    assert pdr["verdict"] == "regression" and pdr["ci_high"] < 0.95 and 0.6 < pdr["ratio"] < 0.9, pdr
    trials = results[0]["trials"]
    assert len(trials) == 2 * PDR_PAIRS and all(t["value"] > 0 for t in trials), trials
    assert re.search(r"REGRESSION in 1 figure\(s\): xgs3300 PDR \(loss <= 0\.5 %", out), out
    print(f"\nslow candidate, PDR: x{pdr['ratio']:.3f} [{pdr['ci_low']:.3f}, {pdr['ci_high']:.3f}]; parent "
          f"{[t['value'] for t in trials if t['role'] == 'parent']} candidate "
          f"{[t['value'] for t in trials if t['role'] == 'candidate']} Mbit/s; comparison phase "
          f"{results[0]['wall_seconds']:.1f} s of a {wall:.1f} s run")
