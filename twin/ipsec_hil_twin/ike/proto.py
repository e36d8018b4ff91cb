"""The twin's own IKE-like wire protocol: JSON messages over UDP port 500.

NOT IKEv2 and does not interoperate with real IKE peers.  It keeps IKEv2's shape so the
outcomes match strongSwan's:

- IKE_SA_INIT (message 0): proposals, an X25519 public key and a nonce each way.
  SKEYSEED = HKDF-SHA256-extract(salt = Ni | Nr, X25519 shared secret); SK_d, SK_ai,
  SK_ar are expanded from it with the two IKE SPIs.
- IKE_AUTH (message 1): identities, the PSK proof AUTH = HMAC-SHA256(HMAC-SHA256(psk,
  "Key Pad for IKEv2"), <own INIT message> | <peer nonce> | <own identity>) -- the key is
  never sent -- and the first child (ESP proposals, selectors, the sender's inbound SPI).
- CREATE_CHILD_SA: further children and rekeys, each with fresh nonces and a fresh X25519
  exchange; INFORMATIONAL: deletes.
- Every message after IKE_SA_INIT carries an HMAC-SHA256 over its body with SK_ai/SK_ar
  (integrity only: nothing secret travels, keys are derived on both ends).
- Child keys: HKDF-SHA256(ikm = SK_d [| fresh shared secret], salt = Ni | Nr,
  info = "twin-ike child" | SPI_i | SPI_r): initiator->responder keys first, then
  responder->initiator, as IKEv2's KEYMAT.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ipsec_hil_twin.errors import IkeError

MAGIC = "twin-ike/1"
KEY_PAD = b"Key Pad for IKEv2"

KEY_LENGTHS = {"aes-gcm-16": (36, 0), "aes-cbc-hmac-sha256": (32, 32)}
"""engine cipher -> (enc_key bytes, auth_key bytes) per direction (DESIGN.md SA)."""


class ProtoError(IkeError, ValueError):
    """A datagram that is not a valid twin-ike message (dropped, as IKE drops garbage)."""


def encode(msg: dict) -> bytes:
    return json.dumps({"magic": MAGIC, **msg}, separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes) -> dict:
    try:
        msg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtoError(f"not JSON: {exc}") from None
    if not isinstance(msg, dict) or msg.get("magic") != MAGIC:
        raise ProtoError("not a twin-ike message")
    for k in ("exchange", "spi_i", "spi_r", "mid", "response"):
        if k not in msg:
            raise ProtoError(f"missing field {k}")
    return msg


def body_for_mac(msg: dict) -> bytes:
    m = {k: v for k, v in msg.items() if k != "mac"}
    return encode(m)


def sign(msg: dict, key: bytes) -> dict:
    msg = dict(msg)
    msg.pop("mac", None)
    msg["mac"] = hmac.new(key, body_for_mac(msg), hashlib.sha256).hexdigest()
    return msg


def verify(msg: dict, key: bytes) -> bool:
    mac = msg.get("mac")
    if not isinstance(mac, str):
        return False
    want = hmac.new(key, body_for_mac(msg), hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, want)


@dataclass
class KeyExchange:
    """One X25519 key pair (fresh per IKE_SA_INIT and per CREATE_CHILD_SA)."""

    private: X25519PrivateKey

    @classmethod
    def new(cls) -> "KeyExchange":
        return cls(X25519PrivateKey.generate())

    def public_hex(self) -> str:
        return self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()

    def shared(self, peer_hex: str) -> bytes:
        try:
            return self.private.exchange(X25519PublicKey.from_public_bytes(bytes.fromhex(peer_hex)))
        except ValueError as exc:
            raise ProtoError(f"bad key exchange data: {exc}") from None


def nonce() -> str:
    return os.urandom(32).hex()


@dataclass
class IkeKeys:
    sk_d: bytes
    sk_ai: bytes
    sk_ar: bytes


def ike_keys(shared: bytes, ni: str, nr: str, spi_i: str, spi_r: str) -> IkeKeys:
    km = HKDF(algorithm=hashes.SHA256(), length=96, salt=bytes.fromhex(ni) + bytes.fromhex(nr),
              info=b"twin-ike sa" + bytes.fromhex(spi_i) + bytes.fromhex(spi_r)).derive(shared)
    return IkeKeys(km[:32], km[32:64], km[64:96])


def psk_auth(psk: bytes, own_init_msg: bytes, peer_nonce: str, own_id: str) -> str:
    """The PSK proof of one side; the peer recomputes it with its copy of the key."""
    k = hmac.new(psk, KEY_PAD, hashlib.sha256).digest()
    return hmac.new(k, own_init_msg + bytes.fromhex(peer_nonce) + own_id.encode(),
                    hashlib.sha256).hexdigest()


@dataclass
class ChildKeys:
    """Keys of one child: i->r (the initiator's outbound) and r->i."""

    enc_ir: bytes
    auth_ir: bytes | None
    enc_ri: bytes
    auth_ri: bytes | None


def child_keys(cipher: str, sk_d: bytes, ni: str, nr: str, spi_i: int, spi_r: int,
               fresh_shared: bytes = b"") -> ChildKeys:
    enc_len, auth_len = KEY_LENGTHS[cipher]
    total = 2 * (enc_len + auth_len)
    info = b"twin-ike child" + spi_i.to_bytes(4, "big") + spi_r.to_bytes(4, "big")
    km = HKDF(algorithm=hashes.SHA256(), length=total,
              salt=bytes.fromhex(ni) + bytes.fromhex(nr), info=info).derive(sk_d + fresh_shared)
    p = 0

    def take(n: int) -> bytes:
        nonlocal p
        out = km[p:p + n]
        p += n
        return out
    enc_ir = take(enc_len)
    auth_ir = take(auth_len) if auth_len else None
    enc_ri = take(enc_len)
    auth_ri = take(auth_len) if auth_len else None
    return ChildKeys(enc_ir, auth_ir, enc_ri, auth_ri)

