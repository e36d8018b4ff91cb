"""ESP engine units without root: cipher suites against scapy's independent ESP
implementation, the replay window, selectors and SA validation."""
from __future__ import annotations

import secrets

import pytest
from scapy.layers.inet import ICMP, IP
from scapy.layers.inet6 import IPv6, ICMPv6EchoRequest
from scapy.layers.ipsec import ESP, SecurityAssociation

from plugin.lab import esp_math
from twin.engine.esp import EspError, ReplayWindow, make_suite
from twin.engine.sa import SaSpec
from twin.engine.selectors import matches, parse_selector
import ipaddress

CIPHERS = ["aes-gcm-16", "aes-cbc-hmac-sha256"]


def _keys(cipher):
    if cipher == "aes-gcm-16":
        return secrets.token_bytes(36), None
    return secrets.token_bytes(32), secrets.token_bytes(32)


def scapy_sa(cipher, spi, enc, auth, outer):
    hdr = IP(src="192.0.2.1", dst="192.0.2.2") if outer == "ipv4" else IPv6(src="2001:db8::1", dst="2001:db8::2")
    if cipher == "aes-gcm-16":
        return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-GCM", crypt_key=enc, tunnel_header=hdr)
    return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-CBC", crypt_key=enc,
                               auth_algo="SHA2-256-128", auth_key=auth, tunnel_header=hdr)


def inner(family, size=100):
    if family == "ipv4":
        return bytes(IP(src="198.51.100.10", dst="203.0.113.10") / ICMP() / (b"x" * size))
    return bytes(IPv6(src="fd00:a::10", dst="fd00:b::10") / ICMPv6EchoRequest(data=b"y" * size))


@pytest.mark.parametrize("cipher", CIPHERS)
@pytest.mark.parametrize("outer", ["ipv4", "ipv6"])
@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_engine_output_decrypts_with_scapy_and_back(cipher, outer, family):
    spi = 0x1234567
    enc, auth = _keys(cipher)
    suite = make_suite(cipher, spi, enc, auth)
    sa = scapy_sa(cipher, spi, enc, auth, outer)
    pkt = inner(family, 137)
    esp = suite.seal(pkt, 4 if family == "ipv4" else 41, 7)
    # length exactly as the formula says
    assert len(esp) == esp_math.esp_overhead(cipher, outer, len(pkt)) - (20 if outer == "ipv4" else 40) + len(pkt)
    outer_pkt = (IP(src="192.0.2.1", dst="192.0.2.2", proto=50) if outer == "ipv4"
                 else IPv6(src="2001:db8::1", dst="2001:db8::2", nh=50)) / esp
    outer_pkt = outer_pkt.__class__(bytes(outer_pkt))
    assert bytes(sa.decrypt(outer_pkt)) == pkt
    # scapy -> engine
    pkt_from_scapy = IP(pkt) if family == "ipv4" else IPv6(pkt)
    enc_pkt = sa.encrypt(pkt_from_scapy, seq_num=9)
    raw = bytes(enc_pkt)
    esp2 = raw[20:] if outer == "ipv4" else raw[40:]
    got, nh = suite.open_(esp2)
    assert got == pkt and nh == (4 if family == "ipv4" else 41)
    # a flipped ICV byte is refused as an authentication failure
    with pytest.raises(EspError) as ei:
        suite.open_(esp2[:-1] + bytes([esp2[-1] ^ 0x80]))
    assert ei.value.kind == "auth"


def test_wrong_next_header_is_malformed():
    enc, auth = _keys("aes-gcm-16")
    s = make_suite("aes-gcm-16", 300, enc, auth)
    with pytest.raises(EspError) as ei:
        s.open_(s.seal(inner("ipv4"), 41, 1))
    assert ei.value.kind == "malformed"


def test_replay_window_rfc4303():
    w = ReplayWindow(32)
    for s in (1, 2, 3, 40):
        assert w.check(s)
        w.update(s)
    assert not w.check(40) and not w.check(3)  # duplicate; 3 is left of the window (40-3 >= 32)
    assert w.check(9) and w.check(39)
    w.update(39)
    assert not w.check(39)
    assert not w.check(0)
    assert w.check(1000)
    w.update(1000)
    assert not w.check(968) and w.check(969)


def test_selectors_with_ports():
    s = parse_selector("198.51.100.64/26[tcp/5201]")
    assert str(s) == "198.51.100.64/26[tcp/5201]"
    a = ipaddress.ip_address("198.51.100.70")
    assert matches(s, a, 6, 5201) and not matches(s, a, 6, 5202) and not matches(s, a, 17, 5201)
    assert matches(parse_selector("fd00::/8"), ipaddress.ip_address("fd00:b::1"), 58, None)
    with pytest.raises(ValueError, match="local_ts"):
        parse_selector("10.0.0.0/8[tcp/x]", "local_ts")


def test_sa_spec_errors_name_field_not_key():
    base = {"spi": 0x1000, "direction": "out", "src": "192.0.2.1", "dst": "192.0.2.2",
            "cipher": "aes-gcm-16", "enc_key": "ab" * 32}
    with pytest.raises(ValueError) as ei:
        SaSpec.model_validate(base)
    assert "enc_key" in str(ei.value) and "ab" * 8 not in str(ei.value)
    ok = SaSpec.model_validate(dict(base, enc_key="cd" * 36))
    assert "enc_key" not in ok.public() and "cdcd" not in repr(ok)
