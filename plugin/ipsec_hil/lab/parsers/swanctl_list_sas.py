"""`swanctl --list-sas` text (strongSwan 5.9.8 src/swanctl/commands/list_sas.c) -> SaList.

Counters are right-aligned (`%6s bytes, %5s packets`), so lines are matched with
regular expressions, never split on columns. Empty output means no SAs.
"""
from __future__ import annotations

from typing import Any, Optional

from ._base import fail, numbered_lines
from ._lines import LineTable
from ._swan import CHILD_STATES, CHILD_STATES_WITH_SPIS, IKE_STATES, MODES, ChildSa, IkeSa, SaList
from ipsec_hil.lab.command import Command

COMMAND = Command("swanctl", "--list-sas")

_VIPS = r"(?P<vips>(?: \[[^\]\s]+\])*)"
_ALG = r"[A-Z][A-Z0-9_]*(?:-[0-9]+)?"
_LINES = LineTable(COMMAND, {
    "ike": r"(?P<name>[^\s:]+): #(?P<uniqueid>[0-9]+), (?P<state>[A-Z]+), IKEv(?P<version>[12]), "
           r"(?P<ispi>[0-9a-f]{16})_i(?P<istar>\*?) (?P<rspi>[0-9a-f]{16})_r(?P<rstar>\*?)",
    # an IKE_SA's details, before its first child
    "local": r"  local  '(?P<id>.*)' @ (?P<host>[^\s\[]+)\[(?P<port>[0-9]+)\]" + _VIPS,
    "remote": r"  remote '(?P<id>.*)' @ (?P<host>[^\s\[]+)\[(?P<port>[0-9]+)\]"
              r"(?: EAP: '[^']*')?(?: XAuth: '[^']*')?" + _VIPS,
    "proposal": rf"  (?P<p>{_ALG}(?:/{_ALG})+)",
    "established": r"  established (?P<ago>[0-9]+)s ago(?:, rekeying in (?P<rekey>-?[0-9]+)s)?"
                   r"(?:, reauth in (?P<reauth>-?[0-9]+)s)?(?:, expires in (?P<expires>-?[0-9]+)s)?",
    "tasks": r"  (?P<kind>queued|active|passive): +(?P<tasks>\S+(?: \S+)*)",
    "child": r"  (?P<name>[^\s:]+): #(?P<uniqueid>[0-9]+), reqid (?P<reqid>[0-9]+), (?P<state>[A-Z]+), "
             rf"(?P<mode>[A-Z]+?)(?P<encap>-in-UDP)?, (?P<proto>ESP|AH):(?P<proposal>(?:{_ALG}(?:/{_ALG})*)?)",
    # a CHILD_SA's details
    "installed": r"    installed (?P<ago>[0-9]+)s ago(?:, rekeying in (?P<rekey>-?[0-9]+)s)?"
                 r"(?:, expires in (?P<expires>-?[0-9]+)s)?",
    "traffic": r"    (?P<dir>in|out) {1,2}(?P<spi>[0-9a-f]{8})(?:/(?P<cpi>[0-9a-f]{4}))?"
               r"(?: \(0x[0-9a-f]+/0x[0-9a-f]+\))?(?: \(if-id 0x[0-9a-f]+\))?"
               r", +(?P<bytes>[0-9]+) bytes, +(?P<packets>[0-9]+) packets(?:, +(?P<use>[0-9]+)s ago)?",
    "ts_local": r"    local  ?(?P<ts>(?:\S+(?: \S+)*)?)",
    "ts_remote": r"    remote ?(?P<ts>(?:\S+(?: \S+)*)?)",
})

def _opt(value: Optional[str]) -> Optional[int]:
    return None if value is None else int(value)


class _Builder:
    """Accumulates one IKE_SA and its children while lines arrive."""

    def __init__(self) -> None:
        self.ike_sas: list[IkeSa] = []
        self.ike: Optional[dict[str, Any]] = None
        self.children: list[ChildSa] = []
        self.child: Optional[dict[str, Any]] = None
        self.child_at = (0, "")
        self.ike_at = (0, "")

    def close_child(self) -> None:
        if self.child is None:
            return
        c = self.child
        if c["state"] in CHILD_STATES_WITH_SPIS and (c.get("spi_in") is None or c.get("spi_out") is None):
            fail(COMMAND, *self.child_at, f"CHILD_SA in state {c['state']} without its in/out lines")
        self.children.append(ChildSa(**c))
        self.child = None

    def close_ike(self) -> None:
        self.close_child()
        if self.ike is None:
            return
        if "remote_id" not in self.ike:
            fail(COMMAND, *self.ike_at, "IKE_SA without its 'local' and 'remote' lines")
        self.ike_sas.append(IkeSa(children=tuple(self.children), **self.ike))
        self.ike, self.children = None, []


def parse(text: str) -> SaList:
    b = _Builder()
    for no, line in numbered_lines(text):
        if not line.strip():
            fail(COMMAND, no, line, "unexpected blank line")
        m = _LINES.match(line, "ike")
        if m:
            b.close_ike()
            if m["state"] not in IKE_STATES:
                fail(COMMAND, no, line, f"unknown IKE_SA state {m['state']!r}")
            if bool(m["istar"]) == bool(m["rstar"]):
                fail(COMMAND, no, line, "exactly one of the two SPIs must carry the initiator '*'")
            b.ike = dict(
                name=m["name"], uniqueid=int(m["uniqueid"]), state=m["state"], version=int(m["version"]),
                initiator_spi=m["ispi"], responder_spi=m["rspi"], initiator=bool(m["istar"]),
            )
            b.ike_at = (no, line)
            continue
        if b.ike is None:
            fail(COMMAND, no, line, "expected an IKE_SA header '<name>: #<id>, <state>, IKEv2, ...'")
        if b.child is None and not b.children:
            if _ike_line(b.ike, no, line):
                continue
        m = _LINES.match(line, "child")
        if m:
            b.close_child()
            if "local_id" not in b.ike or "remote_id" not in b.ike:
                fail(COMMAND, no, line, "CHILD_SA before the IKE_SA's local/remote lines")
            if m["state"] not in CHILD_STATES:
                fail(COMMAND, no, line, f"unknown CHILD_SA state {m['state']!r}")
            if m["mode"] not in MODES:
                fail(COMMAND, no, line, f"unknown CHILD_SA mode {m['mode']!r}")
            b.child = dict(
                name=m["name"], uniqueid=int(m["uniqueid"]), reqid=int(m["reqid"]), state=m["state"],
                mode=m["mode"], encap=bool(m["encap"]), protocol=m["proto"], proposal=m["proposal"],
            )
            b.child_at = (no, line)
            continue
        if b.child is None:
            fail(COMMAND, no, line, "unexpected line in IKE_SA block")
        _child_line(b.child, no, line)
    b.close_ike()
    return SaList(ike_sas=tuple(b.ike_sas))


def _ike_line(ike: dict[str, Any], no: int, line: str) -> bool:
    """Handle an IKE_SA detail line; False if LINE is not one (a child follows)."""
    key, m = _LINES.classify(line, "local", "remote")
    if key is not None:
        if f"{key}_id" in ike:
            fail(COMMAND, no, line, f"second {key} line")
        if key == "remote" and "local_id" not in ike:
            fail(COMMAND, no, line, "remote line before local line")
        ike[f"{key}_id"], ike[f"{key}_host"], ike[f"{key}_port"] = m["id"], m["host"], int(m["port"])
        ike[f"{key}_vips"] = tuple(v.strip()[1:-1] for v in m["vips"].split(" ") if v)
        return True
    if "remote_id" not in ike:
        fail(COMMAND, no, line, "expected the IKE_SA's 'local' and 'remote' lines")
    kind, m = _LINES.classify(line, "proposal", "established", "tasks")
    if kind == "proposal":
        if "proposal" in ike or "established_ago" in ike:
            fail(COMMAND, no, line, "unexpected proposal line")
        ike["proposal"] = m["p"]
    elif kind == "established":
        if "established_ago" in ike:
            fail(COMMAND, no, line, "second 'established' line")
        ike.update(established_ago=int(m["ago"]), rekey_in=_opt(m["rekey"]), reauth_in=_opt(m["reauth"]),
                   expires_in=_opt(m["expires"]))
    elif kind == "tasks":
        ike[f"tasks_{m['kind']}"] = tuple(m["tasks"].split(" "))
    return kind is not None


def _child_line(child: dict[str, Any], no: int, line: str) -> None:
    kind, m = _LINES.read(no, line, "unexpected line in CHILD_SA block", "installed", "traffic", "ts_local", "ts_remote")
    if kind == "installed":
        if "installed_ago" in child or child["state"] not in CHILD_STATES_WITH_SPIS:
            fail(COMMAND, no, line, "unexpected 'installed' line")
        child.update(installed_ago=int(m["ago"]), rekey_in=_opt(m["rekey"]), expires_in=_opt(m["expires"]))
    elif kind == "traffic":
        d = m["dir"]
        if f"spi_{d}" in child or "installed_ago" not in child or (d == "out" and "spi_in" not in child):
            fail(COMMAND, no, line, f"unexpected '{d}' line")
        child.update({f"spi_{d}": m["spi"], f"cpi_{d}": m["cpi"], f"bytes_{d}": int(m["bytes"]),
                      f"packets_{d}": int(m["packets"]), f"use_{d}": _opt(m["use"])})
    elif kind == "ts_local":
        if "local_ts" in child:
            fail(COMMAND, no, line, "second 'local' traffic selector line")
        child["local_ts"] = tuple(m["ts"].split()) if m["ts"] else ()
    else:
        if "remote_ts" in child or "local_ts" not in child:
            fail(COMMAND, no, line, "unexpected 'remote' traffic selector line")
        child["remote_ts"] = tuple(m["ts"].split()) if m["ts"] else ()
