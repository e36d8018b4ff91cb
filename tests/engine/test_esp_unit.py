"""ESP engine units without root: cipher suites against scapy's independent ESP
implementation, the replay window, selectors and SA validation."""
from __future__ import annotations

import secrets

import pytest
from scapy.layers.inet import ICMP, IP
from scapy.layers.inet6 import IPv6, ICMPv6EchoRequest
from scapy.layers.ipsec import ESP, SecurityAssociation

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil_twin.engine.esp import EspError, ReplayWindow, _hmac_pads, make_suite
from ipsec_hil_twin.engine.sa import SaSpec
from ipsec_hil_twin.engine.selectors import addr_key, addresses_only, fast_key, matches, parse_selector
from ipsec_hil_twin.engine.sizes import forwarded_gate, gate_checks
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


@pytest.mark.parametrize("cipher", CIPHERS)
def test_open_checks_the_shape_first_open_fitted_leaves_it_to_the_caller(cipher):
    """open_ = fits, then open_fitted (the receive loop calls the two itself, the replay
    check between them): a payload of the wrong shape is `malformed` before any ICV."""
    enc, auth = _keys(cipher)
    s = make_suite(cipher, 0x4242, enc, auth)
    esp = s.seal(inner("ipv4", 300), 4, 3)
    assert s.fits(len(esp)) and s.open_fitted(esp) == s.open_(esp) == (inner("ipv4", 300), 4)
    short = esp[:-1]
    assert not s.fits(len(short))
    with pytest.raises(EspError, match="ESP payload length not header") as ei:
        s.open_(short)
    assert ei.value.kind == "malformed" and ei.value.espstat == "dropped-bad-length"


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


def test_cbc_first_blocks_stay_distinct_and_open_across_random_pool_refills():
    """CBC draws its random first blocks 4 KiB at a time (256 packets): across two refills
    every packet still carries its own IV and opens with scapy's independent ESP."""
    enc, auth = _keys("aes-cbc-hmac-sha256")
    suite = make_suite("aes-cbc-hmac-sha256", 0x2345, enc, auth)
    sa = scapy_sa("aes-cbc-hmac-sha256", 0x2345, enc, auth, "ipv4")
    pkt = inner("ipv4", 300)
    ivs = set()
    for seq in range(1, 601):
        esp = suite.seal(pkt, 4, seq)
        ivs.add(esp[8:24])
        if seq in (1, 256, 257, 513, 600):
            outer_pkt = IP(bytes(IP(src="192.0.2.1", dst="192.0.2.2", proto=50) / esp))
            assert bytes(sa.decrypt(outer_pkt)) == pkt, seq
    assert len(ivs) == 600


@pytest.mark.parametrize("key, data, mac", [
    (b"\x0b" * 20, b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
    (b"\xaa" * 131, b"Test Using Larger Than Block-Size Key - Hash Key First",
     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
])
def test_hmac_from_precomputed_pads_matches_rfc4231(key, data, mac):
    """The CBC suite's HMAC-SHA-256 (states after K^ipad and K^opad, copied per packet)
    against RFC 4231 test cases 1 and 6 (a key longer than the block is hashed first)."""
    ipad, opad = _hmac_pads(key)
    h = ipad.copy()
    h.update(data)
    o = opad.copy()
    o.update(h.digest())
    assert o.hexdigest() == mac


def test_address_key_only_where_no_selector_names_a_protocol_or_port():
    v4 = inner("ipv4", 100)
    assert addresses_only([parse_selector("198.51.100.0/26"), parse_selector("fd00:b::/64")])
    assert not addresses_only([parse_selector("198.51.100.0/26"), parse_selector("203.0.113.0/24[tcp/5201]")])
    assert not addresses_only([parse_selector("203.0.113.0/24[udp]")])
    assert addr_key(v4) == v4[12:20] and addr_key(inner("ipv6", 100)) == inner("ipv6", 100)[8:40]
    assert addr_key(b"\x00" * 40) is None and fast_key(v4) != addr_key(v4)


@pytest.mark.parametrize("version", [4, 6, 5])
@pytest.mark.parametrize("dfbit", [0, 1, 2, 3])
@pytest.mark.parametrize("df_set", [False, True])
def test_gate_checks_says_when_forwarded_gate_can_refuse(version, dfbit, df_set):
    """The transmit loop skips forwarded_gate where gate_checks says no: that must be
    exactly where the gate passes even a packet far above the path MTU."""
    verdict = forwarded_gate(9000, version, 1500, "ipv4", dfbit, df_set)
    assert (verdict.action != "pass") == gate_checks(version, dfbit, df_set)
