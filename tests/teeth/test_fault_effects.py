"""The ESP effects of the matrix's wire faults, on the sealing functions alone (no lab).

- esp_pad_extra: one more padding block (4 bytes with GCM, 16 with CBC) -- still valid
  RFC 4303 padding (1, 2, 3, ...), so the twin's receiver accepts it: only the length
  formula notices.
- gcm_nonce_swapped: the nonce as explicit IV || salt; the twin's receiver (the same
  driver on both ends) accepts it, a standard RFC 4106 decryption (salt || IV) does not.
"""

from __future__ import annotations

import os
import struct

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ipsec_hil_twin.engine.esp import make_suite

#: a 60-byte IPv4 packet (header + 40 bytes): what the receiver's inner check accepts
INNER = bytes([0x45, 0, 0, 60]) + bytes(56)


@pytest.mark.parametrize("cipher,block", [("aes-gcm-16", 4), ("aes-cbc-hmac-sha256", 16)])
def test_pad_extra_adds_one_block_the_peer_accepts(cipher, block):
    enc, auth = (os.urandom(36), None) if cipher == "aes-gcm-16" else (os.urandom(32), os.urandom(32))
    suite = make_suite(cipher, 0x1234, enc, auth)
    plain, padded = suite.seal(INNER, 4, 1), suite.seal(INNER, 4, 2, pad_extra=True)
    assert len(padded) == len(plain) + block
    assert suite.open_(padded) == (INNER, 4)


def test_gcm_nonce_swapped_fails_a_standard_decryptor_not_the_twin():
    key, salt = os.urandom(32), os.urandom(4)
    suite = make_suite("aes-gcm-16", 0x1234, key + salt, None)
    esp = suite.seal(INNER, 4, 7, swap_nonce=True)
    assert suite.open_(esp) == (INNER, 4), "the twin's receiver shares the driver's nonce order"
    iv, aad = esp[8:16], esp[:8]
    assert iv == struct.pack("!Q", 7)
    with pytest.raises(InvalidTag):
        AESGCM(key).decrypt(salt + iv, esp[16:], aad)  # RFC 4106: nonce = salt || IV
    healthy = suite.seal(INNER, 4, 8)
    assert AESGCM(key).decrypt(salt + healthy[8:16], healthy[16:], healthy[:8])[:60] == INNER
