"""`setkey -D` (FreeBSD libipsec pfkey_dump.c) -> SadDump: the SAD with keys.

This is where ESP keys come from for decrypting captures (scapy), so the keys are parsed
exactly (hex, continuation lines joined) -- and never shown: the dataclasses hide them from
repr, and an error on a key line quotes the line with its hex masked.
Per SA:
    src dst                                   (NAT-T: src[port] dst[port])
    \tesp mode=tunnel spi=N(0x...) reqid=N(0x...)
    \tE: aes-gcm-16  <hex>   |   \tE: rijndael-cbc/aes-cbc <hex> + \tA: hmac-sha2-256 <hex>
    \tseq=0x... replay=N flags=0x... state=mature
    \tcreated: ... current: ... / diff: / last: / current: N(bytes) / allocated: N  (lifetime)
    \tsadb_seq=N pid=N refcnt=N
`No SAD entries.` -> no SAs; empty output is an error (setkey always says something).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from ._base import fail, numbered_lines

COMMAND = "setkey -D"
_ADDRS = re.compile(r"(?P<src>[0-9a-fA-F:.]+)(?:\[(?P<sport>[0-9]+)\])? (?P<dst>[0-9a-fA-F:.]+)(?:\[(?P<dport>[0-9]+)\])?")
_PROTO = re.compile(
    r"\t(?P<satype>esp|ah|ipcomp|tcp|esp-udp) mode=(?P<mode>any|transport|tunnel) "
    r"spi=(?P<spi>[0-9]+)\(0x(?P<spihex>[0-9a-f]{8})\) reqid=(?P<reqid>[0-9]+)\(0x(?P<reqidhex>[0-9a-f]{8})\)"
)
_KEY = re.compile(r"\t(?P<which>[EA]): (?P<alg>[a-z0-9-]+)  ?(?P<hex>[0-9a-f]+(?: [0-9a-f]+)*)\s*")
_KEY_CONT = re.compile(r"\t? +(?P<hex>[0-9a-f]{2,8}(?: [0-9a-f]{2,8})*)\s*")
_STATE = re.compile(
    r"\tseq=0x(?P<seq>[0-9a-f]{8}) replay=(?P<replay>[0-9]+) flags=0x(?P<flags>[0-9a-f]{8}) "
    r"state=(?P<state>larval|mature|dying|dead)\s*"
)
_CREATED = re.compile(r"\tcreated: (?P<created>.+?)\tcurrent: (?P<now>.+?)\s*")
_DIFF = re.compile(r"\tdiff: (?P<diff>[0-9]+)\(s\)\thard: (?P<hard>[0-9]+)\(s\)\tsoft: (?P<soft>[0-9]+)\(s\)\s*")
_LAST = re.compile(r"\tlast: (?P<last>.*?)\thard: (?P<hard>[0-9]+)\(s\)\tsoft: (?P<soft>[0-9]+)\(s\)\s*")
_BYTES = re.compile(
    r"\tcurrent: (?P<cur>[0-9]+)\(bytes\)\thard: (?P<hard>[0-9]+)\(bytes\)\tsoft: (?P<soft>[0-9]+)\(bytes\)\s*"
)
_ALLOC = re.compile(r"\tallocated: (?P<alloc>[0-9]+)\thard: (?P<hard>[0-9]+)\tsoft: (?P<soft>[0-9]+)\s*")
_TAIL = re.compile(r"\tsadb_seq=(?P<seq>[0-9]+) pid=(?P<pid>[0-9]+) refcnt=(?P<ref>[0-9]+)\s*")
_KEY_PREFIX = re.compile(r"(?P<keep>\s*[EA]:\s*\S*).*")
_HEXISH = re.compile(r"[\s0-9a-fA-Fx]+")


def _masked(line: str) -> str:
    """LINE for an error message: key material replaced, the rest kept."""
    if m := _KEY_PREFIX.fullmatch(line):
        return m["keep"] + " <key masked>"
    if _HEXISH.fullmatch(line):
        return "<hex masked>"
    return line


@dataclass(frozen=True)
class SadEntry:
    src: str
    dst: str
    satype: str  # esp | ah | ipcomp | tcp
    mode: str
    spi: int
    reqid: int
    state: str
    replay: int
    seq: int
    flags: int
    enc_alg: Optional[str] = None  # as setkey names it: aes-gcm-16, rijndael-cbc, aes-cbc, null ...
    enc_key: Optional[str] = field(default=None, repr=False)  # hex, secret
    auth_alg: Optional[str] = None  # hmac-sha2-256, ...
    auth_key: Optional[str] = field(default=None, repr=False)  # hex, secret
    sport: Optional[int] = None  # NAT-T ports
    dport: Optional[int] = None
    bytes: Optional[int] = None  # lifetime current bytes
    allocations: Optional[int] = None
    created: Optional[str] = None
    last_use: Optional[str] = None
    lifetime_hard_s: Optional[int] = None
    lifetime_soft_s: Optional[int] = None
    sadb_seq: Optional[int] = None
    pid: Optional[int] = None
    refcnt: Optional[int] = None

    @property
    def cipher(self) -> Optional[str]:
        """The project's cipher name (aes-gcm-16 | aes-cbc-hmac-sha256) or None."""
        if self.enc_alg == "aes-gcm-16" and self.auth_alg is None:
            return "aes-gcm-16"
        if self.enc_alg in ("aes-cbc", "rijndael-cbc") and self.auth_alg == "hmac-sha2-256":
            return "aes-cbc-hmac-sha256"
        return None


@dataclass(frozen=True)
class SadDump:
    entries: tuple[SadEntry, ...]

    def by_spi(self, spi: int) -> list[SadEntry]:
        return [e for e in self.entries if e.spi == spi]


def parse(text: str) -> SadDump:
    if not text.strip():
        fail(COMMAND, 0, "", "empty output (setkey prints 'No SAD entries.' when there are none)")
    if text.strip() == "No SAD entries.":
        return SadDump(entries=())
    entries: list[SadEntry] = []
    cur: Optional[dict[str, Any]] = None
    at = (0, "")
    key_open: Optional[str] = None  # "enc_key"/"auth_key" while continuation lines may follow

    def close() -> None:
        if cur is None:
            return
        for need in ("satype", "state", "sadb_seq"):
            if need not in cur:
                fail(COMMAND, at[0], at[1], f"SA {cur['src']} -> {cur['dst']} ended without its '{need}' line")
        entries.append(SadEntry(**cur))

    for no, line in numbered_lines(text):
        if not line.strip():
            continue
        if key_open and (m := _KEY_CONT.fullmatch(line)):
            cur[key_open] += m["hex"].replace(" ", "")  # type: ignore[index]
            continue
        key_open = None
        if m := _ADDRS.fullmatch(line):
            close()
            cur = dict(src=m["src"], dst=m["dst"], sport=int(m["sport"]) if m["sport"] else None,
                       dport=int(m["dport"]) if m["dport"] else None)
            at = (no, _masked(line))
            continue
        if cur is None:
            fail(COMMAND, no, line, "expected an SA's 'src dst' line")
        if m := _PROTO.fullmatch(line):
            if "satype" in cur or int(m["spi"]) != int(m["spihex"], 16) or int(m["reqid"]) != int(m["reqidhex"], 16):
                fail(COMMAND, no, line, "unexpected protocol line or decimal/hex SPI/reqid disagree")
            cur.update(satype=m["satype"], mode=m["mode"], spi=int(m["spi"]), reqid=int(m["reqid"]))
        elif m := _KEY.fullmatch(line):
            slot = "enc" if m["which"] == "E" else "auth"
            if "satype" not in cur or f"{slot}_alg" in cur or "state" in cur:
                fail(COMMAND, no, _masked(line), f"unexpected {m['which']}: line")
            cur[f"{slot}_alg"], cur[f"{slot}_key"] = m["alg"], m["hex"].replace(" ", "")
            key_open = f"{slot}_key"
        elif line.lstrip().startswith(("E:", "A:")):
            fail(COMMAND, no, _masked(line), "garbled key line")
        elif m := _STATE.fullmatch(line):
            if "satype" not in cur or "state" in cur:
                fail(COMMAND, no, line, "unexpected seq/replay/state line")
            cur.update(seq=int(m["seq"], 16), replay=int(m["replay"]), flags=int(m["flags"], 16), state=m["state"])
        elif m := _CREATED.fullmatch(line):
            cur["created"] = m["created"]
        elif m := _DIFF.fullmatch(line):
            cur.update(lifetime_hard_s=int(m["hard"]), lifetime_soft_s=int(m["soft"]))
        elif m := _LAST.fullmatch(line):
            cur["last_use"] = m["last"].strip() or None
        elif m := _BYTES.fullmatch(line):
            cur["bytes"] = int(m["cur"])
        elif m := _ALLOC.fullmatch(line):
            cur["allocations"] = int(m["alloc"])
        elif m := _TAIL.fullmatch(line):
            if "state" not in cur or "sadb_seq" in cur:
                fail(COMMAND, no, line, "unexpected sadb_seq line")
            cur.update(sadb_seq=int(m["seq"]), pid=int(m["pid"]), refcnt=int(m["ref"]))
        else:
            fail(COMMAND, no, _masked(line), "unknown setkey line")
        at = (no, _masked(line))
    close()
    for e in entries:
        for slot in ("enc_key", "auth_key"):
            k = getattr(e, slot)
            if k is not None and len(k) % 2:
                fail(COMMAND, 0, f"spi {e.spi}", f"{slot} has an odd number of hex digits")
    return SadDump(entries=tuple(entries))
