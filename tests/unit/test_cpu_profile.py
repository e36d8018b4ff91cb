"""tools/cpu-profile: the kernel's process accounting around a command, summed by process name
(issue 15: the own tests' budget is CPU, and most of their processes live milliseconds)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tool_module import load_tool

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOL = REPO_ROOT / "tools" / "cpu-profile"


cp = load_tool("cpu-profile", "cpu_profile")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acct(2) needs root (CAP_SYS_PACCT)")

# One process: 0.3 s of CPU under a name of its own, then exit.
BURN = ("import time; from ipsec_hil_twin.machinery.labprocs import name_process; name_process('hil-cpu-burn'); "
        "t = time.process_time()\nwhile time.process_time() - t < 0.3: pass")
BURN_FLOOR_S = 0.1  # of the 0.3 s burned: the real run's test says why not more


def _record(comm: bytes, utime: int, stime: int, etime_ticks: float, version: int = 3) -> bytes:
    return cp.RECORD.pack(0, version, 0, 0, 0, 0, 4242, 1, 0, etime_ticks, utime, stime, 0, 0, 0, 0, 0, 0, comm)


def test_comp_t_is_a_base_8_exponent_over_a_13_bit_mantissa():
    assert cp.comp_t(0) == 0
    assert cp.comp_t(8191) == 8191
    assert cp.comp_t((1 << 13) | 1) == 8
    assert cp.comp_t((2 << 13) | 100) == 6400


def test_records_read_and_summed_by_name():
    data = (_record(b"twin-engine", 150, 50, 900.0) + _record(b"tcsh", 0, 0, 0.4) + _record(b"tcsh", 1, 0, 1.0)
            + _record(b"sh", 0, 0, 0.2))
    recs = cp.read_records(data)
    assert [(r.name, r.cpu_s) for r in recs] == [("twin-engine", 2.0), ("tcsh", 0.0), ("tcsh", 0.01), ("sh", 0.0)]
    assert [r.elapsed_s for r in recs] == pytest.approx([9.0, 0.004, 0.01, 0.002])  # a float32 on disk
    totals = cp.by_name(recs)
    assert [(t.name, t.processes, round(t.cpu_s, 2), t.zero) for t in totals] == [
        ("twin-engine", 1, 2.0, 0), ("tcsh", 2, 0.01, 1), ("sh", 1, 0.0, 1)]
    text = cp.render(recs, wall_s=10.0, busy_s=4.0, cores=2, top=2)
    assert "4.0 CPU-s busy (20 %); 4 processes exited, 2.0 CPU-s in their records" in text
    assert "(1 other names)" in text and "not in a record" in text


def test_a_file_that_is_not_acct_v3_is_named_with_the_record():
    with pytest.raises(ValueError, match=r"x\.pacct: 65 bytes is not a whole number of 64-byte records"):
        cp.read_records(b"\0" * 65, "x.pacct")
    with pytest.raises(ValueError, match=r"x\.pacct: record 1 at byte 64: version 2, expected 3"):
        cp.read_records(_record(b"a", 0, 0, 0) + _record(b"b", 0, 0, 0, version=2), "x.pacct")


def test_no_command_is_a_usage_error():
    r = subprocess.run([sys.executable, str(TOOL), "--"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "no command" in r.stderr


@needs_root
def test_a_named_process_and_its_cpu_appear_and_the_exit_status_passes_through(tmp_path):
    keep = tmp_path / "pacct"
    r = subprocess.run([sys.executable, str(TOOL), "--top", "50", "--keep", str(keep), "--",
                        sys.executable, "-c", BURN + "\nraise SystemExit(7)"],
                       capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert r.returncode == 7, r.stderr
    (burn,) = [x for x in cp.read_records(keep.read_bytes()) if x.name == "hil-cpu-burn"]
    # The record's CPU is the kernel's tick-sampled utime + stime (TICK_CPU_ACCOUNTING, 4 ms
    # ticks), not the scheduler's exact runtime that process_time() reads: 0.30 s of burn
    # was recorded as 0.17 in a CI run at load 5 (ci45, 12-04). A floor of a third still
    # fails a record read as 0 or decoded in the wrong unit.
    assert BURN_FLOOR_S <= burn.cpu_s <= 1.0 and burn.elapsed_s >= burn.cpu_s - 0.02, burn
    line = next(ln for ln in r.stdout.splitlines() if ln.endswith("  hil-cpu-burn"))
    assert float(line.split()[0]) == pytest.approx(burn.cpu_s, abs=0.05), r.stdout
    assert r.stdout.startswith("cpu-profile: "), r.stdout
