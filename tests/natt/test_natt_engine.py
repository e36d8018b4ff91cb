"""NAT traversal in the twin's engine: ESP in UDP 4500 (RFC 3948) between two real engines.

gwA runs npuep (no NAT-T offload: the kernel carries the associations, its ESP
counters move and the driver's stay still), gwB octep (offloads them).  The sizes are
the suite's own formulas (ipsec_hil.lab.expectations.esp_math), the wire is read by tcpdump and
decrypted by the suite's probe (ipsec_hil.lab.probes.esp_decrypt) -- not by the engine.
"""
from __future__ import annotations

import re

import pytest
from scapy.layers.l2 import Ether

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.traffic.capture import WirePacket, is_esp, is_ike, is_udp_esp
from ipsec_hil.lab.probes.esp_decrypt import decrypt
from tests.engine.conftest import Capture, needs_root, settle
from tests.engine.test_engine_lab import GB_LAN, HB, delta, fresh, ping
from ipsec_hil_twin.engine.minilab import MiniLab

pytestmark = needs_root
GCM = "aes-gcm-16"


@pytest.fixture(scope="module")
def lab():
    lab = MiniLab(wan_rate_mbit=250, driver={"gA": "npuep", "gB": "octep"})
    lab.build()
    try:
        yield lab
    finally:
        lab.close()


def test_own_limit_is_8_bytes_smaller_and_the_wire_is_udp_4500_that_scapy_decrypts(lab):
    fresh(lab)
    sas = lab.tunnel(GCM, "ipv4", encap=True)
    own = esp_math.max_inner(GCM, "ipv4", 1500, encap=True)
    assert own == esp_math.max_inner(GCM, "ipv4", 1500) - 8 == 1438
    data = esp_math.ping_data_for_inner(own, "ipv4")
    wan = Capture(lab, "gA", "wan", "ip proto 50 or udp port 4500")
    assert ping(lab, "gA", "ipv4", GB_LAN["ipv4"], size=data).returncode == 0
    r = ping(lab, "gA", "ipv4", GB_LAN["ipv4"], size=data + 1)
    assert r.returncode != 0 and re.search(r"too long|mtu", r.stdout + r.stderr, re.I), r.stdout + r.stderr
    assert ping(lab, "hA", "ipv4", HB["ipv4"], size=300, count=3, df=False).returncode == 0
    frames = wan.stop()
    pkts = [Ether(f).payload for f in frames]
    assert pkts and all(p.proto == 17 for p in pkts), "with encap, no plain ESP (protocol 50) on the wire"
    wire = [WirePacket(p.src, p.dst, p.proto, p.len, p.payload.dport, bytes(p)) for p in pkts]
    assert all(is_udp_esp(w) and is_esp(w) and not is_ike(w) for w in wire)
    assert max(p.len for p in pkts) == 1500  # the own 1,438-byte packet fills the path exactly
    for name in ("gA_out", "gB_out"):
        sa = sas[name]
        out = decrypt(pkts, sa["spi"], {"cipher": GCM, "enc_key": bytes.fromhex(sa["enc_key"]), "auth_key": None})
        assert out["esp_packets"] == out["udp_encapsulated"] == out["decrypted"] == 4 and out["failed"] == 0


def test_offload_or_explicit_kernel_fallback_and_conservation(lab):
    fresh(lab)
    lab.tunnel(GCM, "ipv4", encap=True)
    a0, b0 = settle(lab, "gA"), settle(lab, "gB")
    assert ping(lab, "hA", "ipv4", HB["ipv4"], size=200, count=20, interval="0.02", df=False).returncode == 0
    a1, b1 = settle(lab, "gA"), settle(lab, "gB")
    # npuep does not offload NAT-T: the kernel's ESP counters carry it, the driver's stay still
    assert all(delta(a0, a1, n) == 0 for n in ("tx_taken", "tx_accel", "rx_done", "rx_v6"))
    sent_a = delta(a0, a1, "sent-packets", "esp")
    assert sent_a == 20 and delta(a0, a1, "received-packets", "esp") == 20
    # octep offloads it: its counters carry the traffic, the kernel's stay still
    assert delta(b0, b1, "FROM_WIRE_TO_IPSEC_DECR") == sent_a == delta(b0, b1, "rx_done")
    assert delta(b0, b1, "tx_encrypt") == 20 and delta(b0, b1, "sent-packets", "esp") == 0
    assert delta(a0, a1, "sent-bytes", "esp") > 0


def test_forwarded_gate_is_freebsds_without_a_udp_term(lab):
    fresh(lab)
    lab.tunnel(GCM, "ipv4", encap=True)
    gate = esp_math.forwarded_ipv6_limit(1500, "ipv4")
    assert gate == 1383  # ipsec_hdrsiz_internal adds nothing for NAT-T
    assert ping(lab, "hA", "ipv4", HB["ipv4"], size=esp_math.ping_data_for_inner(gate, "ipv4")).returncode == 0


def test_an_ipv6_outer_association_with_encap_is_refused(lab):
    fresh(lab)
    with pytest.raises(Exception, match="encap"):
        lab.tunnel(GCM, "ipv6", encap=True, v6_routes=False)
