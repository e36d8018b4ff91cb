"""`netstat -s -p ipsec|ipsec6 --libxo json` -> IpsecStats (FreeBSD 14's `struct ipsecstat`).

Why: the hard-expiry test accounts for the packets a policy met while its SA was gone
(sys/netipsec/ipsec_output.c ipsec4_allocsa/ipsec6_allocsa: ips_out_nosa, and the request's
`bad:` path: ips_out_inval). The keys are usr.bin/netstat/ipsec.c's print_ipsecstats
(`{:discarded-no-sa/%ju}` "outbound packets with no SA available", ...), inside the
`ipsec-statistics` container. JSON only: the suite always asks for `--libxo json`; text is
refused naming the line. `netstat -s` prints every counter (a missing one is an error);
ipsec.ko not loaded prints `{"statistics": {}}`: IpsecStats(loaded=False), counters None.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import _libxo
from ._base import fail, json_line_of
from ipsec_hil.lab.command import Command

COMMAND = Command("netstat", "-s", "-p", "ipsec", "--libxo", "json")
#: the statistics of packets of each inner family: ipsec4stat, ipsec6stat
BY_FAMILY = {"ipv4": COMMAND, "ipv6": Command("netstat", "-s", "-p", "ipsec6", "--libxo", "json")}
CONTAINER = "ipsec-statistics"

#: usr.bin/netstat/ipsec.c print_ipsecstats' keys, in its order (FreeBSD 14)
KEYS: tuple[str, ...] = (
    "dropped-policy-violation", "dropped-no-memory", "dropped-invalid",
    "discarded-policy-violation", "discarded-no-sa", "discarded-no-memory", "discarded-no-route",
    "discarded-invalid", "send-bundled-sa", "spdcache-hits", "spdcache-misses",
    "clusters-copied-during-clone", "mbufs-inserted",
)


@dataclass(frozen=True)
class IpsecStats:
    """One family's IPsec statistics by FreeBSD's key; loaded=False: ipsec.ko absent."""

    loaded: bool
    counters: tuple[tuple[str, int], ...] = ()
    libxo_version: Optional[str] = None

    def get(self, key: str) -> Optional[int]:
        """The counter under FreeBSD's key (None when not loaded); an unknown key is a KeyError."""
        if key not in KEYS:
            raise KeyError(f"{key!r}: not a netstat -p ipsec key ({', '.join(KEYS)})")
        return dict(self.counters).get(key) if self.loaded else None


def parse(text: str) -> IpsecStats:
    stripped = text.strip()
    if not stripped:
        fail(COMMAND, 0, text, "empty output (netstat prints the ipsec statistics, or an empty container without IPsec)")
    if not stripped.startswith("{"):
        line = stripped.splitlines()[0] if stripped else text
        fail(COMMAND, 1, line, "expected `--libxo json` output (the text form is not read)")
    stats, version = _libxo.object_container(COMMAND, text, "statistics")
    if not stats:
        return IpsecStats(loaded=False, libxo_version=version)
    if set(stats) != {CONTAINER} or not isinstance(stats[CONTAINER], dict):
        fail(COMMAND, *json_line_of(text, next(iter(stats))), f'expected only the "{CONTAINER}" container')
    body = stats[CONTAINER]
    _libxo.only_keys(COMMAND, text, body, set(KEYS), CONTAINER)
    values = tuple((k, _libxo.count(COMMAND, text, body, k, CONTAINER)) for k in KEYS)
    return IpsecStats(loaded=True, counters=values, libxo_version=version)
