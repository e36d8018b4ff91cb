"""ESP frames for one association, sealed by the suite (RFC 4303, RFC 4106).

Why the suite's own sealing and not the virtual lab's engine: the frames test the
appliance's decryption, so they must come from an implementation that is not the one
under test (twin/ipsec_hil_twin/ is never imported by plugin/ipsec_hil/). The sealing is a few lines over
`cryptography`'s AES-GCM, AES-CBC and HMAC-SHA-256, checked byte for byte against scapy's
ESP (``SecurityAssociation``, the same IV) by tests/wire/test_esp_seal.py for both
ciphers, with and without ESN, every padding length and a misstated pad length. It was
scapy's own until issue 15 measured it: ~340 us of packet objects per frame, 8 s of an
every-size sweep's ~9,000 frames; this takes ~15 us.
The association is the one `setkey -D` shows on the appliance under test (`SadEntry`:
spi, outer addresses, keys, cipher); the keys stay inside the `Crafter` (not in its repr,
never in a frame description), and what leaves it is ciphertext.

Each frame carries an inner UDP datagram whose payload starts with a tag
(MAGIC, the run's token, the frame's index) so the far LAN's receiver can say which
frames were delivered, and how often, without trusting the appliance's counters.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import struct
from dataclasses import dataclass, field
from typing import Literal, Protocol

from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ipsec_hil.lab.errors import LabError

MAGIC = b"HILW"
TAG_LEN = 12  # MAGIC + token (4) + index (4)
END_INDEX = 0xFFFFFFFF
SEQ_LOW = 0xFFFFFFFF
IP_HEADER = {"ipv4": 20, "ipv6": 40}
UDP_HEADER = 8
VARIANTS = ("icv_bit", "ciphertext_bit", "unknown_spi", "truncated", "bad_pad_length")
Variant = Literal["icv_bit", "ciphertext_bit", "unknown_spi", "truncated", "bad_pad_length"]


class InjectError(LabError):
    """A frame that cannot be crafted as asked, or an injection that did not run."""


class SaKeys(Protocol):
    """What the crafter needs of an association (ipsec_hil.lab.parsers.setkey.SadEntry has it)."""

    spi: int
    src: str
    dst: str
    cipher: str | None
    enc_key: str | None
    auth_key: str | None


def _checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def min_inner(family: str) -> int:
    """The smallest inner packet that carries a tag: IP + UDP headers + tag."""
    return IP_HEADER[family] + UDP_HEADER + TAG_LEN


@dataclass(frozen=True)
class Inner:
    """The inner packets' addresses: from the peer's LAN side to a bench address behind
    the appliance under test, UDP to `port`."""

    family: Literal["ipv4", "ipv6"]
    src: str
    dst: str
    port: int = 5555
    token: bytes = field(default_factory=lambda: secrets.token_bytes(4))

    def packet(self, index: int, size: int) -> bytes:
        """An inner packet of exactly `size` bytes tagged with `index`: the bytes scapy's
        ``IP(ttl=64)/UDP/payload`` (``IPv6(hlim=64)``) builds, packed directly.

        Why not scapy here: building the packet through scapy cost ~370 us, two thirds of
        a frame's crafting, and an every-size sweep on a 9,000-byte path is ~8,900
        frames (issue 15); the ESP seal went the same way (:meth:`Crafter.seal`). The
        payload is the tag and zeros, and zeros add nothing to a ones'-complement sum, so
        the checksums cover the headers and the tag only; tests/wire compares the bytes
        with scapy's for both families."""
        room = size - min_inner(self.family)
        if room < 0:
            raise InjectError(f"inner size {size}: the smallest tagged {self.family} packet is {min_inner(self.family)}")
        tag = MAGIC + self.token + struct.pack("!I", index)
        udp_len = UDP_HEADER + TAG_LEN + room
        src, dst = ipaddress.ip_address(self.src).packed, ipaddress.ip_address(self.dst).packed
        if self.family == "ipv4":
            pseudo = src + dst + struct.pack("!BBH", 0, 17, udp_len)
        else:
            pseudo = src + dst + struct.pack("!IxxxB", udp_len, 17)
        udp_sum = _checksum(pseudo + struct.pack("!HHH", self.port, self.port, udp_len) + tag) or 0xFFFF
        udp = struct.pack("!HHHH", self.port, self.port, udp_len, udp_sum) + tag + bytes(room)
        if self.family == "ipv4":
            head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 1, 0, 64, 17, 0, src, dst)
            head = head[:10] + struct.pack("!H", _checksum(head)) + head[12:]
        else:
            head = struct.pack("!IHBB16s16s", 6 << 28, udp_len, 17, 64, src, dst)
        return head + udp


@dataclass(frozen=True)
class Frame:
    """One ESP payload (SPI .. ICV; the sender's kernel adds the outer header) and what
    it is: the tag index, the sequence number sealed, the variant (None: genuine)."""

    index: int
    seq: int
    inner_len: int
    variant: str | None
    esp: bytes = field(repr=False)

    @property
    def esp_len(self) -> int:
        return len(self.esp)


class Crafter:
    """Seals inner packets for one association; `esn` when the child negotiated it."""

    def __init__(self, sa: SaKeys, esn: bool = False) -> None:
        if sa.cipher not in ("aes-gcm-16", "aes-cbc-hmac-sha256") or not sa.enc_key:
            raise InjectError(f"SA spi={sa.spi:#x}: cannot craft for cipher {sa.cipher!r} (keys shown by setkey -D needed)")
        self.spi, self.cipher, self.esn = sa.spi, sa.cipher, esn
        self.outer = "ipv6" if ":" in sa.dst else "ipv4"
        key = bytes.fromhex(sa.enc_key)
        if sa.cipher == "aes-gcm-16":
            # RFC 4106: the key material is the AES key and a 4-byte salt, the nonce salt + IV
            if len(key) not in (20, 28, 36):
                raise InjectError(f"SA spi={sa.spi:#x}: aes-gcm-16 key material of {len(key)} bytes, expected an AES "
                                  "key of 16, 24 or 32 bytes and a 4-byte salt")
            self._gcm, self._salt = AESGCM(key[:-4]), key[-4:]
            self._iv_size, self._align = 8, 4  # a stream mode: the payload only aligned to 32 bits
        else:
            if not sa.auth_key:
                raise InjectError(f"SA spi={sa.spi:#x}: aes-cbc-hmac-sha256 without an authentication key")
            if len(key) not in (16, 24, 32):
                raise InjectError(f"SA spi={sa.spi:#x}: aes-cbc key of {len(key)} bytes, expected 16, 24 or 32")
            self._cbc_key, self._auth_key = key, bytes.fromhex(sa.auth_key)
            self._iv_size, self._align = 16, 16  # whole AES blocks

    def __repr__(self) -> str:  # no key material, ever
        return f"Crafter(spi={self.spi:#x}, cipher={self.cipher}, outer={self.outer}, esn={self.esn})"

    def seal(self, inner: bytes, seq: int, pad_delta: int = 0, iv: bytes | None = None) -> bytes:
        """The ESP payload (SPI .. ICV) for `inner` with sequence number `seq` (64-bit with
        ESN: the high half goes into the ICV only, RFC 4303 2.2.1 / RFC 4106 5).
        `pad_delta` misstates the pad length field (the padding itself stays right);
        `iv` is random unless given (tests compare with scapy under the same IV)."""
        if seq > SEQ_LOW and not self.esn:
            raise InjectError(f"sequence number {seq} needs ESN (SA spi={self.spi:#x} has none)")
        iv = os.urandom(self._iv_size) if iv is None else iv
        if len(iv) != self._iv_size:
            raise InjectError(f"IV of {len(iv)} bytes for {self.cipher}: expected {self._iv_size}")
        high, low = seq >> 32, seq & SEQ_LOW
        padlen = -(len(inner) + 2) % self._align
        if not 0 <= padlen + pad_delta <= 0xFF:
            raise InjectError(f"pad length {padlen} + {pad_delta} does not fit its byte")
        # RFC 4303 2.4: the padding bytes are 1, 2, 3, ...; then pad length and next header
        plain = inner + bytes(range(1, padlen + 1)) + bytes((padlen + pad_delta, 4 if inner[0] >> 4 == 4 else 41))
        head = struct.pack("!II", self.spi, low)
        if self.cipher == "aes-gcm-16":
            aad = struct.pack("!III", self.spi, high, low) if self.esn else head
            return head + iv + self._gcm.encrypt(self._salt + iv, plain, aad)
        enc = Cipher(algorithms.AES(self._cbc_key), modes.CBC(iv)).encryptor()
        esp = head + iv + enc.update(plain) + enc.finalize()
        mac = hmac.HMAC(self._auth_key, hashes.SHA256())
        mac.update(esp)
        if self.esn:
            mac.update(struct.pack("!I", high))
        return esp + mac.finalize()[:16]  # HMAC-SHA-256-128

    def frame(self, inner: Inner, index: int, seq: int, size: int, variant: Variant | None = None) -> Frame:
        """A tagged frame; `variant` makes it one of the malformed kinds (VARIANTS)."""
        pkt = inner.packet(index, size)
        if variant == "bad_pad_length":
            if self.cipher != "aes-cbc-hmac-sha256" or (-(size + 2)) % 16 == 0:
                raise InjectError("bad_pad_length needs a CBC frame with padding (inner size + 2 not a multiple of 16)")
            esp = self.seal(pkt, seq, pad_delta=1)
        else:
            esp = self.seal(pkt, seq)
        if variant == "icv_bit":
            esp = esp[:-1] + bytes([esp[-1] ^ 0x01])
        elif variant == "ciphertext_bit":
            at = 8 + (8 if self.cipher == "aes-gcm-16" else 16)  # first byte after the IV
            esp = esp[:at] + bytes([esp[at] ^ 0x80]) + esp[at + 1:]
        elif variant == "unknown_spi":
            esp = struct.pack("!I", self.spi ^ 0x00A5A5A5) + esp[4:]
        elif variant == "truncated":
            esp = esp[:-5]  # no longer header + IV + whole blocks + ICV
        elif variant not in (None, "bad_pad_length"):
            raise InjectError(f"variant {variant!r}: expected one of {', '.join(VARIANTS)}")
        return Frame(index=index, seq=seq, inner_len=size, variant=variant, esp=esp)

    def frames(self, inner: Inner, seqs: list[int], size: int = 100, first_index: int = 0) -> list[Frame]:
        """Genuine frames for a list of sequence numbers (duplicates allowed: a replay)."""
        return [self.frame(inner, first_index + i, s, size) for i, s in enumerate(seqs)]

    def sweep(self, inner: Inner, sizes: range | list[int], first_seq: int, first_index: int = 0) -> list[Frame]:
        """One genuine frame per inner size, consecutive sequence numbers."""
        return [self.frame(inner, first_index + i, first_seq + i, n) for i, n in enumerate(sizes)]

    def end(self, inner: Inner, seq: int) -> Frame:
        """The closing frame the receiver waits for (genuine, the tag END_INDEX)."""
        return self.frame(inner, END_INDEX, seq, min_inner(inner.family))
