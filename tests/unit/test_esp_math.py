"""ESP arithmetic against the reference table and the pages.

Numbers are the ones in ../shared/reference/ipsec-arithmetic-and-test-catalogue.md and in
the seeds (000: 1,398-byte ping = inner 1,446; bisect 1,335 passes / 1,336 refused).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ipsec_hil.lab.expectations import esp_math as m

GCM, CBC = "aes-gcm-16", "aes-cbc-hmac-sha256"


@pytest.mark.parametrize(
    "cipher,outer,expected",
    [(GCM, "ipv4", 1446), (GCM, "ipv6", 1426), (CBC, "ipv4", 1438), (CBC, "ipv6", 1406)],
)
def test_max_inner_on_1500_path(cipher, outer, expected):
    assert m.max_inner(cipher, outer, 1500) == expected
    # Fits (exactly, but for CBC over IPv6: 1,488, the next pad block would be 1,504).
    assert m.outer_packet_len(cipher, outer, expected) <= 1500 < m.outer_packet_len(
        cipher, outer, expected + 1
    )


@pytest.mark.parametrize("cipher,expected", [(GCM, 184), (CBC, 200)])
def test_esp_payload_for_148_byte_inner(cipher, expected):
    # strongSwan's alg-aes-gcm and alg-sha256 scenarios assert these ESP lengths.
    assert m.esp_payload_len(cipher, 148) == expected


@pytest.mark.parametrize(
    "cipher,outer,lo,hi",
    [(GCM, "ipv4", 54, 57), (GCM, "ipv6", 74, 77), (CBC, "ipv4", 62, 77), (CBC, "ipv6", 82, 97)],
)
def test_overhead_range_over_all_paddings(cipher, outer, lo, hi):
    seen = {m.esp_overhead(cipher, outer, n) for n in range(0, 200)}
    assert min(seen) == lo and max(seen) == hi


def test_kernel_worst_case_header():
    assert m.kernel_worst_case_header("ipv4") == 117
    assert m.kernel_worst_case_header("ipv6") == 137
    # Older trees: EALG_MAX_BLOCK_LEN 16.
    assert m.kernel_worst_case_header("ipv4", block=16) == 69


def test_forwarded_ipv6_limit_and_ping_bisect():
    assert m.forwarded_ipv6_limit(1500, "ipv4") == 1383
    assert m.forwarded_ipv6_limit(1500, "ipv6") == 1363
    limit = m.forwarded_ipv6_limit(1500, "ipv4")
    passes = m.ping_data_for_inner(limit, "ipv6")
    assert passes == 1335  # seed 000: 1,335 bytes of ping data pass
    assert m.inner_for_ping_data(passes + 1, "ipv6") > limit  # 1,336 refused
    # The gate is conservative by 63 bytes for GCM over IPv4.
    assert m.max_inner(GCM, "ipv4", 1500) - limit == 63


def test_ping_sizes_of_page_000():
    assert m.inner_for_ping_data(1398, "ipv6") == 1446
    assert m.inner_for_ping_data(1398, "ipv6") == m.max_inner(GCM, "ipv4", 1500)
    assert m.ping_data_for_inner(1446, "ipv4") == 1418
    assert m.inner_for_ping_data(1402, "ipv6") > m.max_inner(GCM, "ipv4", 1500)


def test_ipv4_gate_follows_dfbit():
    assert m.forwarded_limit("ipv4", 1500, "ipv4") is None  # dfbit 0: no gate
    assert m.forwarded_limit("ipv4", 1500, "ipv4", dfbit=1) == 1383
    assert m.forwarded_limit("ipv4", 1500, "ipv4", dfbit=2, df_set=False) is None
    assert m.forwarded_limit("ipv4", 1500, "ipv4", dfbit=2, df_set=True) == 1383
    assert m.forwarded_limit("ipv6", 1500, "ipv6") == 1363


@pytest.mark.parametrize(
    "call",
    [
        lambda: m.max_inner("aes-ccm", "ipv4", 1500),
        lambda: m.max_inner(GCM, "ipx", 1500),
        lambda: m.esp_payload_len(GCM, -1),
        lambda: m.ping_data_for_inner(20, "ipv6"),
        lambda: m.max_inner(GCM, "ipv4", 40),
        lambda: m.ipv4_gate_applies(3, True),
    ],
)
def test_bad_input_is_a_clear_error(call):
    with pytest.raises(ValueError):
        call()


@given(
    cipher=st.sampled_from(m.CIPHERS),
    outer=st.sampled_from(m.FAMILIES),
    mtu=st.integers(min_value=576, max_value=9216),
)
def test_max_inner_is_the_largest_that_fits(cipher, outer, mtu):
    n = m.max_inner(cipher, outer, mtu)
    assert m.outer_packet_len(cipher, outer, n) <= mtu
    assert m.outer_packet_len(cipher, outer, n + 1) > mtu


REFERENCE = (
    Path(__file__).resolve().parents[3] / "shared/reference/ipsec-arithmetic-and-test-catalogue.md"
)


@pytest.mark.skipif(not REFERENCE.exists(), reason=f"reference not found at {REFERENCE}")
def test_matches_the_reference_table_as_written():
    """Read the 'largest inner packet' table from the reference itself, when it is beside us."""
    text = REFERENCE.read_text()
    rows = {
        "AES-GCM-16": GCM,
        "AES-CBC-256 + HMAC-SHA-256": CBC,
    }
    found = 0
    for label, cipher in rows.items():
        match = re.search(rf"^\| {re.escape(label)} \| ([\d,]+) \| ([\d,]+) \|$", text, re.M)
        assert match, f"row {label!r} not in {REFERENCE}"
        v4, v6 = (int(x.replace(",", "")) for x in match.groups())
        assert m.max_inner(cipher, "ipv4", 1500) == v4
        assert m.max_inner(cipher, "ipv6", 1500) == v6
        found += 1
    assert found == 2
