"""The engine design's floor (ipsec_hil_twin.engine.floor) and what ipsec_hil_twin.bench concludes from it
(issue 15: the profile that shows whether per-packet Python can reach 14x strongSwan)."""
from __future__ import annotations

import subprocess
import sys

from tests.lab_factory import REPO, minilab_fixture
from ipsec_hil_twin import bench

from .conftest import needs_root

floor_lab = minilab_fixture(name="floor_lab", engines=False)


@needs_root
def test_floor_carries_a_stream_each_way_as_esp_and_profiles_it(floor_lab):
    """Real ESP: each side's receive socket takes only protocol 50 and drops what does not
    open, so a stream gets through only if seal and open agree; the profile counts the
    packets from the TUN's own statistics."""
    res = bench.floor(floor_lab, 1)
    assert res.fwd > 1 and res.rev > 1, (res.fwd, res.rev)
    for direction in ("A->B", "B->A"):
        note = next((n for n in res.notes if n.startswith(direction)), None)
        assert note is not None and "ESP packets" in note and "user" in note and "system" in note, res.notes
        assert int(note.split(":")[1].split()[0]) > 100, note


def test_floor_without_keys_says_what_stdin_needs():
    r = subprocess.run([sys.executable, "-m", "ipsec_hil_twin.engine.floor", "--src", "192.0.2.1", "--peer", "192.0.2.2",
                        "--lan", "203.0.113.0/24", "--ready", "/nonexistent/ready"],
                       input="{}", capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2
    assert "stdin" in r.stderr and "enc_key" in r.stderr


def _q(floor_x: float, twin_x: float) -> dict[str, float]:
    """Ratios as ipsec_hil_twin.bench.ratios gives them; B->A one better, so the verdict's minimum shows."""
    return {"floor/strongswan A->B": floor_x, "floor/strongswan B->A": floor_x + 1,
            "twin/ipsec_hil_twin/floor A->B": twin_x / floor_x, "twin/ipsec_hil_twin/floor B->A": (twin_x + 1) / (floor_x + 1)}


def test_floor_verdict_names_the_design_limit_below_the_target():
    v = bench.floor_verdict(_q(7.5, 5.5))
    assert "only 7.50x" in v and "no change to the engine's own code" in v


def test_floor_verdict_names_the_engines_gap_when_the_design_could():
    v = bench.floor_verdict(_q(20.0, 10.0))
    assert "within this design's reach" in v and "0.50x its floor" in v


def test_floor_verdict_says_whether_the_kernel_alone_leaves_room():
    ss = bench.PathResult("strongSwan", 50.0, 54.0)  # 14x the faster way: 756 Mbit/s
    tight = bench.PathResult("floor", 400.0, 400.0, kernel_ceiling=[700.0, 650.0, 720.0])
    roomy = bench.PathResult("floor", 400.0, 400.0, kernel_ceiling=[900.0, 800.0])
    assert "carry 700 Mbit/s, below the 756 Mbit/s" in bench.floor_verdict(_q(7.5, 5.5), tight, ss)
    assert "carry 850 Mbit/s, above the 756 Mbit/s" in bench.floor_verdict(_q(7.5, 5.5), roomy, ss)
    assert "kernel" not in bench.floor_verdict(_q(7.5, 5.5))
