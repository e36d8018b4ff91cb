"""Sizes: the appliance's own largest packet, FreeBSD's forwarded-IPv6 gate, IPv4 with DF.

The 000 page: "a 1,398-byte ping passes (inner 1,446) ... 1,402 is refused and not
fragmented"; forwarded IPv6 "1,335 bytes of ping data passing and 1,336 not, which is 1,383
to the byte" (path MTU - the kernel's worst-case ESP header); "a 1,446-byte IPv4 packet with
DF passes the same tunnel" while net.inet.ipsec.dfbit is 0. Every expected number is a
formula of ipsec_hil.lab.expectations.esp_math over the topology's path MTU.

The forwarded tests send from the bench, so its LAN must carry a packet above the gate: a
topology whose bench cannot reach it is an error naming the port to raise (the virtual
lab gives the XGS 136's F1 a jumbo bench adapter; topologies/README.md), never a skip.
A gate below the IPv6 minimum MTU (IPv6 outer on a 1,400-byte path: 1,263) is tested for
what FreeBSD does there: the Packet Too Big carries 1,263 as computed.
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.errors import TopologyError
from ipsec_hil.lab.measuring.measure import expect_at_least, expect_zero
from ipsec_hil.lab.traffic.bench import bisect_largest

pytestmark = [pytest.mark.page("000")]


@pytest.mark.tunnels(children="one")
def test_own_largest_packet_passes_one_more_refused(tunnel, record, meter):
    """The appliance's own largest inner packet passes; one byte more gets EMSGSIZE, nothing leaves."""
    cfg = tunnel.config
    mtu = tunnel.path_mtu
    largest = esp_math.max_inner(cfg.cipher, cfg.outer, mtu)
    data = esp_math.ping_data_for_inner(largest, cfg.inner)
    app, src, dst = tunnel.local, tunnel.inner_address("local"), tunnel.inner_address("remote")
    ok = app.ping(dst, size=data, count=3, dont_fragment=True, source=src)
    record.figure(f"largest own inner packet (path MTU {mtu})", largest, "bytes")
    assert ok.received and ok.received > 0, (
        f"{app.name}: a {data}-byte ping (inner {largest}, the exact ESP limit for {cfg.cipher} over "
        f"{cfg.outer} on a {mtu}-byte path) was not answered: {ok.received} of {ok.transmitted}, errors {ok.errors}")
    with meter(app, title="one byte more than fits") as m:
        big = app.ping(dst, size=data + 1, count=3, dont_fragment=True, source=src)
    assert not big.received, f"{app.name}: a {data + 1}-byte ping (inner {largest + 1}) was answered; it must be refused"
    assert big.emsgsize_count > 0 or big.status in (2, 71), (
        f"{app.name}: a too-big own packet must be refused with EMSGSIZE (Message too long); "
        f"ping said status {big.status}, errors {big.errors}")
    expect_zero(m.ledger, tunnel.encrypted_refs("local"),
                "a refused packet never reaches the engine (nothing fragmented onto the wire)")


@pytest.mark.forwarded
@pytest.mark.tunnels(inner="ipv6", children="one")
def test_forwarded_ipv6_packet_too_big(tunnel, record, meter, bench_route):
    """A forwarded IPv6 packet above path MTU - worst-case header gets a Packet Too Big carrying that MTU."""
    cfg = tunnel.config
    mtu = tunnel.path_mtu
    block = tunnel.local.profile.kernel_esp_worst_case_block
    header = esp_math.kernel_worst_case_header(cfg.outer, block)
    limit = esp_math.forwarded_ipv6_limit(mtu, cfg.outer, block)
    _bench_reaches(tunnel, limit + 1, f"the forwarded IPv6 gate ({limit} = path MTU {mtu} - {header}) plus one")
    bench = tunnel.bench
    src, dst = tunnel.bench_inner_address("local"), tunnel.inner_address("remote")
    assert src, f"the bench has no IPv6 address on {tunnel.local.name}'s LAN"
    bench_route(tunnel.inner_prefix("remote"), tunnel.inner_address("local"))
    expected_data = esp_math.ping_data_for_inner(limit, "ipv6")
    record.figure(f"forwarded IPv6 gate (path MTU {mtu} - {header})", limit, "bytes")
    if limit < esp_math.IPV6_MIN_MTU:
        record.figure("the gate is below the IPv6 minimum MTU; FreeBSD sends the PTB as computed", limit, "bytes")

    def probe(size: int) -> dict:
        # three echoes, not one: a single echo lost on a loaded bench (no reply and no PTB)
        # read as "refused" and failed a healthy lab once in CI; a refusal is a PTB, a pass is
        # any reply, so three tries change neither verdict
        return bench.probe("pmtu", dst=dst, size=size, src=src, timeout=2.0, count=3)

    with meter(tunnel.local, tunnel.remote, title="the largest forwarded IPv6 packet") as m:
        at = probe(expected_data)
    over = probe(expected_data + 1)
    if not at["reply"] or over["reply"]:
        # the line is elsewhere: find it from 0 (a gate may be far below 1,280) for the message
        found = bisect_largest(lambda size: bool(probe(size)["reply"]), 0,
                               esp_math.ping_data_for_inner(tunnel.bench_lan_mtu("local"), "ipv6"))
        raise AssertionError(
            f"forwarded IPv6: {expected_data} bytes of ping data (inner {limit} = {mtu} - {header}) "
            f"{_echo_outcome(at)}, {expected_data + 1} {_echo_outcome(over)}; "
            f"expected the first to pass and the second to get "
            f"a Packet Too Big. Bisection: largest passing {found.largest}, tried {found.tried}")
    record.figure("largest forwarded ping data passing", expected_data, "bytes")
    expect_at_least(m.ledger.value(tunnel.encrypted_refs("local")), 1,
                    "the largest forwarded packet went through the 136's engine door", ledger=m.ledger)
    tunnel.expect_offload_carried(m.ledger, "the largest forwarded IPv6 packet")
    record.figure("Packet Too Big MTU", over.get("ptb_mtu"))
    assert over["ptb_count"] >= 1, "no ICMPv6 Packet Too Big came back for a too-big forwarded packet"
    assert over["ptb_mtu"] == limit, f"the Packet Too Big carries MTU {over['ptb_mtu']}, expected {limit}"


@pytest.mark.forwarded
@pytest.mark.tunnels(inner="ipv4", children="one")
def test_forwarded_ipv4_with_df_passes_while_dfbit_is_0(tunnel, record, meter, bench_route):
    """A forwarded IPv4 packet of the exact ESP limit with DF passes while net.inet.ipsec.dfbit is 0."""
    cfg = tunnel.config
    mtu = tunnel.path_mtu
    dfbit = int(tunnel.local.sysctl_get("net.inet.ipsec.dfbit")["net.inet.ipsec.dfbit"])
    # dfbit 0: only the exact ESP arithmetic limits it; otherwise the kernel's gate does.
    gate = esp_math.forwarded_limit("ipv4", mtu, cfg.outer, dfbit=dfbit, df_set=True,
                                    block=tunnel.local.profile.kernel_esp_worst_case_block)
    largest = esp_math.max_inner(cfg.cipher, cfg.outer, mtu) if gate is None else gate
    _bench_reaches(tunnel, largest, f"the exact ESP limit for forwarded IPv4 with DF (dfbit {dfbit})")
    bench = tunnel.bench
    src, dst = tunnel.bench_inner_address("local"), tunnel.inner_address("remote")
    bench_route(tunnel.inner_prefix("remote"), tunnel.inner_address("local"))
    with meter(tunnel.local, tunnel.remote, title="the largest forwarded IPv4 packet with DF") as m:
        r = bench.ping(dst, size=esp_math.ping_data_for_inner(largest, "ipv4"), count=3, dont_fragment=True, source=src)
    record.figure(f"forwarded IPv4 with DF, inner bytes (path MTU {mtu}, dfbit {dfbit})", largest, "bytes")
    assert r.received and r.received > 0, (
        f"a forwarded {largest}-byte IPv4 packet with DF was not answered ({r.received} of {r.transmitted}, "
        f"errors {r.errors}); with dfbit {dfbit} the kernel lets up to {largest} through")
    expect_at_least(m.ledger.value(tunnel.encrypted_refs("local")), r.received,
                    "every answered echo went through the appliance's engine", ledger=m.ledger)
    tunnel.expect_offload_carried(m.ledger, "the largest forwarded IPv4 packet")


def _echo_outcome(result: dict) -> str:
    """One pmtu probe in words: passed, refused with a Packet Too Big, or simply lost."""
    sent = result.get("sent", 1)
    if result["reply"]:
        return f"passed ({result['replies']} of {sent} echoes answered)"
    if result["ptb_count"]:
        return f"was refused (Packet Too Big, MTU {result['ptb_mtu']})"
    return f"got neither a reply nor a Packet Too Big ({sent} echoes sent)"


def _bench_reaches(tunnel, inner_len: int, what: str) -> None:
    """The bench must be able to send an ``inner_len``-byte packet into the appliance's
    LAN, or the forwarded test cannot meet the kernel's line: a lab error naming the
    ports to raise (never a skip -- a green run has exercised every invariant)."""
    lan = tunnel.bench_lan_mtu("local")
    if lan < inner_len:
        e = tunnel.end("local")
        raise TopologyError(
            f"tunnel {tunnel.name}: {what} needs a {inner_len}-byte packet from the bench, but the bench's LAN "
            f"towards {e.host}.{e.lan} carries {lan}: give {e.host}.{e.lan} and the bench's port on that wire an "
            f"MTU of at least {inner_len} (topologies/README.md, \"Reaching the forwarded gates\")")
