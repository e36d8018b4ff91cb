"""`swanctl --list-sas --raw` (the vici message dump) -> SaList, the same type as the text parser.

One line per vici message: `list-sa event {<ike> {k=v ... child-sas {<child>-<id> {...}}}}`
per IKE_SA, then `list-sas reply {}`. Sections are `name {...}`, values `k=v`, lists
`k=[a b]` (items may carry `[proto/port]`). A value may contain spaces (identities such as
`C=CH, O=x, CN=y`): a following word that is neither `key=` nor a section name nor `}`
continues the value. Keys unknown to strongSwan 5.9.8's list-sas are errors.
Output without the final `list-sas reply` line is an error (swanctl always prints it).
"""
from __future__ import annotations

import re
from typing import Any, NoReturn, Optional, Union

from ._base import fail, numbered_lines
from ._swan import CHILD_STATES, IKE_STATES, MODES, ChildSa, IkeSa, SaList
from ipsec_hil.lab.command import Command

COMMAND = Command("swanctl", "--list-sas", "--raw")
Node = Union[str, list[str], dict[str, Any]]

IKE_KEYS = frozenset("""uniqueid version state local-host local-port local-id remote-host remote-port
remote-id remote-eap-id remote-xauth-id initiator initiator-spi responder-spi nat-local nat-remote
nat-fake nat-any if-id-in if-id-out encr-alg encr-keysize integ-alg integ-keysize prf-alg dh-group
ppk established rekey-time reauth-time life-time local-vips remote-vips tasks-queued tasks-active
tasks-passive child-sas""".split())
CHILD_KEYS = frozenset("""name protocol reqid state mode uniqueid spi-in spi-out cpi-in cpi-out
mark-in mark-mask-in mark-out mark-mask-out if-id-in if-id-out encap label encr-alg encr-keysize
integ-alg integ-keysize prf-alg dh-group esn bytes-in packets-in use-in bytes-out packets-out
use-out rekey-time life-time install-time local-ts remote-ts""".split())
_KEY_START = re.compile(r"[a-z0-9_-]+=")
_MESSAGE = re.compile(r"(?P<label>list-sa event|list-sas reply) \{")


class _Reader:
    """Recursive-descent reader over one raw line."""

    def __init__(self, no: int, line: str, pos: int) -> None:
        self.no, self.s, self.i = no, line, pos

    def fail(self, why: str) -> NoReturn:
        fail(COMMAND, self.no, self.s, f"column {self.i + 1}: {why}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def name(self) -> str:
        start = self.i
        while self.peek() not in ("", " ", "=", "{", "}", "[", "]"):
            self.i += 1
        if start == self.i:
            self.fail("expected a name")
        return self.s[start:self.i]

    def section(self) -> dict[str, Node]:
        """Body after '{' up to and including the matching '}'."""
        items: dict[str, Node] = {}
        while True:
            self.ws()
            if self.peek() == "}":
                self.i += 1
                return items
            if not self.peek():
                self.fail("unterminated section")
            key = self.name()
            if key in items:
                self.fail(f"{key!r} given twice")
            self.ws()
            if self.peek() == "{":
                self.i += 1
                items[key] = self.section()
            elif self.peek() == "=":
                self.i += 1
                if self.peek() == "[":
                    self.i += 1
                    items[key] = self.items()
                else:
                    items[key] = self.value()
            else:
                self.fail(f"expected '=' or '{{' after {key!r}")

    def value(self) -> str:
        start = self.i
        self._word()
        while self.peek() == " ":
            j = self.i
            self.ws()
            rest = self.s[self.i:]
            nxt = re.match(r"[^ {}]*", rest).group(0)  # type: ignore[union-attr]
            after = rest[len(nxt):].lstrip(" ")
            if not nxt or _KEY_START.match(nxt) or after.startswith("{"):
                self.i = j
                break
            self._word()
        if start == self.i:
            self.fail("empty value")
        return self.s[start:self.i]

    def _word(self) -> None:
        while self.peek() not in ("", " ", "}"):
            self.i += 1

    def items(self) -> list[str]:
        out: list[str] = []
        while True:
            self.ws()
            if self.peek() == "]":
                self.i += 1
                return out
            start, depth = self.i, 0
            while True:
                c = self.peek()
                if not c or c in "{}":
                    self.fail("unterminated list")
                if c == "[":
                    depth += 1
                elif c == "]":
                    if depth == 0:
                        break
                    depth -= 1
                elif c == " " and depth == 0:
                    break
                self.i += 1
            out.append(self.s[start:self.i])


def parse(text: str) -> SaList:
    ike_sas: list[IkeSa] = []
    replied = False
    for no, line in numbered_lines(text):
        if not line.strip():
            continue
        if replied:
            fail(COMMAND, no, line, "line after the 'list-sas reply' message")
        m = _MESSAGE.match(line)
        if not m:
            fail(COMMAND, no, line, "expected 'list-sa event {' or 'list-sas reply {'")
        reader = _Reader(no, line, m.end())
        body = reader.section()
        if line[reader.i:].strip():
            reader.fail("text after the message")
        if m["label"] == "list-sas reply":
            replied = True
            continue
        if len(body) != 1:
            fail(COMMAND, no, line, "a list-sa event must hold exactly one IKE_SA section")
        (name, ike), = body.items()
        if not isinstance(ike, dict):
            fail(COMMAND, no, line, f"IKE_SA {name!r} is not a section")
        ike_sas.append(_ike(no, line, name, ike))
    if not replied:
        fail(COMMAND, 0, text[-200:], "no final 'list-sas reply' message (output truncated?)")
    return SaList(ike_sas=tuple(ike_sas))


class _Fields:
    """Typed access to one section's keys, errors naming the section and key."""

    def __init__(self, no: int, line: str, where: str, d: dict[str, Node], known: frozenset[str]) -> None:
        self.no, self.line, self.where, self.d = no, line, where, d
        for key in d:
            if key not in known:
                self.fail(key, "unknown key")

    def fail(self, key: str, why: str) -> NoReturn:
        fail(COMMAND, self.no, self.line, f"{self.where}.{key}: {why}")

    def text(self, key: str, required: bool = True) -> Optional[str]:
        v = self.d.get(key)
        if v is None:
            if required:
                self.fail(key, "missing")
            return None
        if not isinstance(v, str):
            self.fail(key, "expected a value")
        return v

    def num(self, key: str, required: bool = False, *, signed: bool = False) -> Optional[int]:
        """A decimal number; ``signed`` for the timers charon prints as int64 (a rekey time
        already past is negative: ``rekey-time=-1`` right after an automatic rekey)."""
        v = self.text(key, required)
        if v is None:
            return None
        digits = v[1:] if signed and v.startswith("-") else v
        if not digits.isdigit():
            self.fail(key, f"expected a decimal number, found {v!r}")
        return int(v)

    def items(self, key: str) -> tuple[str, ...]:
        v = self.d.get(key, [])
        if not isinstance(v, list):
            self.fail(key, "expected a list")
        return tuple(v)

    def spi(self, key: str, digits: int, required: bool) -> Optional[str]:
        v = self.text(key, required)
        if v is not None and not re.fullmatch(f"[0-9a-f]{{{digits}}}", v):
            self.fail(key, f"expected {digits} hex digits, found {v!r}")
        return v

    def proposal(self, with_prf_dh: bool) -> Optional[str]:
        parts = []
        for alg, ks in (("encr-alg", "encr-keysize"), ("integ-alg", "integ-keysize")):
            a = self.text(alg, False)
            if a:
                k = self.num(ks)
                parts.append(f"{a}-{k}" if k else a)
        parts += [p for p in (self.text("prf-alg", False), self.text("dh-group", False)) if p]
        if self.text("esn", False) == "1":
            parts.append("ESN")
        if with_prf_dh and self.text("ppk", False) == "yes":
            parts.append("PPK")
        return "/".join(parts) if parts else None


def _ike(no: int, line: str, name: str, d: dict[str, Node]) -> IkeSa:
    f = _Fields(no, line, name, d, IKE_KEYS)
    state = f.text("state")
    if state not in IKE_STATES:
        f.fail("state", f"unknown IKE_SA state {state!r}")
    if f.text("initiator", False) not in (None, "yes"):
        f.fail("initiator", "expected 'yes' or absent")
    children_node = d.get("child-sas", {})
    if not isinstance(children_node, dict):
        f.fail("child-sas", "expected a section")
    children = tuple(_child(no, line, f"{name}.child-sas.{cname}", c) for cname, c in children_node.items())
    return IkeSa(
        name=name, uniqueid=f.num("uniqueid", True), state=state, version=f.num("version", True),  # type: ignore[arg-type]
        initiator_spi=f.spi("initiator-spi", 16, True), responder_spi=f.spi("responder-spi", 16, True),  # type: ignore[arg-type]
        initiator=f.text("initiator", False) == "yes",
        local_id=f.text("local-id"), local_host=f.text("local-host"), local_port=f.num("local-port", True),  # type: ignore[arg-type]
        remote_id=f.text("remote-id"), remote_host=f.text("remote-host"), remote_port=f.num("remote-port", True),  # type: ignore[arg-type]
        proposal=f.proposal(True), established_ago=f.num("established"), rekey_in=f.num("rekey-time", signed=True),
        reauth_in=f.num("reauth-time", signed=True), expires_in=f.num("life-time", signed=True),
        local_vips=f.items("local-vips"), remote_vips=f.items("remote-vips"),
        tasks_queued=f.items("tasks-queued"), tasks_active=f.items("tasks-active"),
        tasks_passive=f.items("tasks-passive"), children=children,
    )


def _child(no: int, line: str, where: str, d: Node) -> ChildSa:
    if not isinstance(d, dict):
        fail(COMMAND, no, line, f"{where}: expected a section")
    f = _Fields(no, line, where, d, CHILD_KEYS)
    state, mode = f.text("state"), f.text("mode")
    if state not in CHILD_STATES:
        f.fail("state", f"unknown CHILD_SA state {state!r}")
    if mode not in MODES:
        f.fail("mode", f"unknown CHILD_SA mode {mode!r}")
    if f.text("encap", False) not in (None, "yes"):
        f.fail("encap", "expected 'yes' or absent")
    return ChildSa(
        name=f.text("name"), uniqueid=f.num("uniqueid", True), reqid=f.num("reqid", True), state=state,  # type: ignore[arg-type]
        mode=mode, encap=f.text("encap", False) == "yes", protocol=f.text("protocol"),  # type: ignore[arg-type]
        proposal=f.proposal(False) or "", installed_ago=f.num("install-time"), rekey_in=f.num("rekey-time", signed=True),
        expires_in=f.num("life-time", signed=True), spi_in=f.spi("spi-in", 8, False), spi_out=f.spi("spi-out", 8, False),
        cpi_in=f.spi("cpi-in", 4, False), cpi_out=f.spi("cpi-out", 4, False),
        bytes_in=f.num("bytes-in"), packets_in=f.num("packets-in"), use_in=f.num("use-in"),
        bytes_out=f.num("bytes-out"), packets_out=f.num("packets-out"), use_out=f.num("use-out"),
        local_ts=f.items("local-ts"), remote_ts=f.items("remote-ts"),
    )
