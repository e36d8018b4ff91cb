"""The four sections the library used to render itself (issue 53), each over sample
objects that reach every branch of its renderer: tests/report/test_sections.py renders them
with ipsec_hil.lab.reporting.sections and compares with the text the old renderers wrote
(tests/report/golden_sections/<name>.md, written by them before the move)."""

from __future__ import annotations

from typing import Any

from ipsec_hil.lab.dead_runs import Found, Undone
from ipsec_hil.lab.measuring.baseline import Comparison, Row
from ipsec_hil.lab.sharing.holds import Holds, Loss
from ipsec_hil.lab.timeshare import BRING_UP, PROBES, SETTLE, SSH, STREAM, TRAFFIC, Breakdown

MD5 = "4e69f85b0c1d2e3f405162738495a6b7"


def time_shares() -> dict[str, tuple[Breakdown, float, float]]:
    """name -> (breakdown, run_wall, traffic_asked)."""
    one = Breakdown(200, {TRAFFIC: 100, SSH: 30, BRING_UP: 20, SETTLE: 10, STREAM: 5, PROBES: 5, "gate": 2.5},
                    {SSH: 70}, {SSH: 321})
    two = Breakdown.total([Breakdown(100, {TRAFFIC: 60, SSH: 10}, {SSH: 30}, {SSH: 40}),
                           Breakdown(80, {TRAFFIC: 50, BRING_UP: 20}, {SSH: 12}, {SSH: 9})])
    return {"timeshare-one": (one, 200.0, 100.0), "timeshare-workers": (two, 120.0, 110.0),
            "timeshare-no-traffic": (Breakdown(5), 5.0, 0.0)}


def comparisons() -> dict[str, Comparison]:
    rows = [Row("test_rates.py::test_a[x|y] :: rate", "test_rates.py::test_a", "rate", "regression", 90.0, 96.0, 3.0, 3),
            Row("t.py::b :: rate", "t.py::b", "rate", "ok", 95.5, 96.0, 3.0, 3),
            Row("t.py::c :: rate", "t.py::c", "rate", "improved", 1200.0, 1000.0, 20.0, 2),
            Row("t.py::d :: rate", "t.py::d", "rate", "new", 50.0, None, None, 0),
            Row("t.py::e :: rate", "t.py::e", "rate", "not measured", None, 70.0, 1.4, 1),
            Row("t.py::f :: rate", "t.py::f", "rate", "ok", 10.0, 0.0, 0.0, 1)]
    full = Comparison("baselines/xgs136.json", rows, {"dut136": "1a2b", "peer136": "9f9f"},
                      {"dut136": "3c4d", "peer136": "9f9f", "new136": None}, 3,
                      ["the kernel differs: 14.1 -> 14.2", "one repeat only"])
    return {"baseline-full": full, "baseline-empty": Comparison("b.json", [], {}, {}, 1)}


def holds() -> dict[str, Holds]:
    h = Holds()
    h.losses += [Loss("the lease of dut3300", ("dut3300", "peer3300"), "renewal refused: held by bob", 1_800_000_000.0),
                 Loss("the labgrid place", ("bench",), "place released", 1_800_000_061.5)]
    h.left += ["tunnel npu-v4in4-gcm on dut3300", "bench route 198.51.100.65/32"]
    return {"holds-lost": h, "holds-none": Holds()}


def found() -> dict[str, Found]:
    full = Found()
    words = ("alice@ws3: pytest --driver (run drv-1)", "its journal: run drv-1")
    full.add(Undone("dut3300", "driver", ("/boot/modules/octep.ko (2095 bytes ...)", "reloaded"), "pid 4711 on ws3",
                    1_799_999_990.0, words, "backup of /boot/modules/octep.ko", f"octep md5 {MD5}, loaded", MD5))
    full.add(Undone("bench", "bench", ("undone: bench: route 198.51.100.65/32 via 198.51.100.1 (proto 147)",)))
    full.fail("peer3300, driver journal: restore failed; left: /boot/modules/octep.ko")
    full.note("xgs136: in use by a live run (bob on ws7)")
    notes = Found()
    notes.note("xgs136: not reachable (preflight says why)")
    left = Found()
    left.fail("peer3300, tunnel journal: host gone")
    return {"dead-runs-full": full, "dead-runs-notes": notes, "dead-runs-left": left, "dead-runs-none": Found()}


def samples() -> dict[str, Any]:
    return {**time_shares(), **comparisons(), **holds(), **found()}
