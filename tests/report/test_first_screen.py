"""The page's first screen (issue 14): verdict, per-model table, failures, known issues,
gaps -- within the first 60 lines, however long the detail below."""

from __future__ import annotations

import datetime as dt

from ipsec_hil.lab.measuring.measure import Check
from ipsec_hil.lab.reporting.report import Figure, HardwareInfo, PageEntry, RunInfo, render_page


def _run(verdict: list[str]) -> RunInfo:
    return RunInfo(title="IPsec offload acceptance", topology="topologies/virtual.yaml", virtual=True,
                   started=dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.timezone.utc), verdict=verdict,
                   hardware=[HardwareInfo("dut3300", "xgs3300", "octep", "ab" * 16, 2048, "14.1", module_loaded=True)])


def _entries() -> list[PageEntry]:
    many = [PageEntry(f"tests_hil/test_matrix.py::test_ping[lab-v4in4-gcm-{i}]", f"ping {i}", "passed",
                      hardware=("xgs3300",), tunnel_case="lab-v4in4-gcm",
                      figures=[Figure(f"figure {j}", j) for j in range(20)]) for i in range(40)]
    return many + [
        PageEntry("tests_hil/test_rates.py::test_forwarded_rate[lab-v4in6-gcm-1x10s-up]", "rate up", "passed",
                  hardware=("xgs3300",), tunnel_case="lab-v4in6-gcm",
                  figures=[Figure("one stream up, 1 stream(s), 10 s", 93.4, "Mbit/s"), Figure("floor", 50.0, "Mbit/s")]),
        PageEntry("tests_hil/test_ndr_pdr.py::test_ndr_pdr[lab-v4in6-gcm]", "NDR/PDR", "passed", hardware=("xgs3300",),
                  tunnel_case="lab-v4in6-gcm", figures=[Figure("NDR lower bound", 80.2, "Mbit/s"),
                                                        Figure("PDR lower bound", 88.9, "Mbit/s")]),
        PageEntry("tests_hil/test_sizes.py::test_own[lab-v4in6-gcm]", "sizes", "passed", hardware=("xgs3300",),
                  tunnel_case="lab-v4in6-gcm",
                  figures=[Figure("largest own inner packet (path MTU 1500)", 1418, "bytes")]),
        PageEntry("tests_hil/test_conservation.py::test_c[lab-v4in6-gcm]", "conservation", "failed",
                  hardware=("xgs3300",), tunnel_case="lab-v4in6-gcm", reason="InvariantError: frames lost",
                  checks=[Check("frames handed = frames decrypted", False, "2,358,711 vs 2,358,288")]),
        PageEntry("tests_hil/test_rates.py::test_first_stream_after_boot[npu-v4in4-gcm]", "first stream", "passed",
                  hardware=("xgs136",), tunnel_case="npu-v4in4-gcm",
                  known_issue="issue 531 (first stream slow): reproduced -- 19 Mbit/s"),
        PageEntry("tests_hil/test_lab.py::test_3300", "3300 own IPv6", "skipped", hardware=("xgs3300",),
                  reason="topology virtual has no xgs3300"),
    ]


def test_the_first_60_lines_answer_the_question():
    text = render_page(_run(["candidate against parent: REGRESSION in 1 figure(s): xgs3300 up x0.80 [0.78, 0.83]",
                             "1 TCP stream up: regression"]), _entries())
    head = "\n".join(text.splitlines()[:60])
    assert head.splitlines()[2] == ("**Verdict: candidate against parent: REGRESSION in 1 figure(s): xgs3300 up "
                                    "x0.80 [0.78, 0.83]**")
    assert "dut3300 (xgs3300, octep md5 abababab)" in head
    assert "| lab | IPv6 | IPv4 | AES-GCM-16 | 93.4 | 80.2 | 88.9 | 1500: own inner 1,418 bytes | **no** |" in head
    assert "| lab | IPv4 | IPv4 | AES-GCM-16 | - | - | - | - | - |" in head
    assert "**xgs136**" in head and "**xgs3300**" in head
    assert "- conservation: frames handed = frames decrypted (2,358,711 vs 2,358,288)" in head
    assert "- issue 531 (first stream slow): reproduced -- 19 Mbit/s -- first stream" in head
    assert "- 3300 own IPv6: not run -- topology virtual has no xgs3300" in head
    # below the first screen, per configuration: one row per test (the detail is in Allure)
    assert "| test_forwarded_rate[lab-v4in6-gcm-1x10s-up] | passed | one stream up, 1 stream(s), 10 s 93.4 Mbit/s; " \
           "floor 50.0 Mbit/s | - | - |" in text
    assert "| test_ping[lab-v4in4-gcm-3] | passed | figure 0 0; figure 1 1; figure 2 2; figure 3 3; figure 4 4; figure 5 5; +14 more |" in text


def test_without_a_plugin_verdict_the_tests_verdict_leads():
    text = render_page(_run([]), _entries())
    assert text.splitlines()[2] == "**Verdict: 1 test(s) failed, 0 could not be measured.**"
