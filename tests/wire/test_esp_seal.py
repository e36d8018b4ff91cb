"""The ESP frames the suite injects: sealed by ipsec_hil.lab.inject.craft for speed (issue 15),
byte for byte what scapy's ESP (``SecurityAssociation``) seals under the same IV -- both
ciphers, with and without ESN, every padding length, a misstated pad length. A frame the
appliance cannot decrypt because of the suite's sealing would read as a driver defect."""
from __future__ import annotations

import secrets
import pytest
from scapy.compat import raw
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation, _ESPPlain

from ipsec_hil.lab.inject.craft import Crafter, Inner, InjectError, min_inner

from .sa_keys import Sa


def sa_for(cipher: str, outer: str = "ipv4", key_bytes: int = 16) -> Sa:
    src, dst = ("192.0.2.1", "192.0.2.2") if outer == "ipv4" else ("2001:db8::1", "2001:db8::2")
    if cipher == "aes-gcm-16":
        return Sa(0xC0FFEE01, src, dst, cipher, secrets.token_hex(key_bytes + 4), None)
    return Sa(0xC0FFEE02, src, dst, cipher, secrets.token_hex(key_bytes), secrets.token_hex(32))


def scapy_seal(sa: Sa, esn: bool, inner: bytes, seq: int, iv: bytes, pad_delta: int = 0) -> bytes:
    """The reference: the suite's sealing as it was, through scapy's ESP."""
    hdr = IP(src=sa.src, dst=sa.dst) if ":" not in sa.dst else IPv6(src=sa.src, dst=sa.dst)
    key = bytes.fromhex(sa.enc_key)
    if sa.cipher == "aes-gcm-16":
        ref = SecurityAssociation(ESP, spi=sa.spi, crypt_algo="AES-GCM", crypt_key=key, tunnel_header=hdr, esn_en=esn)
    else:
        ref = SecurityAssociation(ESP, spi=sa.spi, crypt_algo="AES-CBC", crypt_key=key, auth_algo="SHA2-256-128",
                                  auth_key=bytes.fromhex(sa.auth_key), tunnel_header=hdr, esn_en=esn)
    esp = _ESPPlain(spi=sa.spi, seq=seq & 0xFFFFFFFF, iv=iv, data=inner, nh=4 if inner[0] >> 4 == 4 else 41)
    esp = ref.crypt_algo.pad(esp)
    if pad_delta:
        esp.padlen += pad_delta
    esp = ref.crypt_algo.encrypt(ref, esp, ref.crypt_key, ref.crypt_icv_size, esn_en=esn, esn=seq >> 32)
    ref.auth_algo.sign(esp, ref.auth_key, esn_en=esn, esn=seq >> 32)
    return raw(esp)


@pytest.mark.parametrize("cipher", ["aes-gcm-16", "aes-cbc-hmac-sha256"])
@pytest.mark.parametrize("esn", [False, True])
@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_every_padding_length_is_scapys(cipher, esn, family):
    """Sizes covering every remainder of the 16-byte block (so every padding length of
    either cipher), a large one, and sequence numbers on both sides of 2^32 with ESN."""
    sa = sa_for(cipher)
    crafter = Crafter(sa, esn=esn)
    inner = Inner(family, "198.51.100.7", "203.0.113.10") if family == "ipv4" else \
        Inner(family, "fd00:feed:b::1", "fd00:beef:a::10")
    sizes = [min_inner(family) + extra for extra in range(16)] + [1400, 8952]
    seqs = [1, 0xFFFFFFFF] + ([2**32, 2**32 + 77] if esn else [])
    iv_size = 8 if cipher == "aes-gcm-16" else 16
    for i, size in enumerate(sizes):
        for seq in seqs:
            pkt, iv = inner.packet(i, size), secrets.token_bytes(iv_size)
            assert crafter.seal(pkt, seq, iv=iv) == scapy_seal(sa, esn, pkt, seq, iv), (cipher, esn, size, seq)


@pytest.mark.parametrize("key_bytes", [16, 32])
def test_key_sizes_and_a_misstated_pad_length_are_scapys(key_bytes):
    for cipher in ("aes-gcm-16", "aes-cbc-hmac-sha256"):
        sa = sa_for(cipher, outer="ipv6", key_bytes=key_bytes)
        pkt = Inner("ipv4", "198.51.100.7", "203.0.113.10").packet(5, 101)  # 101 + 2: 11 bytes of CBC padding
        iv = secrets.token_bytes(8 if cipher == "aes-gcm-16" else 16)
        assert Crafter(sa).seal(pkt, 42, pad_delta=1, iv=iv) == scapy_seal(sa, False, pkt, 42, iv, pad_delta=1)


def test_the_iv_is_fresh_and_the_keys_are_checked():
    sa = sa_for("aes-gcm-16")
    pkt = Inner("ipv4", "198.51.100.7", "203.0.113.10").packet(0, 64)
    a, b = Crafter(sa).seal(pkt, 1), Crafter(sa).seal(pkt, 1)
    assert a[8:16] != b[8:16] and len(a) == len(b) == 8 + 8 + 64 + 2 + 2 + 16
    with pytest.raises(InjectError, match="needs ESN"):
        Crafter(sa).seal(pkt, 2**32)
    with pytest.raises(InjectError, match="key material of 16 bytes"):
        Crafter(Sa(1, "192.0.2.1", "192.0.2.2", "aes-gcm-16", "00" * 16, None))
    with pytest.raises(InjectError, match="IV of 4 bytes"):
        Crafter(sa).seal(pkt, 1, iv=b"\0" * 4)
    assert sa.enc_key not in repr(Crafter(sa)) and sa.enc_key[:8] not in repr(Crafter(sa))
