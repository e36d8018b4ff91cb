"""Conservation: every packet the engine encrypts is one the peer takes, and nothing is lost.

The 000 page (XGS 3300, octep, the peer on the kernel's cipher): "tx_encrypt +7,397,169 =
out_taken = FROM_KN_TO_IPSEC_ENCR; the peer's ESP input +7,397,169 exactly, its
authentication drops 0; out_orig 0"; inbound "rx_bad 0, rx_blocked 0", decrypted =
delivered + the queue's refusals. The 001 page (XGS 136, npuep, the peer's engine on its
side): "rx_bad, rx_nosa, tx_nonhop and tx_drop stayed 0 through every run", "the 3300's
kernel ESP counters did not move". Counters are read after they settle.
"""

from __future__ import annotations

import pytest

from plugin.lab.expect import decrypted_refs, encrypted_refs
from plugin.lab.measure import expect_equal, expect_within, expect_zero


@pytest.mark.page("000")
@pytest.mark.tunnels(model="xgs3300", remote_cipher="kernel", cipher="aes-gcm-16")
def test_appliance_sourced_conservation(tunnel, record, meter, stream, traffic_seconds):
    """Appliance-sourced, outbound: engine encrypt = interposition = coprocessor = peer's ESP input."""
    dut, peer = tunnel.local, tunnel.remote
    with meter(dut, peer, title="outbound, the appliance's own stream") as m:
        stream(dut, peer, tunnel.inner_address("remote"), traffic_seconds(10),
               bind=tunnel.inner_address("local"), label="the DUT's own stream up")
    L, d, p = m.ledger, dut.name, peer.name
    expect_equal(L, f"{d}:tx_encrypt", f"{d}:out_taken", "every own packet took the interposition")
    expect_equal(L, f"{d}:tx_encrypt", f"{d}:FROM_KN_TO_IPSEC_ENCR", "the coprocessor encrypted what the driver counted")
    expect_equal(L, f"{d}:tx_encrypt", f"{p}:esp.received-packets", "the peer's ESP input equals the engine's encrypt count")
    expect_zero(L, [f"{p}:esp.dropped-bad-auth", f"{d}:out_orig"], "no authentication failure, no bypass")


@pytest.mark.page("000")
@pytest.mark.tunnels(model="xgs3300", remote_cipher="kernel", cipher="aes-gcm-16")
def test_inbound_decrypted_equals_delivered(tunnel, record, meter, stream, traffic_seconds):
    """Inbound: frames taken from the wire = delivered + queue refusals; rx_bad, rx_blocked 0."""
    dut, peer = tunnel.local, tunnel.remote
    with meter(dut, peer, title="inbound, the peer's stream down") as m:
        stream(dut, peer, tunnel.inner_address("remote"), traffic_seconds(10), reverse=True,
               bind=tunnel.inner_address("local"), label="the peer's stream down")
    L, d, p = m.ledger, dut.name, peer.name
    expect_equal(L, f"{p}:esp.sent-packets", f"{d}:FROM_WIRE_TO_IPSEC_DECR",
                 "every frame the peer sent reached the coprocessor")
    expect_equal(L, f"{d}:FROM_WIRE_TO_IPSEC_DECR",
                 [f"{d}:rx_done", f"{d}:rx_queuefail", f"{d}:CRYPTO_DROP_REPLAY_OOW"],
                 "decrypted = delivered + queue refusals (+ replay drops)")
    if tunnel.config.inner == "ipv6":
        expect_equal(L, f"{d}:rx_v6", [f"{d}:rx_done", f"{d}:rx_queuefail"], "rx_v6 counts IPv6 deliveries")
    expect_zero(L, [f"{d}:rx_bad", f"{d}:rx_blocked"], "nothing refused")
    record.figure("queue refusals (rx_queuefail)", L.delta(f"{d}:rx_queuefail"))
    record.figure("replay drops (CRYPTO_DROP_REPLAY_OOW)", L.delta(f"{d}:CRYPTO_DROP_REPLAY_OOW"))


@pytest.mark.page("001")
@pytest.mark.forwarded
@pytest.mark.tunnels(model="xgs136", children="one")
def test_both_doors_clean(tunnel, record, meter, stream, bench_route, traffic_seconds):
    """Both doors (forwarded and own): error counters stay 0; the peer's kernel ESP does not move."""
    npu, peer = tunnel.local, tunnel.remote
    bench = tunnel.lab.bench
    target = tunnel.inner_address("remote")
    src = tunnel.bench_inner_address("local")
    assert src, f"the bench has no {tunnel.config.inner} address on {npu.name}'s LAN"
    plen = 32 if tunnel.config.inner == "ipv4" else 128
    bench_route(f"{target}/{plen}", tunnel.inner_address("local"))
    with meter(npu, peer, title="both doors, both directions") as m:
        stream(bench, peer, target, traffic_seconds(10), bind=src, label="forwarded up (tx_taken)")
        stream(npu, peer, target, traffic_seconds(10), bind=tunnel.inner_address("local"), label="own up (tx_accel)")
        stream(bench, peer, target, traffic_seconds(10), bind=src, reverse=True, label="forwarded down")
    L, n, p = m.ledger, npu.name, peer.name
    expect_zero(L, [f"{n}:rx_bad", f"{n}:rx_nosa", f"{n}:tx_nonhop", f"{n}:tx_drop"], "the 136's error counters")
    if tunnel.plan.remote.cipher != "kernel":
        expect_zero(L, [f"{p}:esp.received-packets", f"{p}:esp.sent-packets"],
                    "the peer's kernel ESP counters do not move when its engine takes its side")
    handed = encrypted_refs(n, npu.profile.driver)
    decrypted = decrypted_refs(p, peer.profile.driver, kernel_cipher=tunnel.plan.remote.cipher == "kernel")
    tol = tunnel.plan.tolerance.get("congested", 0.001)
    expect_within(handed, decrypted, tol, "frames the 136 handed its engine vs frames the peer decrypted", ledger=L)
