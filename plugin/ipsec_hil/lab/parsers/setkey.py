"""`setkey -D` (FreeBSD libipsec pfkey_dump.c: pfkey_sadump) -> SadDump: the SAD with keys.

This is where ESP keys come from for decrypting captures (scapy), so the keys are parsed
exactly (hex, continuation lines joined) -- and never shown: the dataclasses hide them from
repr, and an error on a key line quotes the line with its hex masked.
Per SA, in pfkey_sadump's order:
    src dst                                   (NAT-T: src[port] dst[port], satype esp-udp)
    \tesp mode=tunnel spi=N(0x...) reqid=N(0x...)
    \tE: aes-gcm-16  <hex>   |   \tE: aes-cbc <hex> + \tA: hmac-sha2-256 <hex>
    \tseq=0x... replay=N flags=0x... state=mature
    \thw offl if: IF[,IF...]                 (kernels with option IPSEC_OFFLOAD, SA offloaded)
    \tcreated: ... current: ... / diff: / last: / current: N(bytes) / allocated: N  (lifetime)
    \tsadb_seq=N pid=N refcnt=N
    \tsw offl use: T\tsw offl allocated: N\tsw offl: N(bytes)    (IPSEC_OFFLOAD kernels)
    \thw offl use: T\thw offl allocated: N\thw offl: N(bytes)
`No SAD entries.` -> no SAs; empty output is an error (setkey always says something).

Algorithm names come from str_alg_enc: FreeBSD 14 prints SADB_X_EALG_AESCBC as `aes-cbc`;
releases before it named the same number `rijndael-cbc`. Both map to the suite's
`aes-cbc-hmac-sha256` (SadEntry.cipher).

`replay=` is the anti-replay bitmap size in BYTES (sadb_sa_replay, or the SA_REPLAY
extension's packet count >> 3); strongSwan's kernel-pfkey sets it on the inbound SA only, as
(replay_window + 7) / 8 on the BSDs, so a 32-packet window reads `replay=4` inbound and
`replay=0` outbound. SadEntry keeps the printed number as replay_bytes and derives
replay_window_packets = 8 x replay_bytes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from ._base import fail
from ._lines import LineTable, content_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("setkey", "-D")
_LINES = LineTable(COMMAND, {
    "addrs": r"(?P<src>[0-9a-fA-F:.]+)(?:\[(?P<sport>[0-9]+)\])? (?P<dst>[0-9a-fA-F:.]+)(?:\[(?P<dport>[0-9]+)\])?",
    "proto": r"\t(?P<satype>esp|ah|ipcomp|tcp|esp-udp) mode=(?P<mode>any|transport|tunnel) "
             r"spi=(?P<spi>[0-9]+)\(0x(?P<spihex>[0-9a-f]{8})\) reqid=(?P<reqid>[0-9]+)\(0x(?P<reqidhex>[0-9a-f]{8})\)",
    "key": r"\t(?P<which>[EA]): (?P<alg>[a-z0-9-]+)  ?(?P<hex>[0-9a-f]+(?: [0-9a-f]+)*)\s*",
    "key_cont": r"\t? +(?P<hex>[0-9a-f]{2,8}(?: [0-9a-f]{2,8})*)\s*",
    "state": r"\tseq=0x(?P<seq>[0-9a-f]{8}) replay=(?P<replay>[0-9]+) flags=0x(?P<flags>[0-9a-f]{8}) "
             r"state=(?P<state>larval|mature|dying|dead)\s*",
    "hw_if": r"\thw offl if: (?P<ifs>[^\s,]+(?:,[^\s,]+)*)\s*",
    "created": r"\tcreated: (?P<created>.+?)\tcurrent: (?P<now>.+?)\s*",
    "diff": r"\tdiff: (?P<diff>[0-9]+)\(s\)\thard: (?P<hard>[0-9]+)\(s\)\tsoft: (?P<soft>[0-9]+)\(s\)\s*",
    "last": r"\tlast: (?P<last>.*?)\thard: (?P<hard>[0-9]+)\(s\)\tsoft: (?P<soft>[0-9]+)\(s\)\s*",
    "bytes": r"\tcurrent: (?P<cur>[0-9]+)\(bytes\)\thard: (?P<hard>[0-9]+)\(bytes\)\tsoft: (?P<soft>[0-9]+)\(bytes\)\s*",
    "alloc": r"\tallocated: (?P<alloc>[0-9]+)\thard: (?P<hard>[0-9]+)\tsoft: (?P<soft>[0-9]+)\s*",
    "tail": r"\tsadb_seq=(?P<seq>[0-9]+) pid=(?P<pid>[0-9]+) refcnt=(?P<ref>[0-9]+)\s*",
    # str_time prints "Nov 29 20:00:01 2026", or 20 blanks for "never"
    "offl": r"\t(?P<who>sw|hw) offl use: (?P<use>.*?)\t(?P=who) offl allocated: (?P<alloc>[0-9]+)"
            r"\t(?P=who) offl: (?P<bytes>[0-9]+)\(bytes\)\s*",
})
# for error messages: a key line's kind and algorithm stay, its hex does not
_KEY_PREFIX = re.compile(r"(?P<keep>\s*[EA]:\s*\S*).*")
_HEXISH = re.compile(r"[\s0-9a-fA-Fx]+")

#: setkey's encryption name (str_alg_enc) -> the suite's cipher, given the auth name
_CIPHERS = {
    ("aes-gcm-16", None): "aes-gcm-16",
    ("aes-cbc", "hmac-sha2-256"): "aes-cbc-hmac-sha256",  # FreeBSD 14 (SADB_X_EALG_AESCBC)
    ("rijndael-cbc", "hmac-sha2-256"): "aes-cbc-hmac-sha256",  # the same number, older releases
}


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
    satype: str  # esp | esp-udp (NAT-T) | ah | ipcomp | tcp
    mode: str
    spi: int
    reqid: int
    state: str
    replay_bytes: int  # `replay=` as printed: the anti-replay bitmap in BYTES (0: no window, outbound)
    seq: int
    flags: int
    enc_alg: Optional[str] = None  # as setkey names it: aes-gcm-16, aes-cbc (rijndael-cbc before 14), null ...
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
    # IPSEC_OFFLOAD kernels (FreeBSD main, e.g. mlx5 inline offload); None: the line was absent
    hw_offload_ifs: Optional[tuple[str, ...]] = None  # `hw offl if:` interfaces holding the SA
    sw_offload_use: Optional[str] = None  # `sw offl use:` first use through the offload path
    sw_offload_packets: Optional[int] = None  # `sw offl allocated:` packets the stack handed to offload
    sw_offload_bytes: Optional[int] = None  # `sw offl: N(bytes)`
    hw_offload_use: Optional[str] = None
    hw_offload_packets: Optional[int] = None  # `hw offl allocated:` packets the driver reports
    hw_offload_bytes: Optional[int] = None  # `hw offl: N(bytes)`: bytes the hardware processed
    replay_window_packets: int = field(init=False)  # 8 x replay_bytes: the window in packets

    def __post_init__(self) -> None:
        object.__setattr__(self, "replay_window_packets", 8 * self.replay_bytes)

    @property
    def cipher(self) -> Optional[str]:
        """The project's cipher name (aes-gcm-16 | aes-cbc-hmac-sha256) or None."""
        return _CIPHERS.get((self.enc_alg or "", self.auth_alg))


@dataclass(frozen=True)
class SadDump:
    entries: tuple[SadEntry, ...]

    def by_spi(self, spi: int) -> list[SadEntry]:
        return [e for e in self.entries if e.spi == spi]


def _blank_none(text: str) -> Optional[str]:
    """str_time's 20 blanks mean 'never' (time 0)."""
    return text.strip() or None


def _offload_line(cur: dict[str, Any], m: re.Match[str], no: int, line: str) -> None:
    who = m["who"]
    if "sadb_seq" not in cur or f"{who}_offload_packets" in cur:
        fail(COMMAND, no, line, f"unexpected '{who} offl' line (it follows sadb_seq, once per SA)")
    if who == "sw" and "hw_offload_packets" in cur:
        fail(COMMAND, no, line, "'sw offl' line after the 'hw offl' line")
    cur.update({f"{who}_offload_use": _blank_none(m["use"]), f"{who}_offload_packets": int(m["alloc"]),
                f"{who}_offload_bytes": int(m["bytes"])})


def parse(text: str) -> SadDump:
    if _LINES.says_none(text, "No SAD entries."):
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
        if cur["sport"] is not None and cur["satype"] != "esp-udp":
            fail(COMMAND, at[0], at[1], f"SA {cur['src']} -> {cur['dst']}: NAT-T ports but satype "
                 f"{cur['satype']} (pfkey_sadump prints ports only with esp-udp)")
        entries.append(SadEntry(**cur))

    for no, line in content_lines(text):
        if key_open and (m := _LINES.match(line, "key_cont")):
            cur[key_open] += m["hex"].replace(" ", "")  # type: ignore[index]
            continue
        key_open = None
        kind, m = _LINES.classify(line)
        if kind == "addrs":
            close()
            if (m["sport"] is None) != (m["dport"] is None):
                fail(COMMAND, no, line, "NAT-T port on one address only")
            cur = dict(src=m["src"], dst=m["dst"], sport=int(m["sport"]) if m["sport"] else None,
                       dport=int(m["dport"]) if m["dport"] else None)
            at = (no, _masked(line))
            continue
        if cur is None:
            fail(COMMAND, no, line, "expected an SA's 'src dst' line")
        if kind == "proto":
            if "satype" in cur or int(m["spi"]) != int(m["spihex"], 16) or int(m["reqid"]) != int(m["reqidhex"], 16):
                fail(COMMAND, no, line, "unexpected protocol line or decimal/hex SPI/reqid disagree")
            cur.update(satype=m["satype"], mode=m["mode"], spi=int(m["spi"]), reqid=int(m["reqid"]))
        elif kind == "key":
            slot = "enc" if m["which"] == "E" else "auth"
            if "satype" not in cur or f"{slot}_alg" in cur or "state" in cur:
                fail(COMMAND, no, _masked(line), f"unexpected {m['which']}: line")
            cur[f"{slot}_alg"], cur[f"{slot}_key"] = m["alg"], m["hex"].replace(" ", "")
            key_open = f"{slot}_key"
        elif kind == "state":
            if "satype" not in cur or "state" in cur:
                fail(COMMAND, no, line, "unexpected seq/replay/state line")
            cur.update(seq=int(m["seq"], 16), replay_bytes=int(m["replay"]), flags=int(m["flags"], 16),
                       state=m["state"])
        elif kind == "hw_if":
            if "state" not in cur or "hw_offload_ifs" in cur or "created" in cur or "sadb_seq" in cur:
                fail(COMMAND, no, line, "unexpected 'hw offl if:' line (it follows the state line)")
            cur["hw_offload_ifs"] = tuple(m["ifs"].split(","))
        elif kind == "offl":
            _offload_line(cur, m, no, line)
        elif kind == "created":
            cur["created"] = m["created"]
        elif kind == "diff":
            cur.update(lifetime_hard_s=int(m["hard"]), lifetime_soft_s=int(m["soft"]))
        elif kind == "last":
            cur["last_use"] = _blank_none(m["last"])
        elif kind == "bytes":
            cur["bytes"] = int(m["cur"])
        elif kind == "alloc":
            cur["allocations"] = int(m["alloc"])
        elif kind == "tail":
            if "state" not in cur or "sadb_seq" in cur:
                fail(COMMAND, no, line, "unexpected sadb_seq line")
            cur.update(sadb_seq=int(m["seq"]), pid=int(m["pid"]), refcnt=int(m["ref"]))
        elif line.lstrip().startswith(("E:", "A:")):
            fail(COMMAND, no, _masked(line), "garbled key line")
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
