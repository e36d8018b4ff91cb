"""The engine's ESP suites on the wire's adversarial cases, against scapy's independent
ESP (no root): ESN's implicit high bits in the ICV, and each malformed frame refused for
FreeBSD's reason (the espstat key each drop moves)."""
from __future__ import annotations

import secrets

import pytest
from scapy.layers.inet import ICMP, IP
from scapy.layers.ipsec import ESP, SecurityAssociation

from ipsec_hil_twin.engine.esp import BAD_AUTH, BAD_CRYPTO, BAD_LENGTH, EspError, make_suite

CIPHERS = ["aes-gcm-16", "aes-cbc-hmac-sha256"]
B = 1 << 32


def keys(cipher):
    return (secrets.token_bytes(36), None) if cipher == "aes-gcm-16" else (secrets.token_bytes(32), secrets.token_bytes(32))


def scapy_sa(cipher, spi, enc, auth, esn):
    hdr = IP(src="192.0.2.1", dst="192.0.2.2")
    if cipher == "aes-gcm-16":
        return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-GCM", crypt_key=enc, tunnel_header=hdr,
                                   esn_en=esn)
    return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-CBC", crypt_key=enc, auth_algo="SHA2-256-128",
                               auth_key=auth, tunnel_header=hdr, esn_en=esn)


def inner(size=100):
    return bytes(IP(src="198.51.100.10", dst="203.0.113.10") / ICMP() / (b"x" * size))


@pytest.mark.parametrize("cipher", CIPHERS)
def test_esn_high_bits_are_in_the_icv_both_ways(cipher):
    spi, (enc, auth) = 0x4242, keys(cipher)
    suite = make_suite(cipher, spi, enc, auth, esn=True)
    sa = scapy_sa(cipher, spi, enc, auth, True)
    pkt = inner()
    seq = B + 7
    esp = suite.seal(pkt, 4, seq)
    assert esp[4:8] == (7).to_bytes(4, "big")  # only the low half is sent
    outer = IP(bytes(IP(src="192.0.2.1", dst="192.0.2.2", proto=50) / esp))
    assert bytes(sa.decrypt(outer, esn=1)) == pkt
    with pytest.raises(Exception):  # scapy: the ICV over high half 0 does not verify
        sa.decrypt(outer, esn=0)
    raw = bytes(sa.encrypt(IP(pkt), seq_num=9, esn_en=True, esn=1))[20:]
    assert suite.open_(raw, 1) == (pkt, 4)
    with pytest.raises(EspError) as ei:
        suite.open_(raw, 0)
    assert ei.value.espstat == BAD_AUTH


@pytest.mark.parametrize("cipher", CIPHERS)
def test_without_esn_the_icv_ignores_the_high_half(cipher):
    spi, (enc, auth) = 0x4243, keys(cipher)
    suite = make_suite(cipher, spi, enc, auth)
    sa = scapy_sa(cipher, spi, enc, auth, False)
    esp = suite.seal(inner(), 4, 5)
    assert bytes(sa.decrypt(IP(bytes(IP(src="192.0.2.1", dst="192.0.2.2", proto=50) / esp)))) == inner()


@pytest.mark.parametrize("cipher", CIPHERS)
def test_drop_reasons(cipher):
    spi, (enc, auth) = 0x4244, keys(cipher)
    suite = make_suite(cipher, spi, enc, auth)
    esp = suite.seal(inner(), 4, 3)
    assert suite.fits(len(esp))
    for bad in (esp[:-1], esp[:20], esp[:8]):  # truncated: not header + IV + blocks + ICV
        assert not suite.fits(len(bad))
        with pytest.raises(EspError) as ei:
            suite.open_(bad)
        assert ei.value.espstat == BAD_LENGTH
    for i in (len(esp) - 1, 20):  # a bit in the ICV, a bit in the ciphertext
        flipped = esp[:i] + bytes([esp[i] ^ 1]) + esp[i + 1:]
        with pytest.raises(EspError) as ei:
            suite.open_(flipped)
        assert (ei.value.kind, ei.value.espstat) == ("auth", BAD_AUTH)
    # the ICV is the only thing wrong: the fault's unverified path recovers the packet
    assert suite.open_unverified(esp[:-1] + bytes([esp[-1] ^ 1])) == (inner(), 4)


def test_wrong_pad_length_is_bad_crypto_with_a_valid_icv():
    """A CBC frame whose pad-length byte is one more than its padding, ICV recomputed by
    scapy: FreeBSD's esp_input_cb checks the last pad byte (esps_badenc)."""
    spi, (enc, auth) = 0x4245, keys("aes-cbc-hmac-sha256")
    suite = make_suite("aes-cbc-hmac-sha256", spi, enc, auth)
    sa = scapy_sa("aes-cbc-hmac-sha256", spi, enc, auth, False)
    pkt = inner(101)  # 129 bytes: (129 + 2) % 16 = 3 -> 13 bytes of padding
    pad = bytes(range(1, 14))
    from scapy.layers.ipsec import _ESPPlain  # scapy's own plaintext layout
    plain = _ESPPlain(spi=spi, seq=4, iv=secrets.token_bytes(16), data=pkt, padding=pad, padlen=14, nh=4)
    crypted = sa.crypt_algo.encrypt(sa, plain, sa.crypt_key)
    signed = sa.auth_algo.sign(crypted, sa.auth_key)
    with pytest.raises(EspError) as ei:
        suite.open_(bytes(signed))
    assert (ei.value.kind, ei.value.espstat) == ("malformed", BAD_CRYPTO)
