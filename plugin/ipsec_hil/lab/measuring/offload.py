"""The offload framework's own counters (FreeBSD 15, option IPSEC_OFFLOAD) as ledger rows.

Why: on a kernel with the inline IPsec offload framework (sys/netipsec/ipsec_offload.c)
the kernel itself says, per SA, whether a NIC holds it and how much went through it, so
"the offload path carried it" no longer rests on the driver's own counters alone.
``setkey -D`` (lib/libipsec/pfkey_dump.c) prints per SA:

- ``hw offl if: IF[,IF]`` -- the interfaces whose driver ACCEPTED the SA
  (ipsec_accel_key_setaccelif: handles HANDLED, not REJECTED). A NIC that answers
  ``if_sa_newkey`` with EOPNOTSUPP leaves a REJECTED handle: no such line, the SA stays in
  software (crypto(9); the kernel's ESP statistics count it);
- ``sw offl allocated: N / sw offl: B(bytes)`` -- IF_SA_CNT_TOTAL_SW_VAL: the packets the
  stack tagged for the NIC on output and those the NIC handed up tagged on input
  (ipsec_accel_sa_recordxfer); a packet too large for the MTU is not tagged and goes
  through software (ipsec_accel_output);
- ``hw offl allocated: N / hw offl: B(bytes)`` -- IF_SA_CNT_TOTAL_HW_VAL: the driver's own
  count for the SA (its ``if_sa_cnt``), summed over the interfaces that hold it.

Each SA's hw offl becomes two ledger rows, ``sa.0x<spi>.hw_offl`` (packets) and
``sa.0x<spi>.hw_offl_bytes``, read in the same round trip as the driver's counters
(``Appliance.snapshot``). The counts a driver reports may trail the packets (the framework
pulls them from the driver: ipsec_accel_drv_sa_lifetime_update/_fetch); the settle rule
covers it -- two equal reads ``counter_lag_s`` apart, the lag the appliance's profile
states -- so a door is compared only once it has stopped moving with the rest.

The door and its direction: an SA whose source address is one of the appliance's own
(its ports' addresses in the lab file) is outbound -- its hw offl is what the appliance
encrypted through the NIC -- and one whose destination is its own is inbound.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ipsec_hil.lab.parsers.setkey import SadDump

#: ledger counter names of one SA's door (``sa.0x<spi>.`` + suffix)
HW_PACKETS = "hw_offl"
HW_BYTES = "hw_offl_bytes"


def sa_prefix(spi: int) -> str:
    """``sa.0x<spi, 8 hex digits>.``: the prefix of one SA's rows (setkey's own spelling)."""
    return f"sa.0x{spi:08x}."


@dataclass(frozen=True)
class SaOffload:
    """One SA as an IPSEC_OFFLOAD kernel reports it (no key: only what the ledger needs)."""

    spi: int
    src: str
    dst: str
    cipher: str | None
    hw_ifs: tuple[str, ...]  # `hw offl if:`: the interfaces whose driver took it (empty: none)
    hw_packets: int
    hw_bytes: int
    sw_packets: int
    sw_bytes: int
    packets: int  # the SA's lifetime allocations (`allocated:`), whichever path carried them
    bytes: int  # the SA's lifetime current bytes

    @property
    def accepted(self) -> bool:
        """Does a NIC hold it (HANDLED on some interface)?"""
        return bool(self.hw_ifs)

    def values(self) -> dict[str, int]:
        """Its ledger rows."""
        p = sa_prefix(self.spi)
        return {p + HW_PACKETS: self.hw_packets, p + HW_BYTES: self.hw_bytes}


def from_setkey(dump: SadDump) -> tuple[SaOffload, ...]:
    """The SAs of ``setkey -D`` that carry the framework's lines (an IPSEC_OFFLOAD kernel
    prints them for every SA an interface was offered, accepted or refused); () without."""
    out = []
    for e in dump.entries:
        if e.hw_offload_packets is None:
            continue
        out.append(SaOffload(e.spi, e.src, e.dst, e.cipher, tuple(e.hw_offload_ifs or ()),
                             int(e.hw_offload_packets), int(e.hw_offload_bytes or 0),
                             int(e.sw_offload_packets or 0), int(e.sw_offload_bytes or 0),
                             int(e.allocations or 0), int(e.bytes or 0)))
    return tuple(out)


def _addr(text: str) -> str:
    return str(ipaddress.ip_address(text.split("%", 1)[0]))


def direction(src: str, dst: str, own: Iterable[str]) -> str | None:
    """An SA from ``src`` to ``dst``: ``out`` (its source is one of ``own``), ``in`` (its
    destination is), or None."""
    mine = {_addr(a) for a in own}
    if _addr(src) in mine:
        return "out"
    if _addr(dst) in mine:
        return "in"
    return None


def door_refs(appliance: str, sas: Sequence[SaOffload], own: Iterable[str], way: str,
              spis: Iterable[int] | None = None) -> list[str]:
    """Ledger references of the hw offl packets of ``appliance``'s SAs going ``way``
    (``out``/``in``), only those of ``spis`` when given (a tunnel's own)."""
    own = list(own)
    keep = None if spis is None else set(spis)
    return [f"{appliance}:{sa_prefix(s.spi)}{HW_PACKETS}" for s in sas
            if direction(s.src, s.dst, own) == way and (keep is None or s.spi in keep)]


# ------------------------------------------------------------------ which path carried an SA

#: what an SA's traffic took: the NIC (``offload``), the kernel's crypto (``software``),
#: or nothing moved (``idle``: no verdict)
OFFLOAD, SOFTWARE, IDLE = "offload", "software", "idle"


def must_offload(profile: Any, config: Any, end_cipher: str) -> tuple[bool, str]:
    """(must the NIC hold this end's associations?, why) -- from the model's profile (the
    suite's expectation, under test) and the tunnel configuration: the end runs the
    offload cipher (not ``cipher: kernel``), its driver takes the outer family
    (``accepts_ipv6_sa``) and, for NAT-T, UDP-encapsulated associations (``offloads_udp_encap``)."""
    if end_cipher == "kernel":
        return False, "the lab file runs this end on the kernel's cipher"
    if config.outer == "ipv6" and not profile.accepts_ipv6_sa:
        return False, f"the {profile.model} profile: the driver does not take IPv6-outer associations"
    if getattr(config, "encap", False) and not profile.offloads_udp_encap:
        return False, f"the {profile.model} profile: the driver does not take NAT-T associations"
    return True, (f"the {profile.model} profile: {profile.driver} offloads {config.cipher} over "
                  f"{config.outer}{' in UDP' if getattr(config, 'encap', False) else ''}")


@dataclass(frozen=True)
class SaPath:
    """The verdict for one SA: which path its packets took over a measurement, and why."""

    appliance: str
    spi: int
    way: str  # out | in
    packets: int  # the SA's own count of the measurement (setkey's lifetime `allocated:` delta)
    path: str  # OFFLOAD | SOFTWARE | IDLE
    evidence: str

    @property
    def label(self) -> str:
        return f"{self.appliance}: SA 0x{self.spi:08x} ({self.way})"


def judge_framework(appliance: str, way: str, before: SaOffload, after: SaOffload) -> SaPath:
    """An IPSEC_OFFLOAD kernel's own account of one SA: offloaded when a NIC holds it
    (``hw offl if:``) and its hw offl packets moved by every packet the SA counted;
    software when it moved by fewer (refused: no interface, zero hw offl; or packets the
    framework did not tag, as one too large for the MTU)."""
    packets = after.packets - before.packets
    hw = after.hw_packets - before.hw_packets
    sw = after.sw_packets - before.sw_packets
    ifs = ",".join(after.hw_ifs) or "none (no 'hw offl if:' line: refused or never offered)"
    evidence = f"allocated +{packets}, hw offl +{hw}, sw offl +{sw}, hw offl if: {ifs}"
    if packets <= 0:
        return SaPath(appliance, after.spi, way, packets, IDLE, evidence)
    path = OFFLOAD if after.accepted and hw == packets else SOFTWARE
    return SaPath(appliance, after.spi, way, packets, path, evidence)


def judge_counters(appliance: str, spi: int, way: str, packets: int, driver: int, kernel: int,
                   driver_names: Sequence[str], kernel_names: Sequence[str]) -> SaPath:
    """Without the framework (FreeBSD 14): the SA counted ``packets``; offloaded when the
    driver's counters of that direction moved by at least as many and the kernel's ESP
    counters of that direction did not move, software when the kernel's moved instead.
    Only a measurement whose traffic is this SA's alone may be judged so (the counters
    are the appliance's, not the SA's)."""
    evidence = (f"allocated +{packets}, driver {'+'.join(driver_names)} +{driver}, "
                f"kernel {'+'.join(kernel_names)} +{kernel}")
    if packets <= 0:
        return SaPath(appliance, spi, way, packets, IDLE, evidence)
    path = OFFLOAD if driver >= packets and kernel == 0 else SOFTWARE
    return SaPath(appliance, spi, way, packets, path, evidence)
