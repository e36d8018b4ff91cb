"""`netstat -s -p ip --libxo json` / `-p ip6 --libxo json` -> IpStats.

FreeBSD's usr.bin/netstat/inet.c ip_stats and inet6.c ip6_stats: one container per
protocol (`ip`, `ip6`) under netstat's `statistics`, each counter a JSON integer under the
libxo key of its xo_emit field. ip6 adds the `mbuf-statistics` container (one-mbuf,
one-extra-mbuf, two-or-more-extra-mbufs and a `mbuf-data` list per interface), the
`source-address-selection` container (address-selection-failures and per-scope lists) and
an `input-histogram` list of next headers -- the lists only when non-zero. `-ss` omits zero
counters (pass sparse=True: a missing KNOWN key is 0). A key outside these tables is a
format this parser does not know: ParseError naming it, never a silent drop. The text
form is not read here (the suite asks for JSON, as Appliance.snapshot does for esp).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from . import _libxo
from ._base import fail, json_line_of
from ipsec_hil.lab.command import Command

COMMAND = Command("netstat", "-s", "-p", "ip", "--libxo", "json")
COMMAND6 = Command("netstat", "-s", "-p", "ip6", "--libxo", "json")

#: inet.c ip_stats' keys, in its order
IP_KEYS: tuple[str, ...] = (
    "received-packets", "dropped-bad-checksum", "dropped-below-minimum-size", "dropped-short-packets",
    "dropped-too-long", "dropped-short-header-length", "dropped-short-data", "dropped-bad-options",
    "dropped-bad-version", "received-fragments", "dropped-fragments", "dropped-fragments-after-timeout",
    "reassembled-packets", "received-local-packets", "dropped-unknown-protocol", "forwarded-packets",
    "fast-forwarded-packets", "packets-cannot-forward", "received-unknown-multicast-group", "redirects-sent",
    "sent-packets", "send-packets-fabricated-header", "discard-no-mbufs", "discard-no-route", "sent-fragments",
    "fragments-created", "discard-cannot-fragment", "discard-tunnel-no-gif", "discard-bad-address",
)
#: inet6.c ip6_stats' top-level counter keys, in its order
IP6_KEYS: tuple[str, ...] = (
    "received-packets", "dropped-below-minimum-size", "dropped-short-packets", "dropped-bad-options",
    "dropped-bad-version", "received-fragments", "dropped-fragment", "dropped-fragment-after-timeout",
    "dropped-fragments-overflow", "reassembled-packets", "received-local-packets", "forwarded-packets",
    "packets-not-forwardable", "sent-redirects", "sent-packets", "send-packets-fabricated-header",
    "discard-no-mbufs", "discard-no-route", "sent-fragments", "fragments-created", "discard-cannot-fragment",
    "discard-scope-violations", "multicast-no-join-packets", "dropped-header-too-long", "discard-tunnel-no-gif",
    "dropped-too-many-headers",
)
IP6_MBUF_KEYS = ("one-mbuf", "one-extra-mbuf", "two-or-more-extra-mbufs")
IP6_SELECTION_LISTS = ("outgoing-interface", "non-outgoing-interface", "same-source", "different-scope",
                       "deprecated-source", "rules-applied")
KEYS = {"ip": IP_KEYS, "ip6": IP6_KEYS}


@dataclass(frozen=True)
class IpStats:
    """One protocol's IP statistics: ``protocol`` ip | ip6, ``counters`` by FreeBSD key."""

    protocol: str
    counters: Mapping[str, int]
    #: ip6: the `input-histogram` (next header name, count), `mbuf-statistics` scalars and
    #: `source-address-selection` (failures and each list as (name, count) pairs)
    input_histogram: tuple[tuple[str, int], ...] = ()
    mbufs: Mapping[str, int] = field(default_factory=dict)
    address_selection_failures: Optional[int] = None
    selection: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    libxo_version: Optional[str] = None

    def __getitem__(self, key: str) -> int:
        return self.counters[key]


def parse(text: str, *, sparse: bool = False) -> IpStats:
    """The libxo JSON of `netstat -s -p ip` or `-p ip6` (which one: the container's name)."""
    if not text.strip():
        fail(COMMAND, 0, text, "empty output (netstat always prints the ip/ip6 statistics)")
    if not text.lstrip().startswith("{"):
        no, line = 1, text.strip().splitlines()[0]
        fail(COMMAND, no, line, "expected libxo JSON (--libxo json), found text")
    stats, version = _libxo.object_container(COMMAND, text, "statistics")
    if len(stats) != 1 or next(iter(stats)) not in KEYS or not isinstance(next(iter(stats.values())), dict):
        fail(COMMAND, *json_line_of(text, "statistics"), 'expected one "ip" or "ip6" object under "statistics"')
    proto, body = next(iter(stats.items()))
    counters: dict[str, int] = {}
    hist: tuple[tuple[str, int], ...] = ()
    mbufs: dict[str, int] = {}
    failures: Optional[int] = None
    selection: dict[str, tuple[tuple[str, int], ...]] = {}
    for key, value in body.items():
        if proto == "ip6" and key == "input-histogram":
            hist = _pairs(text, key, value)
        elif proto == "ip6" and key == "mbuf-statistics":
            mbufs = _mbufs(text, value)
        elif proto == "ip6" and key == "source-address-selection":
            failures, selection = _selection(text, value)
        elif key in KEYS[proto]:
            counters[key] = _libxo.count(COMMAND, text, body, key, proto)
        else:
            fail(COMMAND, *json_line_of(text, f'"{key}"'), f"{proto}: unknown key {key!r}")
    for key in KEYS[proto]:
        if key not in counters:
            if not sparse:
                fail(COMMAND, *json_line_of(text, f'"{proto}"'),
                     f"{proto}: counter {key!r} missing (pass sparse=True for -ss output)")
            counters[key] = 0
    return IpStats(proto, counters, hist, mbufs, failures, selection, version)


def _pairs(text: str, where: str, value: object) -> tuple[tuple[str, int], ...]:
    """A libxo list of {name, count} instances."""
    if not isinstance(value, list):
        fail(COMMAND, *json_line_of(text, f'"{where}"'), f"{where}: expected a list")
    out = []
    for item in value:
        if (not isinstance(item, dict) or set(item) != {"name", "count"} or type(item["count"]) is not int
                or item["count"] < 0):
            fail(COMMAND, *json_line_of(text, f'"{where}"'), f"{where}: expected {{name, count}} items, found {item!r}")
        out.append((str(item["name"]), item["count"]))
    return tuple(out)


def _mbufs(text: str, value: object) -> dict[str, int]:
    if not isinstance(value, dict):
        fail(COMMAND, *json_line_of(text, '"mbuf-statistics"'), "mbuf-statistics: expected an object")
    _libxo.only_keys(COMMAND, text, value, set(IP6_MBUF_KEYS) | {"mbuf-data"}, "mbuf-statistics")
    out = {k: _libxo.count(COMMAND, text, value, k, "mbuf-statistics") for k in IP6_MBUF_KEYS}
    if "mbuf-data" in value:
        for name, n in _pairs(text, "mbuf-data", value["mbuf-data"]):
            out[f"mbuf-data.{name}"] = n
    return out


def _selection(text: str, value: object) -> tuple[Optional[int], dict[str, tuple[tuple[str, int], ...]]]:
    if not isinstance(value, dict):
        fail(COMMAND, *json_line_of(text, '"source-address-selection"'), "source-address-selection: expected an object")
    _libxo.only_keys(COMMAND, text, value, {"address-selection-failures", *IP6_SELECTION_LISTS},
                     "source-address-selection")
    failures = (_libxo.count(COMMAND, text, value, "address-selection-failures", "source-address-selection")
                if "address-selection-failures" in value else None)
    return failures, {k: _pairs(text, k, value[k]) for k in IP6_SELECTION_LISTS if k in value}
