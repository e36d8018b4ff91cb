"""ESP arithmetic: the only place the suite's packet-size numbers come from.

Why formulas and not literals: the pages' numbers (1,446, 1,383, ...) are consequences of
RFC 4303 framing and of FreeBSD's PMTU gate. A test that takes its expectation from here
moves with the kernel the day the kernel changes (e.g. the worst-case block size).

ESP tunnel mode (RFC 4303), for an inner packet of ``L`` bytes::

    outer = outer IP header + SPI 4 + sequence 4 + IV + pad(L + 2, a) + ICV

where ``pad(x, a)`` rounds ``x`` up to a multiple of the cipher's alignment ``a`` and the
2 bytes are the trailer's pad length and next header.

FreeBSD's forwarded-packet gate (``ipsec6_check_pmtu``) uses the policy's worst case with no
association in hand: ``8 + EALG_MAX_BLOCK_LEN (64) + 9 + 16`` = 97, plus the outer header
(20 / 40): 117 (IPv4 outer) / 137 (IPv6 outer). A forwarded inner IPv6 packet longer than
``path_mtu - that`` gets ICMPv6 Packet Too Big with that MTU. The IPv4 twin
(``ipsec4_check_pmtu``) only acts when ``net.inet.ipsec.dfbit`` asks it to; the
appliance's own packets skip the gate and are limited by the exact arithmetic only.

NAT traversal (``encap``, RFC 3948): the ESP packet rides in a UDP datagram (port 4500),
8 more bytes per packet, for an IPv4 outer only (FreeBSD's ``udp_ipsec_output`` answers
EAFNOSUPPORT for IPv6). The own limit shrinks by those 8 bytes (1,438 for AES-GCM over
IPv4 on 1,500); the forwarded gate does not move: ``ipsec_hdrsiz_internal`` and
``esp_hdrsiz`` add nothing for UDP ("XXX: for NAT-T we need to cosider UDP header size").
"""

from __future__ import annotations

from dataclasses import dataclass

#: Cipher names used everywhere (topology files, fixtures, the twin).
CIPHERS = ("aes-gcm-16", "aes-cbc-hmac-sha256")
#: Address families.
FAMILIES = ("ipv4", "ipv6")

IP_HEADER = {"ipv4": 20, "ipv6": 40}
#: ICMP echo header (8) plus IP header: ping data = inner length - this.
PING_OVERHEAD = {"ipv4": 20 + 8, "ipv6": 40 + 8}

ESP_HEADER = 8  # SPI 4 + sequence number 4
ESP_TRAILER = 2  # pad length 1 + next header 1
UDP_ENCAP_HEADER = 8  # RFC 3948 2.1: sizeof(struct udphdr) before the SPI

#: FreeBSD's EALG_MAX_BLOCK_LEN since ChaCha20 was added (16 in older trees).
KERNEL_WORST_CASE_BLOCK = 64
#: The rest of FreeBSD's esp_hdrsiz() worst case: sizeof(newesp) 8 + 9 + 16 (besides the block).
_KERNEL_WORST_CASE_FIXED = 8 + 9 + 16

#: The smallest MTU IPv6 allows (RFC 8200 5).
IPV6_MIN_MTU = 1280


@dataclass(frozen=True)
class EspSuite:
    """Framing parameters of one ESP cipher suite."""

    name: str
    iv: int  # bytes of IV on the wire
    icv: int  # bytes of integrity check value
    align: int  # padding alignment of (payload + trailer)


SUITES: dict[str, EspSuite] = {
    # RFC 4106: 8-byte explicit IV, 16-byte ICV, 4-byte alignment.
    "aes-gcm-16": EspSuite("aes-gcm-16", iv=8, icv=16, align=4),
    # RFC 3602 + RFC 4868: 16-byte IV, block 16, HMAC-SHA-256 truncated to 128 bits.
    "aes-cbc-hmac-sha256": EspSuite("aes-cbc-hmac-sha256", iv=16, icv=16, align=16),
}


def suite(cipher: str) -> EspSuite:
    """The framing of ``cipher``; ValueError naming the known ones otherwise."""
    try:
        return SUITES[cipher]
    except KeyError:
        raise ValueError(f"unknown cipher {cipher!r}; expected one of {', '.join(CIPHERS)}") from None


def _family(family: str) -> int:
    try:
        return IP_HEADER[family]
    except KeyError:
        raise ValueError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}") from None


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


def _check_len(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")


def esp_payload_len(cipher: str, inner_len: int) -> int:
    """Bytes of the ESP packet (SPI to ICV, no outer IP header) carrying ``inner_len``.

    148 -> 184 (GCM) / 200 (CBC+SHA-256), as strongSwan's alg scenarios assert.
    """
    _check_len("inner_len", inner_len)
    s = suite(cipher)
    return ESP_HEADER + s.iv + _round_up(inner_len + ESP_TRAILER, s.align) + s.icv


def encap_header(outer: str, encap: bool) -> int:
    """The UDP header NAT-T adds (0 without ``encap``); ValueError for an IPv6 outer, which
    FreeBSD cannot encapsulate (sys/netipsec/udpencap.c udp_ipsec_output: EAFNOSUPPORT)."""
    if not encap:
        return 0
    if _family(outer) != IP_HEADER["ipv4"]:
        raise ValueError("UDP encapsulation (NAT-T) needs an IPv4 outer: FreeBSD's udp_ipsec_output "
                         f"refuses {outer}")
    return UDP_ENCAP_HEADER


def outer_packet_len(cipher: str, outer: str, inner_len: int, *, encap: bool = False) -> int:
    """Bytes of the whole outer packet (outer IP header [+ UDP] + ESP) carrying ``inner_len``."""
    return _family(outer) + encap_header(outer, encap) + esp_payload_len(cipher, inner_len)


def esp_overhead(cipher: str, outer: str, inner_len: int, *, encap: bool = False) -> int:
    """Bytes the tunnel adds to an ``inner_len`` packet (outer header, UDP, ESP framing, padding)."""
    return outer_packet_len(cipher, outer, inner_len, encap=encap) - inner_len


def max_inner(cipher: str, outer: str, path_mtu: int, *, encap: bool = False) -> int:
    """The largest inner packet whose ESP packet fits ``path_mtu`` exactly (no fragments).

    1,446 (GCM, IPv4 outer, 1,500); 1,426 (GCM, IPv6); 1,438 / 1,406 (CBC+SHA-256);
    with ``encap`` (UDP 4500) over IPv4: 1,438 (GCM, 8 less) / 1,422 (CBC+SHA-256: 16-byte alignment).
    This is the limit for the appliance's own packets (they skip the kernel's gate).
    """
    _check_len("path_mtu", path_mtu)
    s = suite(cipher)
    room = path_mtu - _family(outer) - encap_header(outer, encap) - ESP_HEADER - s.iv - s.icv
    largest = (room // s.align) * s.align - ESP_TRAILER
    if largest < 0:
        raise ValueError(f"path MTU {path_mtu} cannot carry any {cipher} packet over {outer}")
    return largest


def kernel_worst_case_header(outer: str, block: int = KERNEL_WORST_CASE_BLOCK) -> int:
    """FreeBSD's ``ipsec_hdrsiz_internal()`` for one ESP tunnel transform: 117 / 137.

    ``block`` is EALG_MAX_BLOCK_LEN (64 today, 16 before ChaCha20).
    """
    _check_len("block", block)
    return _KERNEL_WORST_CASE_FIXED + block + _family(outer)


def forwarded_ipv6_limit(path_mtu: int, outer: str, block: int = KERNEL_WORST_CASE_BLOCK) -> int:
    """Largest forwarded inner IPv6 packet the kernel lets into the tunnel.

    Also the MTU the ICMPv6 Packet Too Big carries for a larger one: 1,383 (IPv4 outer,
    1,500) and 1,363 (IPv6 outer).
    """
    _check_len("path_mtu", path_mtu)
    return path_mtu - kernel_worst_case_header(outer, block)


def ipv4_gate_applies(dfbit: int, df_set: bool) -> bool:
    """Whether ``ipsec4_check_pmtu`` checks a forwarded IPv4 packet.

    ``net.inet.ipsec.dfbit``: 0 (default) never, 1 always, 2 only when the inner DF is set.
    """
    if dfbit not in (0, 1, 2):
        raise ValueError(f"net.inet.ipsec.dfbit is 0, 1 or 2, got {dfbit!r}")
    return dfbit == 1 or (dfbit == 2 and df_set)


def forwarded_limit(
    inner: str,
    path_mtu: int,
    outer: str,
    *,
    dfbit: int = 0,
    df_set: bool = True,
    block: int = KERNEL_WORST_CASE_BLOCK,
) -> int | None:
    """The kernel's gate for a forwarded packet of family ``inner``, or None when it does
    not check (IPv4 inner with ``dfbit`` off): then only the exact ESP arithmetic limits it.
    """
    if inner == "ipv6":
        return forwarded_ipv6_limit(path_mtu, outer, block)
    _family(inner)
    if ipv4_gate_applies(dfbit, df_set):
        return path_mtu - kernel_worst_case_header(outer, block)
    return None


def _ping_overhead(family: str) -> int:
    _family(family)
    return PING_OVERHEAD[family]


def ping_data_for_inner(inner_len: int, family: str) -> int:
    """Ping data bytes (``ping -s``) that make an inner packet of ``inner_len`` bytes.

    IPv4: -28 (20 + 8), IPv6: -48 (40 + 8). 1,383 -> 1,335 for IPv6.
    """
    _check_len("inner_len", inner_len)
    data = inner_len - _ping_overhead(family)
    if data < 0:
        raise ValueError(f"an inner {family} packet of {inner_len} bytes cannot hold a ping")
    return data


def inner_for_ping_data(data_len: int, family: str) -> int:
    """The inverse: inner packet length of a ping carrying ``data_len`` bytes (1,398 -> 1,446 IPv6)."""
    _check_len("data_len", data_len)
    return data_len + _ping_overhead(family)


__all__ = [
    "CIPHERS",
    "FAMILIES",
    "IP_HEADER",
    "IPV6_MIN_MTU",
    "KERNEL_WORST_CASE_BLOCK",
    "EspSuite",
    "SUITES",
    "suite",
    "esp_payload_len",
    "outer_packet_len",
    "esp_overhead",
    "max_inner",
    "kernel_worst_case_header",
    "forwarded_ipv6_limit",
    "ipv4_gate_applies",
    "forwarded_limit",
    "ping_data_for_inner",
    "inner_for_ping_data",
]
