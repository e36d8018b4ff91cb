"""`netstat -m` (text, or `--libxo json`) -> MbufStats.

Source: usr.bin/netstat/mbuf.c:mbpr() of FreeBSD 14 (libxo era). Each text line is one
xo_emit with a fixed label; the JSON keys are the libxo field names of the same emits, so
one table below drives both forms and the dataclass fields are those keys with `_`.
Quirks kept from the source:
- the `(page size)` jumbo size is printed on its line and again inside the two
  `(4k/9k/16k)` labels, where libxo's JSON omits it (a `{N:/...}` format): the text
  repeats must equal the first;
- `sfbufs in use (current/peak/max)` is printed only where kern.ipc.nsfbufs exists
  (not on amd64, where sf_bufs are the direct map): optional, None when absent;
- netstat -m opens no "statistics" container and FreeBSD 14's netstat sets no libxo
  version: the JSON is `{"mbuf-statistics": {...}}` (a `__version` string is tolerated).
Empty output is an error: mbpr always prints, even with no traffic.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from . import _libxo
from ._base import fail, json_line_of
from ._lines import content_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("netstat", "-m", "--libxo", "json")
#: the text form, for a kernel without libxo's JSON (the health snapshot's fallback)
TEXT = Command("netstat", "-m")
CONTAINER = "mbuf-statistics"

# (text label after the numbers, libxo keys of the numbers in order, optional line)
# '#' is one %ju; '@' is the page-size repeat that must equal jumbo-page-size.
LINES: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("#/#/# mbufs in use (current/cache/total)", ("mbuf-current", "mbuf-cache", "mbuf-total"), False),
    ("#/#/#/# mbuf clusters in use (current/cache/total/max)",
     ("cluster-current", "cluster-cache", "cluster-total", "cluster-max"), False),
    ("#/# mbuf+clusters out of packet secondary zone in use (current/cache)",
     ("packet-count", "packet-free"), False),
    ("#/#/#/# #k (page size) jumbo clusters in use (current/cache/total/max)",
     ("jumbo-count", "jumbo-cache", "jumbo-total", "jumbo-max", "jumbo-page-size"), False),
    ("#/#/#/# 9k jumbo clusters in use (current/cache/total/max)",
     ("jumbo9-count", "jumbo9-cache", "jumbo9-total", "jumbo9-max"), False),
    ("#/#/#/# 16k jumbo clusters in use (current/cache/total/max)",
     ("jumbo16-count", "jumbo16-cache", "jumbo16-total", "jumbo16-limit"), False),
    ("#K/#K/#K bytes allocated to network (current/cache/total)",
     ("bytes-in-use", "bytes-in-cache", "bytes-total"), False),
    ("#/#/# requests for mbufs denied (mbufs/clusters/mbuf+clusters)",
     ("mbuf-failures", "cluster-failures", "packet-failures"), False),
    ("#/#/# requests for mbufs delayed (mbufs/clusters/mbuf+clusters)",
     ("mbuf-sleeps", "cluster-sleeps", "packet-sleeps"), False),
    ("#/#/# requests for jumbo clusters delayed (@k/9k/16k)",
     ("jumbop-sleeps", "jumbo9-sleeps", "jumbo16-sleeps"), False),
    ("#/#/# requests for jumbo clusters denied (@k/9k/16k)",
     ("jumbop-failures", "jumbo9-failures", "jumbo16-failures"), False),
    ("#/#/# sfbufs in use (current/peak/max)", ("nsfbufs-current", "nsfbufs-peak", "nsfbufs"), True),
    ("# sendfile syscalls", ("sendfile-syscalls",), False),
    ("# sendfile syscalls completed without I/O request", ("sendfile-no-io",), False),
    ("# requests for I/O initiated by sendfile", ("sendfile-io-count",), False),
    ("# pages read by sendfile as part of a request", ("sendfile-pages-sent",), False),
    ("# pages were valid at time of a sendfile request", ("sendfile-pages-valid",), False),
    ("# pages were valid and substituted to bogus page", ("sendfile-pages-bogus",), False),
    ("# pages were requested for read ahead by applications", ("sendfile-requested-readahead",), False),
    ("# pages were read ahead by sendfile", ("sendfile-readahead",), False),
    ("# times sendfile encountered an already busy page", ("sendfile-busy-encounters",), False),
    ("# requests for sfbufs denied", ("sfbufs-alloc-failed",), False),
    ("# requests for sfbufs delayed", ("sfbufs-alloc-wait",), False),
)
_OPTIONAL_KEYS = frozenset(k for _, keys, optional in LINES if optional for k in keys)
_ALL_KEYS = tuple(k for _, keys, _ in LINES for k in keys)


def _pattern(label: str) -> re.Pattern[str]:
    return re.compile(re.escape(label).replace("\\#", "#").replace("\\@", "@")
                      .replace("#", "([0-9]+)").replace("@", "([0-9]+)"))


_PATTERNS = tuple((_pattern(label), keys, optional, label.count("@")) for label, keys, optional in LINES)


@dataclass(frozen=True)
class MbufStats:
    """One `netstat -m`. Counts are items; bytes_* are KiB (as printed); *_failures are
    "denied", *_sleeps are "delayed" requests since boot."""

    mbuf_current: int
    mbuf_cache: int
    mbuf_total: int
    cluster_current: int
    cluster_cache: int
    cluster_total: int
    cluster_max: int
    packet_count: int
    packet_free: int
    jumbo_count: int
    jumbo_cache: int
    jumbo_total: int
    jumbo_max: int
    jumbo_page_size: int  # KiB
    jumbo9_count: int
    jumbo9_cache: int
    jumbo9_total: int
    jumbo9_max: int
    jumbo16_count: int
    jumbo16_cache: int
    jumbo16_total: int
    jumbo16_limit: int
    bytes_in_use: int
    bytes_in_cache: int
    bytes_total: int
    mbuf_failures: int
    cluster_failures: int
    packet_failures: int
    mbuf_sleeps: int
    cluster_sleeps: int
    packet_sleeps: int
    jumbop_sleeps: int
    jumbo9_sleeps: int
    jumbo16_sleeps: int
    jumbop_failures: int
    jumbo9_failures: int
    jumbo16_failures: int
    nsfbufs_current: Optional[int]
    nsfbufs_peak: Optional[int]
    nsfbufs: Optional[int]
    sendfile_syscalls: int
    sendfile_no_io: int
    sendfile_io_count: int
    sendfile_pages_sent: int
    sendfile_pages_valid: int
    sendfile_pages_bogus: int
    sendfile_requested_readahead: int
    sendfile_readahead: int
    sendfile_busy_encounters: int
    sfbufs_alloc_failed: int
    sfbufs_alloc_wait: int
    libxo_version: Optional[str] = None  # JSON only: libxo's "__version", None when absent

    @property
    def denied(self) -> int:
        """Every "requests ... denied" counter added up (mbufs, clusters, jumbo, sfbufs)."""
        return (self.mbuf_failures + self.cluster_failures + self.packet_failures + self.jumbop_failures
                + self.jumbo9_failures + self.jumbo16_failures + self.sfbufs_alloc_failed)

    @property
    def delayed(self) -> int:
        """Every "requests ... delayed" counter added up."""
        return (self.mbuf_sleeps + self.cluster_sleeps + self.packet_sleeps + self.jumbop_sleeps
                + self.jumbo9_sleeps + self.jumbo16_sleeps + self.sfbufs_alloc_wait)


# (total, current, cache): mbpr prints total = current + cache for each of these
_TOTALS = (("mbuf_total", "mbuf_current", "mbuf_cache"), ("cluster_total", "cluster_current", "cluster_cache"),
           ("jumbo_total", "jumbo_count", "jumbo_cache"), ("jumbo9_total", "jumbo9_count", "jumbo9_cache"),
           ("jumbo16_total", "jumbo16_count", "jumbo16_cache"))


def _checked(values: dict[str, Optional[int]], text: str, version: Optional[str] = None) -> MbufStats:
    """MbufStats after the sums mbpr() guarantees: a total that is not current + cache is a
    garbled capture, not a kernel state."""
    for total, current, cache in _TOTALS:
        if values[total] != (values[current] or 0) + (values[cache] or 0):
            fail(COMMAND, *json_line_of(text, total.split("_")[0]),
                 f"{total}: {values[total]} is not {current} + {cache} = {values[current]} + {values[cache]}")
    return MbufStats(**values, libxo_version=version)  # type: ignore[arg-type]


def _field(key: str) -> str:
    return key.replace("-", "_")


def parse(text: str) -> MbufStats:
    """Parse the text or the libxo JSON form (JSON when the output starts with '{')."""
    return _libxo.text_or_json(COMMAND, text, "netstat -m always prints its counters", _parse_text, _parse_json)


def _parse_json(text: str) -> MbufStats:
    stats, version = _libxo.object_container(COMMAND, text, CONTAINER)
    _libxo.only_keys(COMMAND, text, stats, set(_ALL_KEYS), CONTAINER)
    values: dict[str, Optional[int]] = {}
    for key in _ALL_KEYS:
        if key in _OPTIONAL_KEYS and key not in stats:
            values[_field(key)] = None
            continue
        values[_field(key)] = _libxo.count(COMMAND, text, stats, key, CONTAINER)
    present = [k for k in _OPTIONAL_KEYS if k in stats]
    if present and len(present) != len(_OPTIONAL_KEYS):
        fail(COMMAND, *json_line_of(text, present[0]), "sfbufs in use: all three of current/peak/max or none")
    return _checked(values, text, version)


def _parse_text(text: str) -> MbufStats:
    values: dict[str, Optional[int]] = {}
    lines = list(content_lines(text))
    at = 0
    for pattern, keys, optional, repeats in _PATTERNS:
        no, line = lines[at] if at < len(lines) else (len(lines) + 1, "")
        m = pattern.fullmatch(line.rstrip())
        if m is None:
            if optional:
                values.update({_field(k): None for k in keys})
                continue
            want = pattern.pattern.replace("([0-9]+)", "N").replace("\\", "")
            fail(COMMAND, no, line, f"expected '{want}'" if line else f"output ends before '{want}'")
        numbers = [int(g) for g in m.groups()]
        if repeats and numbers[-1] != values["jumbo_page_size"]:
            fail(COMMAND, no, line, f"page size {numbers[-1]}k differs from the jumbo line's "
                                    f"{values['jumbo_page_size']}k")
        values.update({_field(k): n for k, n in zip(keys, numbers)})
        at += 1
    if at < len(lines):
        fail(COMMAND, *lines[at], "unexpected line after the last netstat -m counter")
    return _checked(values, text)
