"""Conservation: every packet the engine encrypts is one the peer takes, and nothing is lost.

The 000 page (XGS 3300, octep, the peer on the kernel's cipher): "tx_encrypt +7,397,169 =
out_taken = FROM_KN_TO_IPSEC_ENCR; the peer's ESP input +7,397,169 exactly, its
authentication drops 0; out_orig 0"; inbound "rx_bad 0, rx_blocked 0", decrypted =
delivered + the queue's refusals. The 001 page (XGS 136, npuep, the peer's engine on its
side): "rx_bad, rx_nosa, tx_nonhop and tx_drop stayed 0 through every run", "the 3300's
kernel ESP counters did not move". Counters are read after they settle.

Every equality also holds a lower bound -- the packets the stream must have made (iperf3's
received bytes over the largest TCP payload the path fits) -- so a tunnel that carried
nothing fails at 0 = 0, and where an end's engine holds the associations its kernel ESP
counters must not move (the offload path carried it). On the XGS 136 both doors are
measured apart and exactly: forwarded (tx_taken) and the appliance's own (tx_accel), up
and down. Every conservation closes on counts (issue 52): sent = received + the doors
between them (the sender's transmit drops or, for the kernel's cipher, its port's output
drops; the receiver port's input drops: ActiveTunnel.loss_doors), exactly; what the doors
counted is loss, judged by the topology's congested tolerance.

On a kernel with the IPsec offload framework (FreeBSD 15: OPNsense 26.7) each SA's `hw
offl` packets (setkey -D) are one more door, on both ends, exact against the driver's own
counters and conserved against the peer's ESP input (ActiveTunnel.expect_offload_door;
read with the other counters, so the settle covers the driver's counter lag). On
FreeBSD 14 the kernel keeps no such count and the door is absent.

Counters are named as the code knows them (issue 53): ``f"{dut}:tx_encrypt"`` is checked
against the profiles of the test's models when the tests are collected, the 136's door
counters are its profile's by attribute (``XGS136.tx_taken``); a misspelt name is a
collection error naming the test and the profile, not a failure on the lab. A
conservation reads as one line of intent: ``tunnel.expect_conserved(ledger, why,
sender=...)``, its doors and loss rule the tunnel's.
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.expectations.counters import model_counters
from ipsec_hil.lab.measuring.measure import Ledger, expect_equal, expect_zero

XGS136 = model_counters("xgs136")


@pytest.mark.page("000")
@pytest.mark.tunnels(model="xgs3300", remote_cipher="kernel", cipher="aes-gcm-16")
def test_appliance_sourced_conservation(tunnel, record, meter, stream, traffic_seconds):
    """Appliance-sourced, outbound: engine encrypt = interposition = coprocessor = peer's ESP input."""
    dut, peer = tunnel.local, tunnel.remote
    with meter(dut, peer, title="outbound, the appliance's own stream") as m:
        res = stream(dut, peer, tunnel.inner_address("remote"), traffic_seconds(10),
                     bind=tunnel.inner_address("local"), label="the DUT's own stream up")
    L, d, p = m.ledger, dut.name, peer.name
    least = tunnel.least_stream_packets(res)
    record.figure("packets the stream must have made (at least)", least)
    expect_equal(L, f"{d}:tx_encrypt", f"{d}:out_taken", "every own packet took the interposition", at_least=least)
    expect_equal(L, f"{d}:tx_encrypt", f"{d}:FROM_KN_TO_IPSEC_ENCR", "the coprocessor encrypted what the driver counted",
                 at_least=least)
    tunnel.expect_conserved(L, "the peer's ESP input equals the engine's encrypt count", sender="local",
                            sent=f"{d}:tx_encrypt", received=f"{p}:esp.received-packets", at_least=least)
    expect_zero(L, [f"{p}:esp.dropped-bad-auth", f"{d}:out_orig"], "no authentication failure, no bypass")
    tunnel.expect_offload_carried(L, "the DUT's own stream up")
    record.figure("hw offl doors checked (FreeBSD 15)", tunnel.expect_offload_door(
        L, "the DUT's own stream up", sender="local", at_least=least))


@pytest.mark.page("000")
@pytest.mark.tunnels(model="xgs3300", remote_cipher="kernel", cipher="aes-gcm-16")
def test_inbound_decrypted_equals_delivered(tunnel, record, meter, stream, traffic_seconds):
    """Inbound: frames taken from the wire = delivered + queue refusals; rx_bad, rx_blocked 0."""
    dut, peer = tunnel.local, tunnel.remote
    with meter(dut, peer, title="inbound, the peer's stream down") as m:
        res = stream(dut, peer, tunnel.inner_address("remote"), traffic_seconds(10), reverse=True,
                     bind=tunnel.inner_address("local"), label="the peer's stream down")
    L, d, p = m.ledger, dut.name, peer.name
    least = tunnel.least_stream_packets(res)
    record.figure("packets the stream must have made (at least)", least)
    tunnel.expect_conserved(L, "every frame the peer sent reached the coprocessor", sender="remote",
                            sent=f"{p}:esp.sent-packets", received=f"{d}:FROM_WIRE_TO_IPSEC_DECR", at_least=least)
    expect_equal(L, f"{d}:FROM_WIRE_TO_IPSEC_DECR",
                 [f"{d}:rx_done", f"{d}:rx_queuefail", f"{d}:CRYPTO_DROP_REPLAY_OOW"],
                 "decrypted = delivered + queue refusals (+ replay drops)", at_least=least)
    if tunnel.config.inner == "ipv6":
        expect_equal(L, f"{d}:rx_v6", [f"{d}:rx_done", f"{d}:rx_queuefail"], "rx_v6 counts IPv6 deliveries",
                     at_least=least)
    expect_zero(L, [f"{d}:rx_bad", f"{d}:rx_blocked"], "nothing refused")
    tunnel.expect_offload_carried(L, "the peer's stream down")
    record.figure("hw offl doors checked (FreeBSD 15)", tunnel.expect_offload_door(
        L, "the peer's stream down", sender="remote", at_least=least))
    record.figure("queue refusals (rx_queuefail)", L.delta(f"{d}:rx_queuefail"))
    record.figure("replay drops (CRYPTO_DROP_REPLAY_OOW)", L.delta(f"{d}:CRYPTO_DROP_REPLAY_OOW"))


#: The XGS 136's counter per door (page 001: "through the output step, tx_taken" for a
#: forwarded packet; "through the offload path, tx_accel" for its own) and per inner
#: family on the way in (rx_done IPv4, rx_v6 IPv6 deliveries).
NPU_DOOR = {"forwarded": XGS136.tx_taken, "own": XGS136.tx_accel}
NPU_DELIVERED = {"ipv4": XGS136.rx_done, "ipv6": XGS136.rx_v6}


@pytest.mark.page("001")
@pytest.mark.forwarded
@pytest.mark.tunnels(model="xgs136", children="one")
def test_both_doors_clean(tunnel, record, meter, stream, bench_route, traffic_seconds):
    """Both doors (forwarded and own), both directions: exact conservation, error counters 0, kernel ESP still."""
    npu, peer = tunnel.local, tunnel.remote
    bench = tunnel.bench
    target = tunnel.inner_address("remote")
    src = tunnel.bench_inner_address("local")
    assert src, f"the bench has no {tunnel.config.inner} address on {npu.name}'s LAN"
    bench_route(tunnel.inner_prefix("remote"), tunnel.inner_address("local"))
    senders = {"forwarded": (bench, src), "own": (npu, tunnel.inner_address("local"))}
    for door, (client, bind) in senders.items():
        for down in (False, True):
            label = f"{door} {'down' if down else 'up'}"
            with meter(npu, peer, title=f"{label}, one stream") as m:
                res = stream(client, peer, target, traffic_seconds(10), bind=bind, reverse=down, label=label)
            least = tunnel.least_stream_packets(res)
            record.figure(f"{label}: packets the stream must have made (at least)", least)
            if down:
                _conserved_down(tunnel, m.ledger, least, label)
            else:
                _conserved_up(tunnel, m.ledger, least, door, label)
            expect_zero(m.ledger, [f"{npu.name}:{c}" for c in npu.profile.error_counters],
                        f"{label}: the 136's error counters")
            tunnel.expect_offload_carried(m.ledger, label)
            record.figure(f"{label}: hw offl doors checked (FreeBSD 15)", tunnel.expect_offload_door(
                m.ledger, label, sender="remote" if down else "local", at_least=least))


def _conserved_up(tunnel, L: Ledger, least: int, door: str, label: str) -> None:
    """The 136 encrypts through ``door``: that door's counter is every packet it handed its
    engine, and the peer decrypted exactly those."""
    n = tunnel.local.name
    handed = tunnel.encrypted_refs("local")
    expect_equal(L, f"{n}:{NPU_DOOR[door]}", handed, f"{label}: every packet took the {door} door", at_least=least)
    tunnel.expect_conserved(L, f"{label}: frames the 136 handed its engine = frames the peer decrypted", sender="local",
                            at_least=least)


def _conserved_down(tunnel, L: Ledger, least: int, label: str) -> None:
    """The peer encrypts: the 136 decrypted exactly what it sent, delivered by inner family."""
    n = tunnel.local.name
    decrypted = tunnel.decrypted_refs("local")
    tunnel.expect_conserved(L, f"{label}: frames the peer encrypted = frames the 136 decrypted", sender="remote",
                            at_least=least)
    family = tunnel.config.inner
    expect_equal(L, f"{n}:{NPU_DELIVERED[family]}", decrypted,
                 f"{label}: {family} inside, every delivery counted by {NPU_DELIVERED[family]}", at_least=least)
