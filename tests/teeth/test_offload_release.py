"""The software-fallback test on FreeBSD 15.1, where the kernel's offload framework judges
it (issue 43's done-when: "on 15.1 the ledger shows the hw offl door and the
software-fallback test breaks on its fault").

The fault matrix runs on topologies/virtual.yaml, whose appliances run the seeds' 14.1: there
test_each_sa_takes_the_offload_path judges each SA by the driver's counters against the
kernel's ESP counters. On 15.1 it judges by the framework's own account (setkey -D's
``hw offl if:`` and ``hw offl`` packets), a different code path with its own way to be
wrong. So the matrix's rows of that function -- every model's, with their cells and green
samples as matrix.yaml states them -- run here once more on a lab whose appliances all run
15.1 (topologies/virtual-releases-15.1.yaml): one healthy run each (which must pass), each
cell broken by its own assertion with the framework's evidence in the message (``hw offl
if: none``: a kernel misread as 14 would have judged by the driver counters and said so),
each green sample green. The ledger's hw offl door on 15.1 is
tests/suite_lib/test_twin_integration.py's.
"""

from __future__ import annotations

import pytest

from tests.lab_factory import QUIET_RATE_MBIT, REPO, lab_fixture

from . import matrix, runner

pytestmark = [pytest.mark.needs_root]

RELEASE_15_LAB = REPO / "topologies" / "virtual-releases-15.1.yaml"
FUNCTION = "test_offload_path.py::test_each_sa_takes_the_offload_path"
#: what the framework's judgement (ipsec_hil.lab.measuring.offload.judge_framework) writes
#: and the driver-counter judgement never does
FRAMEWORK_EVIDENCE = "hw offl if: none"

lab = lab_fixture(topology=RELEASE_15_LAB, rate_mbit=QUIET_RATE_MBIT)


def test_offload_path_on_15_1_is_judged_by_the_framework_and_breaks_on_its_fault(lab, tmp_path):
    rows = tuple(r for m in matrix.models() for r in matrix.rows(m) if r.function == FUNCTION)
    assert {r.model for r in rows} == set(matrix.models()), (
        f"matrix.yaml: {FUNCTION} needs a row with a cell on every model: has {sorted(r.model for r in rows)}")
    assert all(r.cells for r in rows), [r.name for r in rows if not r.cells]
    cells, healthy, leftovers = runner.run_matrix(lab.attach(), lab.resolved, rows, tmp_path, healthy_runs=1, tag="release15")
    log = (tmp_path / "release15.log").read_text()
    for run in healthy:
        for name, res in run.items():
            assert res.outcome == "passed", f"{name} on 15.1, healthy: {res.outcome}: {res.message[:2000]}\n{log}"
    for c in cells:
        assert c.broken, f"{c.row.name} on 15.1 with {c.cell.fault.label}: {c.reason}\n{c.result.message[:2000]}"
        assert FRAMEWORK_EVIDENCE in c.result.message, (
            f"{c.row.name} with {c.cell.fault.label} failed, but not on the framework's evidence "
            f"(no {FRAMEWORK_EVIDENCE!r}: judged by the driver counters, as on 14?):\n{c.result.message[:2000]}")
        for node, res in c.green:
            assert res.outcome == "passed", f"green sample {node} under {c.cell.fault.label} on 15.1: {res.outcome}"
    assert not leftovers, leftovers
    print(f"\n15.1: {len(rows)} rows, {len(cells)} cells broken, healthy runs "
          f"{sum(len(r) for r in healthy)} passed")
