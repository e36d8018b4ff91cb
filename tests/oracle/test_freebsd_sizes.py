"""The twin's own size model (ipsec_hil_twin.engine.sizes) against FreeBSD's sources and its own ESP.

Why these and not the suite's numbers: the lab is the oracle for ipsec_hil.lab.expectations.esp_math, so
its expectations here come from FreeBSD's code (quoted in sizes.py), the measurement
pages' figures and the twin's real ESP seal, never from the suite's formulas.
"""
from __future__ import annotations

import pytest

from ipsec_hil_twin.engine import sizes
from ipsec_hil_twin.engine.counters import INDEX
from ipsec_hil_twin.engine.esp import make_suite
from ipsec_hil_twin.personality import PERSONALITIES

KEYS = {"aes-gcm-16": (bytes(range(36)), None), "aes-cbc-hmac-sha256": (bytes(range(32)), bytes(range(32, 64)))}


def test_freebsd_worst_case_header():
    # xform_esp.c esp_hdrsiz(NULL) = 8 + 64 + 9 + 16; ipsec.c adds the outer header
    assert sizes.esp_hdrsiz_no_sa() == 97
    assert (sizes.ipsec_hdrsiz("ipv4"), sizes.ipsec_hdrsiz("ipv6")) == (117, 137)


def test_the_pages_figures():
    # seed 000: own 1,446 (1,398 ping data + 48), forwarded IPv6 1,383 (1,335 + 48)
    assert sizes.max_inner("aes-gcm-16", "ipv4", 1500) == 1446
    assert sizes.forwarded_limit(1500, "ipv4") == 1383
    assert sizes.forwarded_gate(1383, 6, 1500, "ipv4", 0, False) == sizes.PASS
    assert sizes.forwarded_gate(1384, 6, 1500, "ipv4", 0, False) == sizes.GateVerdict("icmp", 1383)


def test_ipv6_gate_below_the_ipv6_minimum_mtu_is_sent_as_computed():
    """IPv6 outer on a 1,400-byte path: 1,400 - 137 = 1,263.  icmp6_error puts the value in
    the PTB without clamping it to 1,280 (icmp6.c), so FreeBSD announces 1,263."""
    assert sizes.forwarded_limit(1400, "ipv6") == 1263 < sizes.IPV6_MMTU
    assert sizes.forwarded_gate(1280, 6, 1400, "ipv6", 0, False) == sizes.GateVerdict("icmp", 1263)
    assert sizes.forwarded_gate(1263, 6, 1400, "ipv6", 0, False) == sizes.PASS


def test_a_path_no_larger_than_the_header_drops_silently():
    # ipsec_output.c: `if (pmtu > hlen) icmp6_error(...) else m_freem(m)`
    assert sizes.forwarded_gate(100, 6, 137, "ipv6", 0, False) == sizes.GateVerdict("drop")
    assert sizes.forwarded_gate(100, 4, 117, "ipv4", 1, False) == sizes.GateVerdict("drop")


@pytest.mark.parametrize("dfbit,df,action", [
    (0, True, "pass"), (0, False, "pass"),      # never checked while dfbit is 0 (the default)
    (1, True, "icmp"), (1, False, "icmp"),      # always checked
    (2, True, "icmp"), (2, False, "pass"),      # only when the inner header has DF
])
def test_ipv4_gate_follows_net_inet_ipsec_dfbit(dfbit, df, action):
    assert sizes.forwarded_gate(1400, 4, 1500, "ipv4", dfbit, df).action == action


@pytest.mark.parametrize("dfbit,inner_df,outer_df", [(0, True, False), (1, False, True), (2, True, True), (2, False, False)])
def test_outer_df_from_dfbit(dfbit, inner_df, outer_df):
    assert sizes.outer_df(dfbit, inner_df) is outer_df


@pytest.mark.parametrize("cipher", sizes.CIPHERS)
@pytest.mark.parametrize("outer", ["ipv4", "ipv6"])
def test_own_limit_is_what_the_engine_really_seals_for_every_mtu(cipher, outer):
    """For every path MTU from 1,280 to 9,000: the largest inner packet the own route allows
    seals into exactly a fitting ESP packet, one byte more does not fit; the forwarded
    gate is below it and names its own MTU."""
    enc, auth = KEYS[cipher]
    seal = make_suite(cipher, 0x1000, enc, auth).seal
    hdr = sizes.IP_HEADER[outer]

    def wire(n: int) -> int:
        inner = bytes((0x45, 0, n >> 8, n & 255)) + bytes(n - 4)  # a length-consistent IPv4 inner
        return hdr + len(seal(inner, 4, 1))

    for mtu in range(1280, 9001):
        own = sizes.max_inner(cipher, outer, mtu)
        assert wire(own) <= mtu < wire(own + 1), f"{cipher} over {outer}, path MTU {mtu}: own limit {own}"
        assert wire(own) - own == sizes.esp_overhead(cipher, outer, own)
        fwd = sizes.forwarded_limit(mtu, outer)
        assert fwd < own
        assert sizes.forwarded_gate(fwd + 1, 6, mtu, outer, 0, False) == sizes.GateVerdict("icmp", fwd)


@pytest.mark.parametrize("model", sorted(PERSONALITIES))
def test_counting_rules_name_counters_that_exist(model):
    """Every counter a driver's rules bump is one of its own or a kernel/engine slot."""
    p = PERSONALITIES[model]
    for field, value in p.counting._asdict().items():
        for name in ((value,) if isinstance(value, str) else (value or ())):
            assert name in INDEX, f"{model}: counting.{field} names {name!r}, not a counter slot"
            assert ":" in name or name in p.counter_names, (
                f"{model}: counting.{field} bumps {name!r}, a counter {p.driver} does not export")
