"""`setkey -DP` (FreeBSD libipsec pfkey_dump.c: pfkey_spdump) -> SpdDump: the SPD.

The policies each child installs, so bring-up and restore can check the SPD as well as the
SAD. Per policy, as pfkey_spdump prints it (ipsec_dump_policy with delimiter "\\n\\t"):
    SRC[/PLEN][PORT|any] DST[/PLEN][PORT|any] UPPER   (str_prefport: /PLEN only when not the
                                                     full length; no [port] for icmp6, whose
                                                     `icmp6 T,C` carries type and code)
    \\tDIR ACTION                                     (in|out|any; discard|none|ipsec|entrust|bypass)
    \\tPROTO/MODE/TSRC-TDST/LEVEL[:REQID|#REQID]      (one line per request, ipsec only; ':' for
                                                     reqids up to IPSEC_MANUAL_REQID_MAX, '#' above)
    \\tcreated: TIME  lastused: TIME                  (str_time: 20 blanks for "never")
    \\tlifetime: N(s) validtime: N(s)
    \\tspid=N seq=N pid=N scope=global|ifnet|pcb [ifname=IF]
    \\trefcnt=N
`No SPD entries.` -> no policies; empty output is an error (setkey always says something).
Anything else (`upper layer protocol mismatched.`, `unknown-af`) is a ParseError naming the line.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Optional

from ._base import fail
from ._lines import LineTable, content_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("setkey", "-DP")
IPSEC_MANUAL_REQID_MAX = 0x3FFF  # netipsec/ipsec.h: larger reqids are printed with '#'

_ADDR = r"[0-9a-fA-F:.]+(?:%[\w.]+)?"
_END = rf"(?P<{{w}}>{_ADDR})(?:/(?P<{{w}}_plen>[0-9]+))?(?:\[(?P<{{w}}_port>any|[0-9]+)\])?"
_NO_SELECTOR = "(no selector, probably per-socket policy) "
_LINES = LineTable(COMMAND, {
    "selector": _END.format(w="src") + " " + _END.format(w="dst")
                + r" (?P<upper>icmp6(?: (?P<icmp_type>[0-9]+),(?P<icmp_code>[0-9]+))?|[a-z][a-z0-9.+-]*|[0-9]+)",
    "policy": r"\t(?P<dir>any|in|out) (?P<action>discard|none|ipsec|entrust|bypass)",
    "requests": r"\t(?P<proto>esp|ah|ipcomp)/(?P<mode>any|transport|tunnel)/"
                rf"(?:(?P<tsrc>{_ADDR})-(?P<tdst>{_ADDR}))?/"
                r"(?P<level>default|use|require|unique)(?:(?P<sep>[:#])(?P<reqid>[0-9]+))?",
    "created": r"\tcreated: (?P<created>.*?)  lastused: (?P<last>.*?)",
    "lifetime": r"\tlifetime: (?P<life>[0-9]+)\(s\) validtime: (?P<valid>[0-9]+)\(s\)",
    "spid": r"\tspid=(?P<spid>[0-9]+) seq=(?P<seq>[0-9]+) pid=(?P<pid>[0-9]+) "
            r"scope=(?P<scope>global|ifnet|pcb|[0-9]+) ?(?:ifname=(?P<ifname>\S+))?\s*",
    "refcnt": r"\trefcnt=(?P<ref>[0-9]+)\s*",
})

@dataclass(frozen=True)
class IpsecRequest:
    """One `proto/mode/src-dst/level[:reqid]` line of an ipsec policy."""

    protocol: str  # esp | ah | ipcomp
    mode: str  # tunnel | transport | any
    level: str  # default | use | require | unique
    tunnel_src: Optional[str] = None  # outer endpoints (tunnel mode)
    tunnel_dst: Optional[str] = None
    reqid: Optional[int] = None  # None: not printed (0)


@dataclass(frozen=True)
class SpdPolicy:
    direction: str  # in | out | any
    action: str  # ipsec | none | discard | entrust | bypass
    upper: str  # upper-layer protocol as printed: any | tcp | udp | icmp | icmp6 | ip4 | number
    spid: int
    seq: int
    pid: int
    scope: str  # global | ifnet | pcb
    refcnt: int
    src: Optional[str] = None  # selector addresses; None: per-socket policy without selector
    src_prefixlen: Optional[int] = None  # the full length (32/128) when setkey printed none
    src_port: Optional[int] = None  # None: [any]; for icmp6 the ICMP type
    dst: Optional[str] = None
    dst_prefixlen: Optional[int] = None
    dst_port: Optional[int] = None  # for icmp6 the ICMP code
    requests: tuple[IpsecRequest, ...] = ()
    ifname: Optional[str] = None  # scope=ifnet
    created: Optional[str] = None
    last_used: Optional[str] = None  # None: never used (str_time's blanks)
    lifetime_s: Optional[int] = None  # hard lifetime / validtime in seconds, 0: none
    validtime_s: Optional[int] = None

    @property
    def reqid(self) -> Optional[int]:
        """The reqid of the first request (strongSwan installs one request per policy)."""
        return self.requests[0].reqid if self.requests else None

    @property
    def src_selector(self) -> Optional[str]:
        return None if self.src is None else f"{self.src}/{self.src_prefixlen}"

    @property
    def dst_selector(self) -> Optional[str]:
        return None if self.dst is None else f"{self.dst}/{self.dst_prefixlen}"


@dataclass(frozen=True)
class SpdDump:
    policies: tuple[SpdPolicy, ...]

    def by_reqid(self, reqid: int) -> list[SpdPolicy]:
        return [p for p in self.policies if p.reqid == reqid]

    def direction(self, direction: str) -> list[SpdPolicy]:
        return [p for p in self.policies if p.direction == direction]


def _end(m: re.Match[str], which: str, icmp6: bool, no: int, line: str) -> dict[str, Any]:
    """One selector end (src or dst) checked the way str_prefport prints it."""
    addr, plen, port = m[which], m[f"{which}_plen"], m[f"{which}_port"]
    try:
        full = ipaddress.ip_address(addr.split("%", 1)[0]).max_prefixlen
    except ValueError:
        fail(COMMAND, no, line, f"{which} {addr!r} is not an IP address")
    if plen is not None and (int(plen) >= full):
        fail(COMMAND, no, line, f"{which} prefix /{plen}: setkey prints a prefix only when shorter than {full}")
    if icmp6 != (port is None):
        fail(COMMAND, no, line, f"{which}: a [port] is printed for every upper protocol but icmp6")
    return {which: addr, f"{which}_prefixlen": full if plen is None else int(plen),
            f"{which}_port": None if port in (None, "any") else int(port)}


def _selector(line: str, no: int) -> dict[str, Any]:
    if line == _NO_SELECTOR:
        return {"upper": "any"}
    m = _LINES.expect("selector", no, line, "expected a policy's selector line 'SRC DST UPPER'")
    icmp6 = m["upper"].startswith("icmp6")
    cur = {"upper": "icmp6" if icmp6 else m["upper"]}
    cur.update(_end(m, "src", icmp6, no, line))
    cur.update(_end(m, "dst", icmp6, no, line))
    if (":" in m["src"]) != (":" in m["dst"]):
        fail(COMMAND, no, line, "selector mixes address families")
    if m["icmp_type"] is not None:
        cur.update(src_port=int(m["icmp_type"]), dst_port=int(m["icmp_code"]))
    return cur


def _request(m: re.Match[str], no: int, line: str) -> IpsecRequest:
    reqid = None if m["reqid"] is None else int(m["reqid"])
    if reqid is not None and (m["sep"] == "#") != (reqid > IPSEC_MANUAL_REQID_MAX):
        fail(COMMAND, no, line,
             f"reqid {reqid} printed with '{m['sep']}' (':' up to {IPSEC_MANUAL_REQID_MAX}, '#' above)")
    if reqid == 0:
        fail(COMMAND, no, line, "reqid 0 is never printed")
    if m["mode"] == "tunnel" and m["tsrc"] is None:
        fail(COMMAND, no, line, "tunnel request without its endpoints")
    return IpsecRequest(protocol=m["proto"], mode=m["mode"], level=m["level"], tunnel_src=m["tsrc"],
                        tunnel_dst=m["tdst"], reqid=reqid)


# the kinds of line of one policy after its selector, in pfkey_spdump's order (requests may
# repeat; created/lifetime are printed only when the kernel sent those lifetimes)
_ORDER = ("policy", "requests", "created", "lifetime", "spid", "refcnt")


def _step(cur: dict[str, Any], stage: str, no: int, line: str) -> str:
    """Check that a STAGE line may come now (after the stages already seen) and return it."""
    seen = cur["_stage"]
    if _ORDER.index(stage) < _ORDER.index(seen) or (stage == seen and stage != "requests"):
        fail(COMMAND, no, line, f"'{stage}' line out of order (after '{seen}')")
    if stage == "requests" and cur["action"] != "ipsec":
        fail(COMMAND, no, line, f"request line in a '{cur['action']}' policy")
    if stage in ("created", "lifetime", "spid") and cur["action"] == "ipsec" and not cur["requests"]:
        fail(COMMAND, no, line, "ipsec policy without a request line")
    cur["_stage"] = stage
    return stage


def parse(text: str) -> SpdDump:
    if _LINES.says_none(text, "No SPD entries."):
        return SpdDump(policies=())
    policies: list[SpdPolicy] = []
    cur: Optional[dict[str, Any]] = None
    for no, line in content_lines(text):
        if cur is None:
            cur = _selector(line, no)
            cur.update(_stage="selector", requests=[], _at=(no, line))
            continue
        if cur["_stage"] == "selector":
            m = _LINES.expect("policy", no, line, "expected the '\\tDIR ACTION' line after the selector")
            cur.update(direction=m["dir"], action=m["action"], _stage="policy")
            continue
        stage, m = _LINES.read(no, line, "unknown setkey -DP line", *_ORDER[1:])
        _step(cur, stage, no, line)
        if stage == "requests":
            cur["requests"].append(_request(m, no, line))
        elif stage == "created":
            cur.update(created=m["created"].strip() or None, last_used=m["last"].strip() or None)
        elif stage == "lifetime":
            cur.update(lifetime_s=int(m["life"]), validtime_s=int(m["valid"]))
        elif stage == "spid":
            if m["ifname"] is not None and m["scope"] != "ifnet":
                fail(COMMAND, no, line, "ifname= printed for a scope other than ifnet")
            cur.update(spid=int(m["spid"]), seq=int(m["seq"]), pid=int(m["pid"]), scope=m["scope"],
                       ifname=m["ifname"])
        else:  # refcnt ends the policy
            if "spid" not in cur:
                fail(COMMAND, no, line, "refcnt line without the spid line before it")
            cur.pop("_stage"), cur.pop("_at")
            policies.append(SpdPolicy(refcnt=int(m["ref"]), **{**cur, "requests": tuple(cur["requests"])}))
            cur = None
    if cur is not None:
        no, line = cur["_at"]
        fail(COMMAND, no, line, "policy ended before its spid/refcnt lines (truncated output?)")
    return SpdDump(policies=tuple(policies))
