"""Packet sizes in the emulated appliance: the twin's ESP framing and FreeBSD 14's PMTU gate.

Why the twin computes these itself: the suite's expectations (ipsec_hil.lab.expectations.esp_math) must be
checked against an independent model, or the lab would compare a formula with itself
(issue 10).  Two kinds of numbers live here, each from its own source:

* the ESP framing of the twin's engine (ipsec_hil_twin.engine.esp seals with exactly these IV, ICV
  and alignment values; RFC 4303 2.4, RFC 4106 3, RFC 3602 + RFC 4868), which limits
  the appliance's own packets: the "own" route's MTU is the largest inner packet whose
  ESP packet fits the path;
* FreeBSD 14's gate for forwarded packets, written from its sources (citations below as
  file:function), which does not know the association's framing and uses the worst case.

The path MTU is FreeBSD's `ipsec_get_pmtu()` (sys/netipsec/ipsec_output.c): the TCP host
cache entry for the association's destination, else `tcp_maxmtu()/tcp_maxmtu6()` -- the
MTU of the interface the route to the peer leaves by.  The emulated appliance has no host
cache entries (nothing in the lab sends it a PTB for the outer path), so the path MTU is
the MTU of the port whose address is the association's source (control.py `_sa_entry`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GCM = "aes-gcm-16"
CBC = "aes-cbc-hmac-sha256"
CIPHERS = (GCM, CBC)

IP_HEADER = {"ipv4": 20, "ipv6": 40}
"""sizeof(struct ip) without options, sizeof(struct ip6_hdr): the outer header."""

SIZEOF_NEWESP = 8
"""sys/netipsec/esp.h `struct newesp`: esp_spi (4) + esp_seq (4)."""
EALG_MAX_BLOCK_LEN = 64
"""sys/opencrypto/cryptodev.h: `#define EALG_MAX_BLOCK_LEN CHACHA20_NATIVE_BLOCK_LEN`
(64 since ChaCha20-Poly1305 was added to IPsec; FreeBSD 14 has it)."""
ESP_NO_SA_PAD_AND_TRAILER = 9
"""sys/netipsec/xform_esp.c esp_hdrsiz(): "+ max pad length + sizeof (pad length field)
+ sizeof (next header field)" is written as the literal 9."""
ESP_NO_SA_MAX_ICV = 16
"""sys/netipsec/xform_esp.c esp_hdrsiz(): "+ max icv supported" -- the literal 16."""

UDP_ENCAP_HEADER = 8
"""RFC 3948 2.1 / sys/netipsec/udpencap.c udp_ipsec_output(): `m_makespace(m, hlen,
sizeof(*udp))` -- a UDP header (ports 4500) between the outer IP header and the SPI."""
NATT_PORT = 4500


def encap_header(outer: str, encap: bool) -> int:
    """Bytes NAT-T adds; ValueError for an IPv6 outer: udp_ipsec_output() returns
    EAFNOSUPPORT when `sav->sah->saidx.dst.sa.sa_family == AF_INET6`, and
    udp_ipsec_input() drops AF_INET6 ("Not yet")."""
    if not encap:
        return 0
    if outer != "ipv4":
        raise ValueError(f"UDP encapsulation needs an IPv4 outer (FreeBSD's udp_ipsec_output refuses {outer})")
    return UDP_ENCAP_HEADER


IPV6_MMTU = 1280
"""sys/netinet/ip6.h: the IPv6 minimum link MTU (RFC 8200 5)."""
ICMPV6_PLD_MAXLEN = IPV6_MMTU - 40 - 8
"""sys/netinet/icmp6.h: how much of the invoking packet an ICMPv6 error quotes."""


@dataclass(frozen=True)
class Framing:
    """On-the-wire sizes of one ESP suite as the twin's engine seals it."""

    iv: int
    icv: int
    align: int

    @property
    def fixed(self) -> int:
        """SPI + sequence + IV + ICV: the per-packet bytes that do not depend on the inner."""
        return SIZEOF_NEWESP + self.iv + self.icv


FRAMING = {
    GCM: Framing(iv=8, icv=16, align=4),     # RFC 4106 3: explicit 8-byte IV, 16-byte ICV, 4-byte alignment
    CBC: Framing(iv=16, icv=16, align=16),   # RFC 3602 IV = block 16; RFC 4868 HMAC-SHA-256-128
}


def _check(cipher: str, outer: str) -> Framing:
    if cipher not in FRAMING:
        raise ValueError(f"cipher {cipher!r}: expected one of {', '.join(CIPHERS)}")
    if outer not in IP_HEADER:
        raise ValueError(f"outer family {outer!r}: expected ipv4 or ipv6")
    return FRAMING[cipher]


def esp_overhead(cipher: str, outer: str, inner_len: int) -> int:
    """Bytes the tunnel adds to an inner packet of `inner_len` (outer header included):
    RFC 4303 2.4 pads inner + pad length + next header up to the suite's alignment."""
    f = _check(cipher, outer)
    padded = -(-(inner_len + 2) // f.align) * f.align
    return IP_HEADER[outer] + f.fixed + (padded - inner_len)


def max_inner(cipher: str, outer: str, path_mtu: int, encap: bool = False) -> int:
    """The largest inner packet whose ESP packet (in UDP with `encap`) fits `path_mtu` exactly.

    This is the limit of the appliance's own packets: FreeBSD's gate leaves them alone
    (sys/netipsec/ipsec_output.c ipsec6_check_pmtu: `if (!forwarding) return (0)`;
    ipsec4_check_pmtu: nothing while net.inet.ipsec.dfbit is 0), and the offloading
    driver takes the association's exact framing; the twin's own route carries this MTU
    so the kernel answers EMSGSIZE to a larger don't-fragment packet.
    """
    f = _check(cipher, outer)
    room = path_mtu - IP_HEADER[outer] - encap_header(outer, encap) - f.fixed  # inner + padding + 2
    return (room // f.align) * f.align - 2


def esp_hdrsiz_no_sa() -> int:
    """sys/netipsec/xform_esp.c esp_hdrsiz(NULL): the worst case with no association:
    sizeof(struct newesp) + EALG_MAX_BLOCK_LEN + 9 + 16 = 97."""
    return SIZEOF_NEWESP + EALG_MAX_BLOCK_LEN + ESP_NO_SA_PAD_AND_TRAILER + ESP_NO_SA_MAX_ICV


def ipsec_hdrsiz(outer: str) -> int:
    """sys/netipsec/ipsec.c ipsec_hdrsiz_internal(sp) for one tunnel-mode ESP request:
    esp_hdrsiz(NULL) plus sizeof(struct ip) or sizeof(struct ip6_hdr) by the request's
    destination family.  Nothing for NAT-T ("XXX: for NAT-T we need to cosider UDP header
    size"), and esp_hdrsiz() has no UDP term either: with `encap` the forwarded gate is
    the same, the wire packet 8 bytes longer (it still fits: 97 covers the worst case)."""
    if outer not in IP_HEADER:
        raise ValueError(f"outer family {outer!r}: expected ipv4 or ipv6")
    return esp_hdrsiz_no_sa() + IP_HEADER[outer]


def forwarded_limit(path_mtu: int, outer: str) -> int:
    """The longest forwarded inner packet the gate lets through: `m_length + hlen > pmtu`
    is refused (sys/netipsec/ipsec_output.c ipsec4_check_pmtu / ipsec6_check_pmtu), so
    pmtu - hlen passes.  May be below 1,280 (IPv6 outer on a 1,400-byte path: 1,263)."""
    return path_mtu - ipsec_hdrsiz(outer)


@dataclass(frozen=True)
class GateVerdict:
    """What FreeBSD does with one forwarded packet entering a policy.

    action: "pass" (encrypt it), "icmp" (consume it and send an ICMP/ICMPv6 error whose
    MTU field is `mtu`) or "drop" (consume it silently).
    """

    action: Literal["pass", "icmp", "drop"]
    mtu: int = 0


PASS = GateVerdict("pass")


def gate_checks(version: int, dfbit: int, df_set: bool) -> bool:
    """Whether FreeBSD's forwarded gate looks at a packet's size at all (forwarded_gate's
    first step): IPv6 always; IPv4 by net.inet.ipsec.dfbit (0 never, 1 always, 2 and
    above when the inner header has DF).  The transmit loop asks this once per sysctl
    refresh, so the packets the gate exempts cost no call."""
    if version == 4:
        return dfbit == 1 or (dfbit >= 2 and df_set)
    return version == 6


def forwarded_gate(length: int, version: int, path_mtu: int, outer: str, dfbit: int,
                   df_set: bool) -> GateVerdict:
    """FreeBSD 14's decision for a forwarded inner packet of `length` bytes.

    sys/netipsec/ipsec_output.c:
      ipsec6_check_pmtu (IPv6 inner): always checked when forwarding ("RFC8200 ...
        packets that are too big are always supposed to be dropped, with an ICMPv6
        packet being sent back"), whatever net.inet.ipsec.dfbit says.
      ipsec4_check_pmtu (IPv4 inner): `if (!V_ip4_ipsec_dfbit) return (0)`; dfbit 1
        checks every packet (`goto setdf`); dfbit 2 and above only those whose inner
        header has DF (`if (!(ip->ip_off & htons(IP_DF))) return (0)`).
      both: pmtu = ipsec_get_pmtu(sav), `pmtu == 0` -> no check; hlen =
        ipsec_hdrsiz_internal(sp); if `m_length(m) + hlen > pmtu`: `if (pmtu > hlen)`
        icmp_error(ICMP_UNREACH_NEEDFRAG, pmtu - hlen) / icmp6_error(ICMP6_PACKET_TOO_BIG,
        pmtu - hlen), else m_freem (a silent drop); either way EINPROGRESS (consumed).
    sys/netinet6/icmp6.c icmp6_error: the MTU goes into icmp6_mtu as given
      (`icmp6->icmp6_pptr = htonl((u_int32_t)param)`), with no clamp to IPV6_MMTU:
      a PTB below 1,280 is sent as computed (1,263 for an IPv6 outer on a 1,400 path).
      The invoking packet is quoted up to ICMPV6_PLD_MAXLEN.
    """
    if not gate_checks(version, dfbit, df_set) or path_mtu <= 0:
        return PASS
    hlen = ipsec_hdrsiz(outer)
    if length + hlen <= path_mtu:
        return PASS
    if path_mtu > hlen:
        return GateVerdict("icmp", path_mtu - hlen)
    return GateVerdict("drop")


def outer_df(dfbit: int, inner_df: bool) -> bool:
    """DF of the outer IPv4 header (sys/netipsec/ipsec_output.c ipsec_encap): dfbit 0
    clears it, 1 sets it, anything else copies the inner header's DF."""
    if dfbit in (0, 1):
        return bool(dfbit)
    return inner_df


SOURCE = "ipsec_hil_twin.engine.sizes (FreeBSD 14 ipsec_output.c/ipsec.c/xform_esp.c)"
"""Reported by the engine's `status` so a reader sees which model computed the limits."""
