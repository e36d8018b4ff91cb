"""strongSwan proposal strings -> algorithm combinations -> the engine's cipher names.

Why: swanctl.conf names algorithms as `aes256gcm16-prfsha256-x25519` (IKE) or
`aes256gcm16` / `aes256-sha256` (ESP); the negotiation compares them as strongSwan does
(each proposal expands to every combination of its algorithms; the responder's order wins)
and the engine only knows `aes-gcm-16` and `aes-cbc-hmac-sha256`.  ESP combinations the
engine cannot install are skipped, as strongSwan skips algorithms no plugin provides.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ipsec_hil_twin.errors import IkeError

ENCR = {
    "aes128": ("AES_CBC", 128), "aes192": ("AES_CBC", 192), "aes256": ("AES_CBC", 256),
    "aes": ("AES_CBC", 128),
    "aes128gcm16": ("AES_GCM_16", 128), "aes192gcm16": ("AES_GCM_16", 192),
    "aes256gcm16": ("AES_GCM_16", 256), "aes128gcm": ("AES_GCM_16", 128),
    "aes256gcm": ("AES_GCM_16", 256), "aes128gcm12": ("AES_GCM_12", 128),
    "aes256gcm12": ("AES_GCM_12", 256), "aes128gcm8": ("AES_GCM_8", 128),
    "aes256gcm8": ("AES_GCM_8", 256), "chacha20poly1305": ("CHACHA20_POLY1305", 256),
    "3des": ("3DES_CBC", 0), "aes128ctr": ("AES_CTR", 128), "aes256ctr": ("AES_CTR", 256),
}
AEAD = {"AES_GCM_16", "AES_GCM_12", "AES_GCM_8", "CHACHA20_POLY1305"}
INTEG = {
    "sha1": "HMAC_SHA1_96", "sha": "HMAC_SHA1_96", "sha256": "HMAC_SHA2_256_128",
    "sha2_256": "HMAC_SHA2_256_128", "sha384": "HMAC_SHA2_384_192",
    "sha512": "HMAC_SHA2_512_256", "md5": "HMAC_MD5_96", "aesxcbc": "AES_XCBC_96",
    "sha256_96": "HMAC_SHA2_256_96",
}
PRF = {
    "prfsha1": "PRF_HMAC_SHA1", "prfsha256": "PRF_HMAC_SHA2_256",
    "prfsha384": "PRF_HMAC_SHA2_384", "prfsha512": "PRF_HMAC_SHA2_512",
    "prfmd5": "PRF_HMAC_MD5", "prfaesxcbc": "PRF_AES128_XCBC",
}
INTEG_TO_PRF = {
    "HMAC_SHA1_96": "PRF_HMAC_SHA1", "HMAC_SHA2_256_128": "PRF_HMAC_SHA2_256",
    "HMAC_SHA2_384_192": "PRF_HMAC_SHA2_384", "HMAC_SHA2_512_256": "PRF_HMAC_SHA2_512",
    "HMAC_MD5_96": "PRF_HMAC_MD5", "AES_XCBC_96": "PRF_AES128_XCBC",
    "HMAC_SHA2_256_96": "PRF_HMAC_SHA2_256",
}
DH = {
    "modp1024": "MODP_1024", "modp1536": "MODP_1536", "modp2048": "MODP_2048",
    "modp3072": "MODP_3072", "modp4096": "MODP_4096", "modp6144": "MODP_6144",
    "modp8192": "MODP_8192", "ecp256": "ECP_256", "ecp384": "ECP_384", "ecp521": "ECP_521",
    "x25519": "CURVE_25519", "curve25519": "CURVE_25519", "x448": "CURVE_448",
    "curve448": "CURVE_448",
}
ESN = {"esn": "EXT_SEQ", "noesn": "NO_EXT_SEQ"}

DEFAULT_IKE = ("aes128-aes192-aes256-sha256-sha384-sha512-prfsha256-prfsha384-prfsha512-"
               "x25519-ecp256-modp3072,"
               "aes128gcm16-aes192gcm16-aes256gcm16-prfsha256-prfsha384-prfsha512-"
               "x25519-ecp256-modp3072")
DEFAULT_ESP = "aes128gcm16-aes256gcm16,aes128-aes256-sha256-sha384-sha512"

ENGINE_CIPHERS = {
    ("AES_GCM_16", 256, None): "aes-gcm-16",
    ("AES_CBC", 256, "HMAC_SHA2_256_128"): "aes-cbc-hmac-sha256",
}
"""(encryption, key size, integrity) -> the engine's cipher name (DESIGN.md)."""


class ProposalError(IkeError, ValueError):
    """A proposal string strongSwan would reject ("invalid value for: proposals")."""


@dataclass(frozen=True)
class Combo:
    """One concrete algorithm combination (what strongSwan prints as selected)."""

    proto: str                  # "IKE" | "ESP"
    encr: str
    keysize: int
    integ: str | None
    prf: str | None
    dh: str | None
    esn: str | None = None

    def selected(self) -> str:
        """`IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519`, `ESP:AES_GCM_16_256/NO_EXT_SEQ`."""
        parts = [f"{self.encr}_{self.keysize}" if self.keysize else self.encr]
        if self.integ:
            parts.append(self.integ)
        if self.prf:
            parts.append(self.prf)
        if self.dh:
            parts.append(self.dh)
        if self.esn:
            parts.append(self.esn)
        return f"{self.proto}:" + "/".join(parts)

    def listing(self) -> str:
        """`--list-sas` spelling: `AES_GCM_16-256/PRF_HMAC_SHA2_256/CURVE_25519`."""
        parts = [f"{self.encr}-{self.keysize}" if self.keysize else self.encr]
        if self.integ:
            parts.append(self.integ)
        if self.proto == "ESP" and self.esn == "EXT_SEQ":
            parts.append("ESN")
        if self.proto == "IKE":
            if self.prf:
                parts.append(self.prf)
            if self.dh:
                parts.append(self.dh)
        return "/".join(parts)

    def engine_cipher(self) -> str | None:
        """The engine's cipher for an ESP combination, None if the engine lacks it."""
        return ENGINE_CIPHERS.get((self.encr, self.keysize, self.integ))

    def key(self) -> tuple:
        """What two ends compare (ESP ignores DH: PFS groups are not negotiated here; ESN
        is a transform of its own, RFC 7296 3.3.2, so `-esn` only matches `-esn`)."""
        if self.proto == "ESP":
            return (self.encr, self.keysize, self.integ, self.esn)
        return (self.encr, self.keysize, self.integ, self.prf, self.dh)

    def to_json(self) -> dict:
        return {"proto": self.proto, "encr": self.encr, "keysize": self.keysize,
                "integ": self.integ, "prf": self.prf, "dh": self.dh, "esn": self.esn}

    @classmethod
    def from_json(cls, d: dict) -> "Combo":
        return cls(d["proto"], d["encr"], int(d["keysize"]), d.get("integ"), d.get("prf"),
                   d.get("dh"), d.get("esn"))


def _one(proto: str, text: str) -> list[Combo]:
    encrs, integs, prfs, dhs, esns = [], [], [], [], []
    for tok in text.strip().lower().split("-"):
        if tok in ENCR:
            encrs.append(ENCR[tok])
        elif tok in INTEG:
            integs.append(INTEG[tok])
        elif tok in PRF and proto == "IKE":
            prfs.append(PRF[tok])
        elif tok in DH:
            dhs.append(DH[tok])
        elif tok in ESN and proto == "ESP":
            esns.append(ESN[tok])
        else:
            raise ProposalError(f"unknown algorithm {tok!r} in proposal {text!r}")
    if not encrs:
        raise ProposalError(f"proposal {text!r} names no encryption algorithm")
    aead = [e for e in encrs if e[0] in AEAD]
    if aead and len(aead) != len(encrs):
        raise ProposalError(f"proposal {text!r} mixes AEAD and non-AEAD algorithms")
    if aead and integs:
        raise ProposalError(f"proposal {text!r} adds integrity to an AEAD algorithm")
    if not aead and not integs:
        raise ProposalError(f"proposal {text!r} names no integrity algorithm")
    if proto == "IKE":
        if not prfs:
            prfs = [INTEG_TO_PRF[i] for i in integs] if integs else []
            if not prfs:
                raise ProposalError(f"proposal {text!r} names no PRF")
        if not dhs:
            raise ProposalError(f"proposal {text!r} names no key exchange method")
        combos = [Combo("IKE", e, k, i, p, d)
                  for (e, k), i, p, d in itertools.product(encrs, integs or [None], prfs, dhs)]
    else:
        combos = [Combo("ESP", e, k, i, None, d, s)
                  for (e, k), i, d, s in itertools.product(encrs, integs or [None], dhs or [None],
                                                            esns or ["NO_EXT_SEQ"])]
    return combos


def parse_proposals(proto: str, value: str) -> list[Combo]:
    """Expand `a,b` (each `alg-alg-...`) into combos; `default` expands strongSwan's default."""
    if proto not in ("IKE", "ESP"):
        raise ValueError(proto)
    out: list[Combo] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            raise ProposalError(f"empty proposal in {value!r}")
        if part.lower() == "default":
            out.extend(parse_proposals(proto, DEFAULT_IKE if proto == "IKE" else DEFAULT_ESP))
        else:
            out.extend(_one(proto, part))
    seen: set[Combo] = set()
    uniq = []
    for c in out:
        if c not in seen:
            seen.add(c)
            uniq.append(c)
    return uniq


def installable(combos: list[Combo]) -> list[Combo]:
    """ESP combos the engine can install (others are skipped like missing plugins)."""
    return [c for c in combos if c.engine_cipher() is not None]


def select(responder: list[Combo], initiator: list[Combo]) -> Combo | None:
    """strongSwan's choice: the responder's first combination the initiator also offered."""
    offered = {c.key(): c for c in initiator}
    for c in responder:
        if c.key() in offered:
            return c
    return None
