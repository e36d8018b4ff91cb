"""ESP frames for one association, crafted by the suite with scapy's own ESP.

Why scapy and not the virtual lab's engine: the frames test the appliance's decryption,
so they must come from an implementation that is not the one under test (twin/ is never
imported by plugin/).  The association is the one `setkey -D` shows on the appliance
under test (`SadEntry`: spi, outer addresses, keys, cipher); the keys stay inside the
`Crafter` (not in its repr, never in a frame description), and what leaves it is
ciphertext.

Each frame carries an inner UDP datagram whose payload starts with a tag
(MAGIC, the run's token, the frame's index) so the far LAN's receiver can say which
frames were delivered, and how often, without trusting the appliance's counters.
"""
from __future__ import annotations

import ipaddress
import secrets
import struct
from dataclasses import dataclass, field
from typing import Literal, Protocol

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation, _ESPPlain

from plugin.lab.errors import LabError

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
    """What the crafter needs of an association (plugin.lab.parsers.setkey.SadEntry has it)."""

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
        frames (issue 15). The ESP seal, the part under test, stays scapy's. The
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
        hdr = IP(src=sa.src, dst=sa.dst) if self.outer == "ipv4" else IPv6(src=sa.src, dst=sa.dst)
        key = bytes.fromhex(sa.enc_key)
        if sa.cipher == "aes-gcm-16":
            self._sa = SecurityAssociation(ESP, spi=sa.spi, crypt_algo="AES-GCM", crypt_key=key,
                                           tunnel_header=hdr, esn_en=esn)
        else:
            if not sa.auth_key:
                raise InjectError(f"SA spi={sa.spi:#x}: aes-cbc-hmac-sha256 without an authentication key")
            self._sa = SecurityAssociation(ESP, spi=sa.spi, crypt_algo="AES-CBC", crypt_key=key,
                                           auth_algo="SHA2-256-128", auth_key=bytes.fromhex(sa.auth_key),
                                           tunnel_header=hdr, esn_en=esn)

    def __repr__(self) -> str:  # no key material, ever
        return f"Crafter(spi={self.spi:#x}, cipher={self.cipher}, outer={self.outer}, esn={self.esn})"

    def seal(self, inner: bytes, seq: int, pad_delta: int = 0) -> bytes:
        """The ESP payload for `inner` with sequence number `seq` (64-bit with ESN: the
        high half goes into the ICV only).  `pad_delta` misstates the pad length."""
        if seq > SEQ_LOW and not self.esn:
            raise InjectError(f"sequence number {seq} needs ESN (SA spi={self.spi:#x} has none)")
        sa = self._sa
        esp = _ESPPlain(spi=self.spi, seq=seq & SEQ_LOW, iv=sa.crypt_algo.generate_iv(), data=inner,
                        nh=4 if inner[0] >> 4 == 4 else 41)
        esp = sa.crypt_algo.pad(esp)
        if pad_delta:
            esp.padlen += pad_delta
        esp = sa.crypt_algo.encrypt(sa, esp, sa.crypt_key, sa.crypt_icv_size, esn_en=self.esn, esn=seq >> 32)
        sa.auth_algo.sign(esp, sa.auth_key, esn_en=self.esn, esn=seq >> 32)
        return raw(esp)

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
