"""ESP (RFC 4303) tunnel-mode payload sealing/opening and the anti-replay window.

Why closures: the engine is limited by Python's per-packet cost, so each SA
precomputes its cipher objects, SPI bytes and trailers once and exposes two small
functions (`seal`, `open_`) that do the minimum per packet.

Suites:
  aes-gcm-16           AES-GCM-256, RFC 4106: 4-byte salt from keymat, 8-byte explicit IV
                       (the sequence number as a 64-bit counter: unique per key), 16-byte
                       ICV, AAD = SPI || seq; alignment 4.
  aes-cbc-hmac-sha256  AES-CBC-256 (RFC 3602) with an unpredictable 16-byte IV + HMAC-SHA-256-128
                       (RFC 4868) over SPI..ciphertext; alignment 16.
Padding is 1, 2, 3, ... (RFC 4303 2.4 default).
"""
from __future__ import annotations

import hmac as _hmac
import os
import struct
from dataclasses import dataclass
from typing import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as crypto_hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .sizes import CBC, GCM

_PAD = bytes(range(1, 256))


class EspError(Exception):
    """A received ESP payload that must be dropped; `kind` says which counter."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind  # "auth" | "malformed"


@dataclass(frozen=True)
class Suite:
    """Per-SA crypto: seal(inner, next_header, seq) -> ESP payload; open_(esp) -> (inner, nh)."""

    seal: Callable[[bytes, int, int], bytes]
    open_: Callable[[bytes], tuple[bytes, int]]
    align: int


def _trailers(align: int) -> dict[tuple[int, int], bytes]:
    return {(p, nh): _PAD[:p] + bytes((p, nh)) for p in range(align) for nh in (4, 41, 59)}


def make_suite(cipher: str, spi: int, enc_key: bytes, auth_key: bytes | None) -> Suite:
    """Build the per-packet functions for one SA (keys are never logged)."""
    spi_b = struct.pack("!I", spi)
    if cipher == GCM:
        if len(enc_key) != 36:
            raise ValueError(f"aes-gcm-16 enc_key: expected 36 bytes (key+salt), found {len(enc_key)}")
        aead = AESGCM(enc_key[:32])
        salt = enc_key[32:]
        trail = _trailers(4)
        enc, dec = aead.encrypt, aead.decrypt
        pack_q = struct.Struct("!Q").pack

        def seal(inner: bytes, nh: int, seq: int) -> bytes:
            pad = -(len(inner) + 2) & 3
            iv = pack_q(seq)
            hdr = spi_b + iv[4:]  # SPI || 32-bit seq
            return hdr + iv + enc(salt + iv, inner + trail[pad, nh], hdr)

        def open_(esp: bytes) -> tuple[bytes, int]:
            if len(esp) < 16 + 16 + 4:
                raise EspError("malformed", "ESP payload shorter than header+ICV")
            try:
                pt = dec(salt + esp[8:16], esp[16:], esp[:8])
            except InvalidTag:
                raise EspError("auth", "ICV mismatch") from None
            return _strip(pt)

        return Suite(seal, open_, 4)

    if cipher == CBC:
        if len(enc_key) != 32 or auth_key is None or len(auth_key) != 32:
            raise ValueError("aes-cbc-hmac-sha256: expected 32-byte enc_key and 32-byte auth_key")
        # One long-lived CBC context per direction (creating a context costs ~70 us with
        # OpenSSL 3).  Encrypting a random block first makes the chained output block the
        # packet's IV: IV = E_k(random XOR previous block), unpredictable as RFC 3602 asks
        # (NIST SP 800-38A appendix C: an IV from the forward cipher of a nonce), and the
        # remaining output is exactly CBC(IV, plaintext).  Decryption feeds IV||C and drops
        # the first output block; CBC needs nothing else from the previous packet.
        aes = algorithms.AES(enc_key)
        encryptor = Cipher(aes, modes.CBC(os.urandom(16))).encryptor()
        decryptor = Cipher(aes, modes.CBC(bytes(16))).decryptor()
        e_update, d_update = encryptor.update, decryptor.update
        urandom = os.urandom
        trail = _trailers(16)
        cmp = _hmac.compare_digest
        mac0 = crypto_hmac.HMAC(bytes(auth_key), hashes.SHA256())  # keyed once, copied per packet
        pack_i = struct.Struct("!I").pack

        def icv(body: bytes) -> bytes:
            m = mac0.copy()
            m.update(body)
            return m.finalize()[:16]

        def seal(inner: bytes, nh: int, seq: int) -> bytes:
            pad = -(len(inner) + 2) & 15
            body = spi_b + pack_i(seq & 0xFFFFFFFF) + e_update(urandom(16) + inner + trail[pad, nh])
            return body + icv(body)

        def open_(esp: bytes) -> tuple[bytes, int]:
            n = len(esp)
            if n < 8 + 16 + 16 + 16 or (n - 40) % 16:
                raise EspError("malformed", "ESP payload length not header+IV+k*16+ICV")
            body = esp[:-16]
            if not cmp(icv(body), esp[-16:]):
                raise EspError("auth", "ICV mismatch")
            return _strip(d_update(esp[8:-16])[16:])

        return Suite(seal, open_, 16)
    raise ValueError(f"cipher {cipher!r}: expected {GCM} or {CBC}")


def _strip(pt: bytes) -> tuple[bytes, int]:
    """Remove padding/trailer and check the inner header against what is left (000 page)."""
    n = len(pt)
    if n < 2:
        raise EspError("malformed", "no ESP trailer")
    padlen, nh = pt[-2], pt[-1]
    end = n - 2 - padlen
    if end < 20:
        raise EspError("malformed", "padding longer than payload")
    inner = pt[:end]
    ver = inner[0] >> 4
    if nh == 4:
        if ver != 4 or (inner[2] << 8 | inner[3]) != end:
            raise EspError("malformed", "next header 4 but not a whole IPv4 packet")
    elif nh == 41:
        if ver != 6 or end < 40 or (inner[4] << 8 | inner[5]) + 40 != end:
            raise EspError("malformed", "next header 41 but not a whole IPv6 packet")
    else:
        raise EspError("malformed", f"next header {nh} is not IPv4/IPv6")
    return inner, nh


class ReplayWindow:
    """RFC 4303 3.4.3 sliding window (no ESN): check before ICV, update after it."""

    __slots__ = ("size", "top", "bitmap", "mask")

    def __init__(self, size: int = 32) -> None:
        if not 1 <= size <= 1024:
            raise ValueError(f"replay_window {size}: expected 1..1024")
        self.size = size
        self.top = 0
        self.bitmap = 0
        self.mask = (1 << size) - 1

    def check(self, seq: int) -> bool:
        """True if `seq` may be accepted (not yet seen, not left of the window)."""
        if seq == 0:
            return False
        if seq > self.top:
            return True
        diff = self.top - seq
        if diff >= self.size:
            return False
        return not (self.bitmap >> diff) & 1

    def update(self, seq: int) -> None:
        if seq > self.top:
            shift = seq - self.top
            self.bitmap = ((self.bitmap << shift) | 1) & self.mask if shift < self.size else 1
            self.top = seq
        else:
            self.bitmap |= 1 << (self.top - seq)
