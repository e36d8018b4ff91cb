"""`netstat -s -p esp` (text, or `--libxo json`) -> EspStats.

FreeBSD prints one `struct espstat` for IPv4 and IPv6 SAs (usr.bin/netstat/ipsec.c).
Quirks handled: the JSON container is spelled `esp-statictics`; FreeBSD 14 spells
bytes-in `receieve-bytes` while main spells it `receive-bytes`; `-ss` omits zero
counters (pass sparse=True, missing *known* keys become 0); ipsec.ko not loaded makes
netstat print nothing (text) or `{"statistics": {}}` (JSON): that is EspStats(loaded=False)
with every counter None, never zeros.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple, Optional

from . import _libxo
from ._base import fail, json_line_of, numbered_lines, to_int
from ._lines import LineTable
from ipsec_hil.lab.command import Command

COMMAND = Command("netstat", "-s", "-p", "esp", "--libxo", "json")


class EspCounter(NamedTuple):
    """One `struct espstat` counter under its three names."""

    field: str  # EspStats' attribute
    key: str  # FreeBSD's libxo JSON key (its spelling, typos included)
    text: str  # the text netstat prints after the number, %s where the plural adds an "s"


COUNTERS: tuple[EspCounter, ...] = (
    EspCounter("dropped_short_header", "dropped-short-header", "packet%s shorter than header shows"),
    EspCounter("dropped_bad_protocol", "dropped-bad-protocol", "packet%s dropped; protocol family not supported"),
    EspCounter("dropped_no_tdb", "dropped-no-tdb", "packet%s dropped; no TDB"),
    EspCounter("dropped_bad_kcr", "dropped-bad-kcr", "packet%s dropped; bad KCR"),
    EspCounter("dropped_queue_full", "dropped-queue-full", "packet%s dropped; queue full"),
    EspCounter("dropped_no_transform", "dropped-no-transform", "packet%s dropped; no transform"),
    EspCounter("dropped_bad_length", "dropped-bad-length", "packet%s dropped; bad ilen"),
    EspCounter("replay_counter_wraps", "replay-counter-wraps", "replay counter wrap%s"),
    EspCounter("dropped_bad_crypto", "dropped-bad-crypto", "packet%s dropped; bad encryption detected"),
    EspCounter("dropped_bad_auth", "dropped-bad-auth", "packet%s dropped; bad authentication detected"),
    EspCounter("possible_replay", "possible-replay-detected", "possible replay packet%s detected"),
    EspCounter("received_packets", "received-packets", "packet%s in"),
    EspCounter("sent_packets", "sent-packets", "packet%s out"),
    EspCounter("dropped_bad_tdb", "dropped-bad-tdb", "packet%s dropped; invalid TDB"),
    EspCounter("received_bytes", "receieve-bytes", "byte%s in"),
    EspCounter("sent_bytes", "sent-bytes", "byte%s out"),
    EspCounter("dropped_too_large", "dropped-too-large", "packet%s dropped; larger than IP_MAXPACKET"),
    EspCounter("dropped_policy_violation", "dropped-policy-violation", "packet%s blocked due to policy"),
    EspCounter("crypto_failures", "crypto-failures", "crypto processing failure%s"),
    EspCounter("tunnel_failures", "tunnel-failures", "tunnel sanity check failure%s"),
)
_MAIN_RECEIVE_BYTES = "receive-bytes"  # freebsd-src main fixed the typo
_KEY_TO_FIELD = {c.key: c.field for c in COUNTERS}
_KEY_TO_FIELD[_MAIN_RECEIVE_BYTES] = "received_bytes"
_TEXT_TO_FIELD: dict[str, tuple[str, bool]] = {}
for _c in COUNTERS:
    _TEXT_TO_FIELD[_c.text % ""] = (_c.field, True)  # singular form, only valid for 1
    _TEXT_TO_FIELD[_c.text % "s"] = (_c.field, False)
HISTOGRAM_KEY = "esp-output-histogram"


@dataclass(frozen=True)
class EspStats:
    """Kernel ESP statistics. loaded=False: ipsec.ko absent, all counters None."""

    loaded: bool
    dropped_short_header: Optional[int] = None
    dropped_bad_protocol: Optional[int] = None
    dropped_no_tdb: Optional[int] = None
    dropped_bad_kcr: Optional[int] = None
    dropped_queue_full: Optional[int] = None
    dropped_no_transform: Optional[int] = None
    dropped_bad_length: Optional[int] = None
    replay_counter_wraps: Optional[int] = None
    dropped_bad_crypto: Optional[int] = None
    dropped_bad_auth: Optional[int] = None
    possible_replay: Optional[int] = None
    received_packets: Optional[int] = None
    sent_packets: Optional[int] = None
    dropped_bad_tdb: Optional[int] = None
    received_bytes: Optional[int] = None
    sent_bytes: Optional[int] = None
    dropped_too_large: Optional[int] = None
    dropped_policy_violation: Optional[int] = None
    crypto_failures: Optional[int] = None
    tunnel_failures: Optional[int] = None
    # (algorithm name, count); unnamed SADB indexes appear as "#<n>"
    histogram: tuple[tuple[str, int], ...] = ()
    # JSON only: libxo's "__version" key as printed; None when absent (FreeBSD 14's netstat)
    libxo_version: Optional[str] = None

    def as_dict(self) -> dict[str, object]:
        """Canonical names plus the FreeBSD keys (both spellings of bytes-in)."""
        out: dict[str, object] = {"loaded": self.loaded}
        for name, key, _ in COUNTERS:
            value = getattr(self, name)
            out[name] = value
            out[key] = value
        out[_MAIN_RECEIVE_BYTES] = self.received_bytes
        out["histogram"] = dict(self.histogram)
        return out


def parse(text: str, *, sparse: bool = False) -> EspStats:
    """Parse text or libxo JSON output. sparse=True for `-ss` (zero counters omitted)."""
    stripped = text.strip()
    if not stripped:
        return EspStats(loaded=False)
    if stripped.startswith("{"):
        return _parse_json(text, sparse)
    return _parse_text(text, sparse)


def _complete(values: dict[str, int], sparse: bool, line_no: int, line: str) -> dict[str, int]:
    for name, key, _ in COUNTERS:
        if name not in values:
            if not sparse:
                fail(COMMAND, line_no, line, f"counter {key!r} missing (pass sparse=True for -ss output)")
            values[name] = 0
    return values


def _parse_json(text: str, sparse: bool) -> EspStats:
    stats, version = _libxo.object_container(COMMAND, text, "statistics")
    if not stats:
        return EspStats(loaded=False, libxo_version=version)
    if set(stats) != {"esp-statictics"} or not isinstance(stats["esp-statictics"], dict):
        no, line = json_line_of(text, next(iter(stats)))
        fail(COMMAND, no, line, 'expected only the "esp-statictics" container (sic)')
    values: dict[str, int] = {}
    histogram: list[tuple[str, int]] = []
    for key, value in stats["esp-statictics"].items():
        no, line = json_line_of(text, f'"{key}"')
        if key == HISTOGRAM_KEY:
            histogram = _json_histogram(value, text)
            continue
        name = _KEY_TO_FIELD.get(key)
        if name is None:
            fail(COMMAND, no, line, f"unknown ESP counter key {key!r}")
        if type(value) is not int or value < 0:
            fail(COMMAND, no, line, f"{key}: expected a non-negative integer, found {value!r}")
        if name in values:
            fail(COMMAND, no, line, f"{key}: counter given twice")
        values[name] = value
    _complete(values, sparse, 1, "esp-statictics")
    return EspStats(loaded=True, histogram=tuple(histogram), libxo_version=version, **values)


def _json_histogram(value: object, text: str) -> list[tuple[str, int]]:
    no, line = json_line_of(text, HISTOGRAM_KEY)
    if not isinstance(value, list):
        fail(COMMAND, no, line, f"{HISTOGRAM_KEY}: expected a list")
    out: list[tuple[str, int]] = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "count"}:
            fail(COMMAND, no, line, f"{HISTOGRAM_KEY}: expected {{name, count}} items, found {item!r}")
        name, count = item["name"], item["count"]
        if type(name) is int:  # libxo emits unnamed SADB indexes as bare numbers
            name = f"#{name}"
        if not isinstance(name, str) or type(count) is not int or count < 0:
            fail(COMMAND, no, line, f"{HISTOGRAM_KEY}: bad item {item!r}")
        out.append((name, count))
    return out


_LINES = LineTable(COMMAND, {
    "title": r"esp:",
    "histogram_title": r"\tESP output histogram:",
    "histogram": r"\t\t(?P<name>#[0-9]+|[a-z0-9][a-z0-9-]*): (?P<count>\S+)",
    "counter": r"\t(?P<value>\S+) (?P<text>.+)",
})


def _parse_text(text: str, sparse: bool) -> EspStats:
    values: dict[str, int] = {}
    histogram: list[tuple[str, int]] = []
    state = "title"
    last = (0, "")
    for no, line in numbered_lines(text):
        last = (no, line)
        if not line.strip():
            continue  # a trailing empty line is not a counter
        if state == "title":
            _LINES.expect("title", no, line, "expected the title line 'esp:'")
            state = "counters"
        elif state == "counters" and _LINES.match(line, "histogram_title"):
            state = "histogram"
        elif state == "histogram":
            m = _LINES.expect("histogram", no, line, "expected a histogram row '\\t\\t<alg>: <count>'")
            histogram.append((m["name"], to_int(COMMAND, no, line, m["count"], "histogram count")))
        else:
            m = _LINES.expect("counter", no, line, "expected '\\t<number> <description>'")
            value = to_int(COMMAND, no, line, m["value"], "counter value")
            known = _TEXT_TO_FIELD.get(m["text"])
            if known is None:
                fail(COMMAND, no, line, "unknown ESP counter description")
            name, singular = known
            if singular != (value == 1):
                fail(COMMAND, no, line, "singular/plural form does not match the number")
            if name in values:
                fail(COMMAND, no, line, "counter given twice")
            values[name] = value
    if state == "title":
        return EspStats(loaded=False)
    if state == "histogram" and not histogram:
        fail(COMMAND, last[0], last[1], "histogram header without rows")
    _complete(values, sparse, last[0], last[1])
    return EspStats(loaded=True, histogram=tuple(histogram), **values)
