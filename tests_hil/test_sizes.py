"""Sizes: the appliance's own largest packet, FreeBSD's forwarded-IPv6 gate, IPv4 with DF.

The 000 page: "a 1,398-byte ping passes (inner 1,446) ... 1,402 is refused and not
fragmented"; forwarded IPv6 "1,335 bytes of ping data passing and 1,336 not, which is 1,383
to the byte" (path MTU - the kernel's worst-case ESP header); "a 1,446-byte IPv4 packet with
DF passes the same tunnel" while net.inet.ipsec.dfbit is 0. Every expected number is a
formula of plugin.lab.esp_math over the topology's path MTU.
"""

from __future__ import annotations

import pytest

from plugin.lab import esp_math
from plugin.lab.expect import encrypted_refs, path_mtu
from plugin.lab.measure import expect_zero
from plugin.lab.traffic import bisect_largest

pytestmark = [pytest.mark.page("000")]


@pytest.mark.tunnels(children="one")
def test_own_largest_packet_passes_one_more_refused(tunnel, record, meter):
    """The appliance's own largest inner packet passes; one byte more gets EMSGSIZE, nothing leaves."""
    cfg = tunnel.config
    mtu = path_mtu(tunnel.lab.topology, tunnel.case.tunnel)
    largest = esp_math.max_inner(cfg.cipher, cfg.outer, mtu)
    data = esp_math.ping_data_for_inner(largest, cfg.inner)
    app, src, dst = tunnel.local, tunnel.inner_address("local"), tunnel.inner_address("remote")
    ok = app.ping(dst, size=data, count=3, dont_fragment=True, source=src)
    record.figure(f"largest own inner packet (path MTU {mtu})", largest, "bytes")
    assert ok.received and ok.received > 0, (
        f"{app.name}: a {data}-byte ping (inner {largest}, the exact ESP limit for {cfg.cipher} over "
        f"{cfg.outer} on a {mtu}-byte path) was not answered: {ok.received} of {ok.transmitted}, errors {ok.errors}")
    kernel = tunnel.plan.local.cipher == "kernel"
    with meter(app, title="one byte more than fits") as m:
        big = app.ping(dst, size=data + 1, count=3, dont_fragment=True, source=src)
    assert not big.received, f"{app.name}: a {data + 1}-byte ping (inner {largest + 1}) was answered; it must be refused"
    assert big.emsgsize_count > 0 or big.status in (2, 71), (
        f"{app.name}: a too-big own packet must be refused with EMSGSIZE (Message too long); "
        f"ping said status {big.status}, errors {big.errors}")
    expect_zero(m.ledger, encrypted_refs(app.name, app.profile.driver, kernel),
                "a refused packet never reaches the engine (nothing fragmented onto the wire)")


@pytest.mark.forwarded
@pytest.mark.tunnels(inner="ipv6", children="one")
def test_forwarded_ipv6_packet_too_big(tunnel, record, bench_route):
    """A forwarded IPv6 packet above path MTU - worst-case header gets a Packet Too Big carrying that MTU."""
    cfg = tunnel.config
    mtu = path_mtu(tunnel.lab.topology, tunnel.case.tunnel)
    block = tunnel.local.profile.kernel_esp_worst_case_block
    limit = esp_math.forwarded_ipv6_limit(mtu, cfg.outer, block)
    lan_mtu = tunnel.bench_lan_mtu("local")
    if lan_mtu <= limit:
        pytest.skip(f"the bench's LAN MTU ({lan_mtu}) is not above the gate ({limit} = path MTU {mtu} - "
                    f"{esp_math.kernel_worst_case_header(cfg.outer, block)}): no forwarded packet can reach it")
    bench = tunnel.lab.bench
    src, dst = tunnel.bench_inner_address("local"), tunnel.inner_address("remote")
    assert src, f"the bench has no IPv6 address on {tunnel.local.name}'s LAN"
    bench_route(f"{dst}/128", tunnel.inner_address("local"))
    answers: dict[int, dict] = {}

    def passes(size: int) -> bool:
        answers[size] = bench.probe("pmtu", dst=dst, size=size, src=src, timeout=1.0)
        return bool(answers[size]["reply"])

    lo = esp_math.ping_data_for_inner(esp_math.IPV6_MIN_MTU, "ipv6")
    hi = esp_math.ping_data_for_inner(min(esp_math.max_inner(cfg.cipher, cfg.outer, mtu), lan_mtu), "ipv6")
    found = bisect_largest(passes, lo, hi)
    expected_data = esp_math.ping_data_for_inner(limit, "ipv6")
    record.figure("largest forwarded ping data passing", found.largest, "bytes")
    record.figure("expected (path MTU - worst-case header, as ping data)", expected_data, "bytes")
    assert found.largest == expected_data, (
        f"bisection: largest forwarded IPv6 ping data passing is {found.largest}, expected {expected_data} "
        f"(inner {limit} = {mtu} - {esp_math.kernel_worst_case_header(cfg.outer, block)}); tried {found.tried}")
    over = answers.get(expected_data + 1) or bench.probe("pmtu", dst=dst, size=expected_data + 1, src=src, timeout=1.0)
    record.figure("Packet Too Big MTU", over.get("ptb_mtu"))
    assert not over["reply"], f"a {expected_data + 1}-byte forwarded ping was answered; it must be refused"
    assert over["ptb_count"] >= 1, "no ICMPv6 Packet Too Big came back for a too-big forwarded packet"
    assert over["ptb_mtu"] == limit, f"the Packet Too Big carries MTU {over['ptb_mtu']}, expected {limit}"


@pytest.mark.forwarded
@pytest.mark.tunnels(inner="ipv4", children="one")
def test_forwarded_ipv4_with_df_passes_while_dfbit_is_0(tunnel, record, bench_route):
    """A forwarded IPv4 packet of the exact ESP limit with DF passes while net.inet.ipsec.dfbit is 0."""
    cfg = tunnel.config
    dfbit = int(tunnel.local.sysctl_get("net.inet.ipsec.dfbit")["net.inet.ipsec.dfbit"])
    if esp_math.ipv4_gate_applies(dfbit, df_set=True):
        pytest.skip(f"net.inet.ipsec.dfbit is {dfbit}: the kernel checks forwarded IPv4 with DF")
    mtu = path_mtu(tunnel.lab.topology, tunnel.case.tunnel)
    # The largest packet the bench can send through: the exact ESP limit, or its LAN's MTU
    # when that is smaller (the XGS 136's Port8 path is 9,000 bytes, its F1 LAN 1,500).
    largest = min(esp_math.max_inner(cfg.cipher, cfg.outer, mtu), tunnel.bench_lan_mtu("local"))
    bench = tunnel.lab.bench
    src, dst = tunnel.bench_inner_address("local"), tunnel.inner_address("remote")
    bench_route(f"{dst}/32", tunnel.inner_address("local"))
    r = bench.ping(dst, size=esp_math.ping_data_for_inner(largest, "ipv4"), count=3, dont_fragment=True, source=src)
    record.figure("forwarded IPv4 with DF, inner bytes", largest, "bytes")
    assert r.received and r.received > 0, (
        f"a forwarded {largest}-byte IPv4 packet with DF was not answered ({r.received} of {r.transmitted}, "
        f"errors {r.errors}); with dfbit 0 the kernel does not check it")
