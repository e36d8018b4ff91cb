"""report: the page from entries (incl. skipped reasons), a PNG plot, Allure files."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from ipsec_hil.lab.errors import InvariantError, ProvisionError, TransportError
from ipsec_hil.lab.measuring.measure import Check, Ledger, Snapshot
from ipsec_hil.lab.reporting.report import (
    Figure,
    HardwareInfo,
    PageEntry,
    RunInfo,
    classify,
    iperf_series,
    plot_stream_rates,
    render_page,
    write_allure_files,
    write_page,
)


def run_info() -> RunInfo:
    return RunInfo(
        title="IPsec offload acceptance",
        topology="topologies/virtual.yaml",
        virtual=True,
        started=dt.datetime(2026, 11, 29, 21, 0, tzinfo=dt.timezone.utc),
        command="pytest -m xgs136",
        hardware=[
            HardwareInfo("xgs136", "xgs136", "npuep", "0d650d4e" + "0" * 24, 253_552, "14.1-RELEASE", module_loaded=True),
            HardwareInfo("peer3300", "xgs3300", "octep", None, None, None, module_loaded=None),
        ],
    )


def entries(tmp_path) -> list[PageEntry]:
    lg = Ledger.from_snapshots([Snapshot("xgs136", 0, {"rx_v6": 10})], [Snapshot("xgs136", 1, {"rx_v6": 418_052})], "v6")
    png = plot_stream_rates({"stream 1": [(0, 1, 9.5e8), (1, 2, 9.7e8)]}, tmp_path / "plots" / "a.png", "up")
    return [
        PageEntry("tests_hil/test_npu.py::test_v6[gcm]", "IPv6 outside and inside, GCM", "passed", page="001",
                  hardware=("xgs136",), figures=[Figure("decrypting", 979.2, "Mbit/s"), Figure("rx_v6", 418_042)],
                  checks=[Check("rx_bad, rx_nosa stay 0", True, "all 0")], ledgers=[lg.table()], plots=[str(png)],
                  duration=17.2),
        PageEntry("tests_hil/test_many.py::test_six", "Six children", "failed", page="002", hardware=("xgs136",),
                  reason="invariant broken: frames handed = frames decrypted\n  ...",
                  checks=[Check("frames handed = frames decrypted", False, "2,358,711 vs 2,358,288")]),
        PageEntry("tests_hil/test_lab.py::test_ptb", "Forwarded IPv6 PTB", "broken", page="000",
                  reason="ProvisionError: child hil-lab-v4v6-gcm-net: TIMEOUT"),
        PageEntry("tests_hil/test_lab.py::test_3300", "3300 own IPv6", "skipped", page="000", hardware=("xgs3300",),
                  reason="topology virtual has no xgs3300"),
    ]


def test_page_contains_what_ran_hardware_figures_and_gaps(tmp_path):
    path = write_page(run_info(), entries(tmp_path), tmp_path)
    text = path.read_text()
    assert text.startswith("# IPsec offload acceptance\n")
    assert "4 tests: 1 passed, 1 failed (driver defect), 1 broken (lab problem), 1 skipped." in text
    assert "| xgs136 | xgs136 | npuep | 0d650d4e" in text and "253,552 bytes" in text
    assert "| peer3300 | xgs3300 | octep | unknown | unknown |" in text
    # per configuration one row per test; its ledger and every figure are in its Allure result
    assert "| test_v6[gcm] | passed | decrypting 979.2 Mbit/s; rx_v6 418,042 | 1/1 held | - |" in text
    assert "+418,042" not in text  # a passed test's ledger block
    assert "Plots: [test_v6[gcm]](plots/a.png)" in text
    broken = text.split("## Invariants broken")[1].split("##")[0]
    assert "Six children: frames handed = frames decrypted (2,358,711 vs 2,358,288)" in broken
    gaps = text.split("## What is not established")[1]
    assert "- 3300 own IPv6: not run -- topology virtual has no xgs3300" in gaps
    assert "- Forwarded IPv6 PTB: not measured, the lab failed -- ProvisionError: child" in gaps
    assert "Six children" not in gaps  # a failure is a verdict, not a gap
    assert "`tests_hil/test_many.py::test_six` -- **driver defect:** invariant broken: frames handed = frames decrypted" in text


def test_every_skip_is_listed_even_without_reason(tmp_path):
    es = [PageEntry(f"t::{i}", f"t{i}", "skipped", reason=None if i else "no xgs136") for i in range(3)]
    text = render_page(run_info(), es)
    gaps = text.split("## What is not established")[1]
    assert gaps.count("- t") == 3 and "no reason recorded" in gaps


def test_bad_outcome_rejected():
    with pytest.raises(ValueError, match="outcome must be one of"):
        PageEntry("x", "x", "error")  # type: ignore[arg-type]


def test_plot_png_written(tmp_path):
    p = plot_stream_rates({"stream 1": [(0, 1, 1e8), (1, 2, 2e8)], "stream 2": [(0, 1, 3e8), (1, 2, 1e8)]},
                          tmp_path / "x.png", "two streams")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 2000
    with pytest.raises(ValueError, match="no interval data"):
        plot_stream_rates({}, tmp_path / "y.png", "none")


def test_iperf_series_from_the_real_parser(tmp_path):
    from ipsec_hil.lab.parsers import iperf3
    Interval = iperf3.Interval
    r = iperf3.IperfResult(num_streams=2, intervals=(
        Interval(0.0, 1.0, 3.0e8, (1.0e8, 2.0e8), True),
        Interval(1.0, 2.0, 4.0e8, (1.5e8, 2.5e8), False),
        Interval(2.0, 3.0, 5.0e8, (2.0e8, 3.0e8), False),
    ))
    assert iperf_series(r) == {"stream 1": [(1.0, 2.0, 1.5e8), (2.0, 3.0, 2.0e8)],
                               "stream 2": [(1.0, 2.0, 2.5e8), (2.0, 3.0, 3.0e8)]}
    from ipsec_hil.lab.reporting.report import plot_iperf
    assert plot_iperf(r, tmp_path / "i.png", "t").stat().st_size > 1000


def test_classify():
    assert classify(InvariantError("x")) == "failed"
    assert classify(AssertionError("x")) == "failed"
    assert classify(ProvisionError("x")) == "broken"
    assert classify(TransportError("x")) == "broken"
    assert classify(TimeoutError()) == "broken"


def test_allure_files(tmp_path):
    files = write_allure_files(tmp_path / "allure", run_info(), build_order=42)
    names = sorted(p.name for p in files)
    assert names == ["categories.json", "environment.properties", "executor.json"]
    env = (tmp_path / "allure" / "environment.properties").read_text()
    assert "xgs136.driver=npuep\n" in env and "xgs136.module.size=253552\n" in env
    assert "lab.topology=topologies/virtual.yaml" in env
    cats = json.loads((tmp_path / "allure" / "categories.json").read_text())
    assert [c["name"] for c in cats][:2] == ["driver defect", "lab problem"]
    assert cats[0]["matchedStatuses"] == ["failed"] and "InvariantError" in cats[0]["traceRegex"]
    assert "ProvisionError" in cats[1]["traceRegex"] and "HostKeyError" in cats[1]["traceRegex"]
    ex = json.loads((tmp_path / "allure" / "executor.json").read_text())
    assert ex["buildOrder"] == 42
