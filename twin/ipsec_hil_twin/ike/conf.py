"""swanctl.conf: strongSwan's settings grammar and the connections/secrets model.

Why: the twin must accept exactly the files the suite writes for hardware and refuse,
with strongSwan's messages and a file:line, what charon's parser refuses (the 001 page's
destroyed swanctl.conf lines are a case the suite must see fail).

Grammar (strongSwan settings_parser): `name {` ... `}` sections, `key = value` (the value
runs to the end of the line, a `#` comment or a `}`; double quotes allow anything with
`\\` escapes), `include GLOB` (relative to the including file, at any level), `#` comments.
Two statements on one line only where a `{` or `}` separates them, as in strongSwan.

Model errors are per connection as charon reports them (`invalid value for: X`,
`unknown option: X`): the connection is discarded, the others load.  Secrets never
appear in messages.
"""
from __future__ import annotations

import base64
import binascii
import glob as _glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ipsec_hil_twin.errors import IkeError

from .proposals import Combo, ProposalError, parse_proposals
from .ts import TS, TSError, parse_ts

NAME_RE = re.compile(r'[^\s#{}=:,"]+')
MAX_INCLUDE_DEPTH = 10


class ConfSyntaxError(IkeError, ValueError):
    """The file cannot be parsed; `str()` is strongSwan's `FILE:LINE: syntax error, ...`."""

    def __init__(self, file: str, line: int, why: str) -> None:
        self.file, self.line, self.why = file, line, why
        super().__init__(f"{file}:{line}: {why}")


@dataclass
class Value:
    value: str
    file: str
    line: int


@dataclass
class Section:
    """A parsed section: ordered keys and subsections, each remembering where it was."""

    name: str
    file: str
    line: int
    values: dict[str, Value] = field(default_factory=dict)
    sections: dict[str, "Section"] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)   # root only: e.g. includes matching nothing

    def where(self) -> str:
        return f"{self.file}:{self.line}"


# ---------------------------------------------------------------- lexer + parser

def _tokens(text: str, file: str):
    """Yield (kind, value, line): NAME, VALUE, '{', '}', '=', NL, EOF."""
    i, line, n = 0, 1, len(text)
    after_eq = False
    while i < n:
        c = text[i]
        if c == "\n":
            yield ("NL", None, line)
            line += 1
            i += 1
            after_eq = False
            continue
        if c in " \t\r":
            i += 1
            continue
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if after_eq:
            after_eq = False
            if c == '"':
                j, buf, start_line = i + 1, [], line
                while True:
                    if j >= n:
                        raise ConfSyntaxError(file, start_line, "syntax error, unterminated string")
                    ch = text[j]
                    if ch == "\\" and j + 1 < n:
                        nxt = text[j + 1]
                        buf.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
                        j += 2
                        continue
                    if ch == '"':
                        break
                    if ch == "\n":
                        line += 1
                    buf.append(ch)
                    j += 1
                yield ("VALUE", "".join(buf), start_line)
                i = j + 1
                continue
            j = i
            while j < n and text[j] not in "\n#}":
                j += 1
            yield ("VALUE", text[i:j].strip(), line)
            i = j
            continue
        if c in "{}":
            yield (c, c, line)
            i += 1
            continue
        if c == "=":
            yield ("=", c, line)
            after_eq = True
            i += 1
            continue
        m = NAME_RE.match(text, i)
        if m:
            yield ("NAME", m.group(0), line)
            i = m.end()
            continue
        raise ConfSyntaxError(file, line, f"syntax error, unexpected {c!r}")
    yield ("EOF", None, line)


def _describe(kind: str) -> str:
    return {"EOF": "end of file", "NL": "NEWLINE", "VALUE": "STRING"}.get(kind, kind if kind == "NAME" else f"'{kind}'")


def parse_file(path: str | os.PathLike[str], into: Section | None = None, depth: int = 0) -> Section:
    """Parse one file (following includes) into `into` (a new root if None)."""
    p = Path(path)
    root = into if into is not None else Section("", str(p), 0)
    try:
        text = p.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ConfSyntaxError(str(p), 0, f"failed to open config file: {exc.strerror}") from None
    _parse_text(text, str(p), root, depth, root)
    return root


def parse_text(text: str, file: str = "<string>") -> Section:
    """Parse text (includes relative to `file`'s directory)."""
    root = Section("", file, 0)
    _parse_text(text, file, root, 0, root)
    return root


def _parse_text(text: str, file: str, root: Section, depth: int, top: Section) -> None:
    toks = list(_tokens(text, file))
    stack = [root]
    i = 0
    while True:
        kind, val, line = toks[i]
        if kind == "EOF":
            if len(stack) > 1:
                raise ConfSyntaxError(file, line, "syntax error, unexpected end of file, expecting NAME or NEWLINE or '}'")
            return
        if kind == "NL":
            i += 1
            continue
        if kind == "}":
            if len(stack) == 1:
                raise ConfSyntaxError(file, line, "syntax error, unexpected '}'")
            stack.pop()
            i += 1
            continue
        if kind != "NAME":
            raise ConfSyntaxError(file, line, f"syntax error, unexpected {_describe(kind)}")
        nkind, _, _ = toks[i + 1]
        if val != "include" or nkind != "NAME":
            # strongSwan's grammar lets newlines stand between a name and its `{`/`=`;
            # an error is reported at the next real token (measured with 5.9.8)
            while toks[i + 1][0] == "NL":
                del toks[i + 1]
            nkind = toks[i + 1][0]
        if val == "include" and nkind == "NAME":
            # the pattern is the rest of the line
            pat_parts = []
            j = i + 1
            while toks[j][0] == "NAME":
                pat_parts.append(toks[j][1])
                j += 1
            if toks[j][0] not in ("NL", "EOF"):
                raise ConfSyntaxError(file, line, f"syntax error, unexpected {_describe(toks[j][0])}")
            _include(" ".join(pat_parts), file, line, stack[-1], depth, top)
            i = j
            continue
        if nkind == "=":
            vkind, vval, _ = toks[i + 2]
            value = vval if vkind == "VALUE" else ""
            stack[-1].values[val] = Value(value, file, line)
            i += 3 if vkind == "VALUE" else 2
            k = toks[i][0]
            if k not in ("NL", "EOF", "}"):
                raise ConfSyntaxError(file, toks[i][2], f"syntax error, unexpected {_describe(k)}")
            continue
        if nkind == "{":
            cur = stack[-1]
            sec = cur.sections.get(val)
            if sec is None:
                sec = Section(val, file, line)
                cur.sections[val] = sec
            stack.append(sec)
            i += 2
            continue
        raise ConfSyntaxError(file, toks[i + 1][2],
                              f"syntax error, unexpected {_describe(nkind)}, expecting : or '{{' or '='")


def _include(pattern: str, file: str, line: int, into: Section, depth: int, top: Section) -> None:
    if depth >= MAX_INCLUDE_DEPTH:
        raise ConfSyntaxError(file, line, f"maximum include depth ({MAX_INCLUDE_DEPTH}) exceeded")
    base = Path(file).parent
    pat = pattern if os.path.isabs(pattern) else str(base / pattern)
    matches = sorted(_glob.glob(pat))
    if not matches:
        # 5.9.8 (measured): a plain name or a glob matching nothing is only a warning
        if not _glob.has_magic(pat):
            top.warnings.append(f"no files found matching '{pat}'")
        return
    for m in matches:
        if os.path.isfile(m):
            p = Path(m)
            try:
                text = p.read_bytes().decode("utf-8", errors="replace")
            except OSError as exc:
                raise ConfSyntaxError(m, 0, f"failed to open config file: {exc.strerror}") from None
            _parse_text(text, m, into, depth + 1, top)


# ---------------------------------------------------------------- model

class ConnError(IkeError, ValueError):
    """A connection charon refuses: `loading connection 'X' failed: <why>, config discarded`."""

    def __init__(self, kind: str, name: str, why: str, where: str) -> None:
        self.kind, self.name, self.why, self.where = kind, name, why, where
        super().__init__(why)


@dataclass
class Auth:
    auth: str = "psk"
    id: str | None = None          # None: the own address (local) / %any (remote)


@dataclass
class Child:
    name: str
    local_ts: list[TS]
    remote_ts: list[TS]
    esp_proposals: list[Combo]
    mode: str = "TUNNEL"
    start_action: str = "none"
    rekey_time: int = 3600
    life_time: int = 3960
    updown: str | None = None
    local_ts_text: list[str] = field(default_factory=list)
    remote_ts_text: list[str] = field(default_factory=list)
    rand_time: int = 360
    """Upper bound of the jitter subtracted from rekey_time (strongSwan's check_lifetimes:
    life_time - rekey_time when unset)."""
    replay_window: int | None = None  # packets; None: the host's default (charon's 32)


@dataclass
class Connection:
    name: str
    version: int = 0
    local_addrs: list[str] = field(default_factory=list)
    remote_addrs: list[str] = field(default_factory=list)
    local_port: int = 500
    remote_port: int = 500
    proposals: list[Combo] = field(default_factory=list)
    local: Auth = field(default_factory=Auth)
    remote: Auth = field(default_factory=Auth)
    rekey_time: int = 14400
    rand_time: int | None = None   # None: over_time (10 % of rekey_time), as strongSwan
    encap: bool = False
    #: swanctl.conf `mobike` (default yes): with it the initiator floats the IKE_SA to UDP
    #: 4500 after IKE_SA_INIT even without a NAT (strongSwan 5.9.8 ike_natd.c process_i)
    mobike: bool = True
    children: dict[str, Child] = field(default_factory=dict)
    where: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass
class SharedSecret:
    name: str           # the section name, e.g. `ike-lab`
    ids: list[str]
    secret: bytes = field(repr=False)


@dataclass
class Config:
    connections: list[Connection]
    secrets: list[SharedSecret]
    errors: list[ConnError]
    files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


CONN_KEYS = {"version", "local_addrs", "remote_addrs", "local_port", "remote_port", "proposals",
             "vips", "aggressive", "pull", "dscp", "encap", "mobike", "dpd_delay", "dpd_timeout",
             "fragmentation", "childless", "send_certreq", "send_cert", "ppk_id", "ppk_required",
             "keyingtries", "unique", "reauth_time", "rekey_time", "over_time", "rand_time",
             "pools", "if_id_in", "if_id_out", "mediation", "mediated_by", "mediation_peer",
             "close_action"}
AUTH_KEYS = {"auth", "id", "eap_id", "aaa_id", "xauth_id", "round", "certs", "pubkeys", "groups",
             "cert_policy", "cacerts", "ca_id", "revocation"}
CHILD_KEYS = {"ah_proposals", "esp_proposals", "sha256_96", "local_ts", "remote_ts", "rekey_time",
              "life_time", "rand_time", "rekey_bytes", "life_bytes", "rand_bytes", "rekey_packets",
              "life_packets", "rand_packets", "updown", "hostaccess", "mode", "policies",
              "policies_fwd_out", "dpd_action", "ipcomp", "inactivity", "reqid", "priority",
              "interface", "mark_in", "mark_in_sa", "mark_out", "set_mark_in", "set_mark_out",
              "tfc_padding", "replay_window", "hw_offload", "copy_df", "copy_ecn", "copy_dscp",
              "start_action", "close_action", "if_id_in", "if_id_out", "label", "label_mode"}


def _dur(v: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([smhd]?)\s*", v)
    if not m:
        raise ValueError(v)
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def _bool(v: str) -> bool:
    """strongSwan's settings booleans (settings_value_as_bool): yes/true/enabled/1, no/false/disabled/0."""
    low = v.strip().lower()
    if low in ("yes", "true", "enabled", "1"):
        return True
    if low in ("no", "false", "disabled", "0"):
        return False
    raise ValueError(v)


def _list(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


def _auth(sec: Section, conn: str) -> Auth:
    a = Auth()
    for k, v in sec.values.items():
        if k not in AUTH_KEYS and not k.startswith("cert"):
            raise ConnError("unknown", conn, f"unknown option: {k}", f"{v.file}:{v.line}")
        if k == "auth":
            if v.value not in ("psk", "pubkey", "eap", "xauth") and not v.value.startswith(("eap-", "xauth-")):
                raise ConnError("invalid", conn, f"invalid value for: {k}", f"{v.file}:{v.line}")
            if v.value != "psk":
                raise ConnError("invalid", conn, f"invalid value for: {k}", f"{v.file}:{v.line}")
            a.auth = v.value
        elif k == "id":
            a.id = v.value
    return a


def _child(sec: Section, conn: str) -> Child:
    vals = sec.values

    def where(k: str) -> str:
        return f"{vals[k].file}:{vals[k].line}" if k in vals else sec.where()

    for k, v in vals.items():
        if k not in CHILD_KEYS:
            raise ConnError("unknown", conn, f"unknown option: {k}", where(k))
    if sec.sections:
        name = next(iter(sec.sections))
        raise ConnError("unknown", conn, f"unknown option: {name}", sec.sections[name].where())
    try:
        lts_text = _list(vals["local_ts"].value) if "local_ts" in vals else ["dynamic"]
        local_ts = [parse_ts(t) for t in lts_text]
    except TSError:
        raise ConnError("invalid", conn, "invalid value for: local_ts", where("local_ts")) from None
    try:
        rts_text = _list(vals["remote_ts"].value) if "remote_ts" in vals else ["dynamic"]
        remote_ts = [parse_ts(t) for t in rts_text]
    except TSError:
        raise ConnError("invalid", conn, "invalid value for: remote_ts", where("remote_ts")) from None
    try:
        esp = parse_proposals("ESP", vals["esp_proposals"].value if "esp_proposals" in vals else "default")
    except ProposalError:
        raise ConnError("invalid", conn, "invalid value for: esp_proposals", where("esp_proposals")) from None
    mode = vals["mode"].value.lower() if "mode" in vals else "tunnel"
    if mode not in ("tunnel", "transport", "beet", "pass", "drop"):
        raise ConnError("invalid", conn, "invalid value for: mode", where("mode"))
    if mode != "tunnel":
        raise ConnError("invalid", conn, "invalid value for: mode", where("mode"))
    sa = vals["start_action"].value.lower() if "start_action" in vals else "none"
    if sa not in ("none", "start", "trap", "trap|start", "start|trap"):
        raise ConnError("invalid", conn, "invalid value for: start_action", where("start_action"))
    times = {}
    for key in ("rekey_time", "life_time", "rand_time"):
        if key in vals:
            try:
                times[key] = _dur(vals[key].value)
            except ValueError:
                raise ConnError("invalid", conn, f"invalid value for: {key}", where(key)) from None
    # vici_config.c check_lifetimes: life_time defaults to rekey_time + 10 %, rand_time to
    # the difference of the two
    rekey = times.get("rekey_time", 3600)
    life = times.get("life_time", rekey * 110 // 100)
    rand = times.get("rand_time", life - min(life, rekey))
    replay = None
    if "replay_window" in vals:  # strongSwan: the window in packets, 0 disables it
        text = vals["replay_window"].value.strip()
        if not text.isdigit() or int(text) > 2040:  # FreeBSD: 255 bytes of bitmap at most
            raise ConnError("invalid", conn, "invalid value for: replay_window", where("replay_window"))
        replay = int(text)
    return Child(sec.name, local_ts, remote_ts, esp, mode.upper(), sa, rekey, life,
                 vals["updown"].value if "updown" in vals else None, lts_text, rts_text, rand,
                 replay_window=replay)


def _connection(sec: Section) -> Connection:
    name = sec.name
    c = Connection(name, where=sec.where())
    for k, v in sec.values.items():
        w = f"{v.file}:{v.line}"
        if k not in CONN_KEYS:
            raise ConnError("unknown", name, f"unknown option: {k}", w)
        try:
            if k == "version":
                c.version = int(v.value)
                if c.version not in (0, 1, 2):
                    raise ValueError
                if c.version == 1:
                    raise ValueError  # the twin speaks its IKEv2-like protocol only
            elif k == "local_addrs":
                c.local_addrs = _list(v.value)
            elif k == "remote_addrs":
                c.remote_addrs = _list(v.value)
            elif k in ("local_port", "remote_port"):
                setattr(c, k, int(v.value))
            elif k == "proposals":
                c.proposals = parse_proposals("IKE", v.value)
            elif k == "rekey_time":
                c.rekey_time = _dur(v.value)
            elif k == "rand_time":
                c.rand_time = _dur(v.value)
            elif k == "encap":
                c.encap = _bool(v.value)
            elif k == "mobike":
                c.mobike = _bool(v.value)
        except (ValueError, ProposalError):
            raise ConnError("invalid", name, f"invalid value for: {k}", w) from None
    if not c.proposals:
        c.proposals = parse_proposals("IKE", "default")
    rounds = {"local": [], "remote": []}
    for sname, sub in sec.sections.items():
        if sname == "children":
            for cname, csec in sub.sections.items():
                c.children[cname] = _child(csec, name)
            for k, v in sub.values.items():
                raise ConnError("unknown", name, f"unknown option: {k}", f"{v.file}:{v.line}")
        elif sname.startswith("local"):
            rounds["local"].append(_auth(sub, name))
        elif sname.startswith("remote"):
            rounds["remote"].append(_auth(sub, name))
        else:
            raise ConnError("unknown", name, f"unknown option: {sname}", sub.where())
    if rounds["local"]:
        c.local = rounds["local"][0]
    if rounds["remote"]:
        c.remote = rounds["remote"][0]
    for ch in c.children.values():
        if ch.updown:
            c.warnings.append(f"{ch.name}: updown script ignored by the twin")
    return c


def decode_secret(v: Value, name: str) -> bytes:
    """`0x` hex, `0s` base64, else the literal text (UTF-8)."""
    s = v.value
    try:
        if s.startswith("0x"):
            return binascii.unhexlify(s[2:])
        if s.startswith("0s"):
            return base64.b64decode(s[2:], validate=True)
    except (binascii.Error, ValueError):
        raise ConnError("invalid", name, "invalid value for: secret (encoding)", f"{v.file}:{v.line}") from None
    return s.encode("utf-8")


def _secrets(sec: Section, errors: list[ConnError]) -> list[SharedSecret]:
    out = []
    for name, s in sec.sections.items():
        if not name.startswith("ike"):
            continue  # eap-, xauth-, private-... are not used by the twin
        try:
            if "secret" not in s.values:
                raise ConnError("secret", name, "missing 'secret'", s.where())
            ids = [v.value for k, v in s.values.items() if k == "id" or k.startswith("id")]
            out.append(SharedSecret(name, ids, decode_secret(s.values["secret"], name)))
        except ConnError as exc:
            exc.kind = "secret"
            errors.append(exc)
    return out


def build(root: Section) -> Config:
    """The model of a parsed tree; per-connection errors are collected, not raised."""
    conns: list[Connection] = []
    errors: list[ConnError] = []
    csec = root.sections.get("connections")
    if csec:
        for name, sec in csec.sections.items():
            try:
                conns.append(_connection(sec))
            except ConnError as exc:
                errors.append(exc)
    secrets: list[SharedSecret] = []
    ssec = root.sections.get("secrets")
    if ssec:
        secrets = _secrets(ssec, errors)
    return Config(conns, secrets, errors, warnings=list(root.warnings))


def load(path: str | os.PathLike[str]) -> Config:
    """Parse and build; raises ConfSyntaxError for a file strongSwan calls invalid."""
    cfg = build(parse_file(path))
    cfg.files.append(str(path))
    return cfg


def loads(text: str, file: str = "<string>") -> Config:
    return build(parse_text(text, file))
