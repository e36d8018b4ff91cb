"""NAT-T on the suite's side: the topology's `encap` field, the rendered `encap = yes`,
the ESP arithmetic with the UDP header, the model flag -- and the twin's own size model
(ipsec_hil_twin.engine.sizes, from FreeBSD's sources) agreeing with the suite's formulas."""
from __future__ import annotations

from pathlib import Path

import pytest

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.traffic.capture import WirePacket, is_esp, is_ike, is_udp_esp
from ipsec_hil.lab.expectations.hardware import profile_for
from ipsec_hil.lab.provision.plan import TunnelPlan
from ipsec_hil.lab.provision.render import check_grammar, render_swanctl
from ipsec_hil.lab.topology import TunnelConfig, load_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY
from ipsec_hil.lab.topology import TopologyError
from ipsec_hil.lab.expectations.hardware import REGISTRY
from ipsec_hil_twin.engine import sizes
from ipsec_hil_twin.personality import PERSONALITIES

REPO = Path(__file__).resolve().parents[2]
MINIMAL = (REPO / "tests/topology/minimal-good.yaml").read_text()


def lab_file(tmp_path: Path, outer: str, encap: str) -> Path:
    text = MINIMAL.replace("    outer: [ipv4, ipv6]\n", f"    outer: {outer}\n    encap: {encap}\n")
    assert f"encap: {encap}" in text
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return path


def test_encap_with_an_ipv6_outer_fails_naming_file_and_line(tmp_path):
    path = lab_file(tmp_path, "[ipv4, ipv6]", "true")
    with pytest.raises(TopologyError) as info:
        load_topology(path, models=REGISTRY)
    line = next(no for no, text in enumerate(path.read_text().splitlines(), 1) if "encap:" in text)
    assert f"{path}:{line}: tunnels.t.encap: expected outer: [ipv4] with encap: true" in str(info.value)
    assert "found outer ipv4, ipv6" in str(info.value)


def test_encap_not_a_bool_fails(tmp_path):
    with pytest.raises(TopologyError, match=r"tunnels\.t\.encap"):
        load_topology(lab_file(tmp_path, "[ipv4]", "sometimes"), models=REGISTRY)


@pytest.mark.parametrize("encap", ["true", "false"])
def test_render_writes_encap_yes_on_both_ends_only_when_asked(tmp_path, encap):
    topo = load_topology(lab_file(tmp_path, "[ipv4]", encap), models=REGISTRY)
    plan = TunnelPlan.from_topology(topo, "t")
    for end in ("local", "remote"):
        text = render_swanctl(plan, TunnelConfig("ipv4", "ipv4", "aes-gcm-16"), end, "k")
        check_grammar(text)
        assert ("        encap = yes\n" in text) is (encap == "true")


def test_esp_math_natt_term():
    assert esp_math.max_inner("aes-gcm-16", "ipv4", 1500, encap=True) == 1438
    assert esp_math.max_inner("aes-cbc-hmac-sha256", "ipv4", 1500, encap=True) == 1422
    assert esp_math.outer_packet_len("aes-gcm-16", "ipv4", 1438, encap=True) == 1500
    assert esp_math.esp_overhead("aes-gcm-16", "ipv4", 100, encap=True) == \
        esp_math.esp_overhead("aes-gcm-16", "ipv4", 100) + 8
    with pytest.raises(ValueError, match="IPv4 outer"):
        esp_math.max_inner("aes-gcm-16", "ipv6", 1500, encap=True)


@pytest.mark.parametrize("cipher", esp_math.CIPHERS)
@pytest.mark.parametrize("mtu", [1280, 1400, 1500, 9000])
def test_twin_and_suite_agree_on_natt_sizes(cipher, mtu):
    assert sizes.max_inner(cipher, "ipv4", mtu, True) == esp_math.max_inner(cipher, "ipv4", mtu, encap=True)
    # FreeBSD's gate has no UDP term: the forwarded limit is the one without NAT-T
    assert sizes.forwarded_limit(mtu, "ipv4") == esp_math.forwarded_ipv6_limit(mtu, "ipv4")
    with pytest.raises(ValueError):
        sizes.max_inner(cipher, "ipv6", mtu, True)


def test_offload_flag_per_model_agrees_with_the_twin():
    assert profile_for("xgs3300").offloads_udp_encap is True
    assert profile_for("xgs136").offloads_udp_encap is False
    for model, p in PERSONALITIES.items():
        assert p.offloads_udp_encap is profile_for(model).offloads_udp_encap, model


def _udp(payload: bytes, dport: int = 4500) -> WirePacket:
    from scapy.layers.inet import IP, UDP
    raw = bytes(IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=4500, dport=dport) / payload)
    return WirePacket("192.0.2.1", "192.0.2.2", 17, len(raw), dport, raw)


def test_capture_tells_udp_esp_from_ike():
    esp = _udp(b"\xc1\x00\x00\x01" + b"\x00\x00\x00\x01" + b"x" * 40)
    ike = _udp(b"\x00\x00\x00\x00" + b"ike" * 20)
    keepalive = _udp(b"\xff")
    assert is_udp_esp(esp) and is_esp(esp) and not is_ike(esp)
    assert is_ike(ike) and not is_esp(ike)
    assert not is_esp(keepalive) and is_ike(keepalive)
    assert is_ike(_udp(b"\x00" * 40, dport=500))
