"""Topology files: YAML -> typed pydantic models, validated with ``FILE:LINE`` errors.

Why line numbers: a lab owner edits this file by hand, far from the code; an error must
say where (``topologies/real-lab.yaml:42: hosts.xgs136.ports.port8.mtu: expected ...,
found 9500``) and what to write instead, not dump a pydantic traceback.

How: the YAML is composed into nodes (``yaml.compose``), converted to plain data while
every mapping key, sequence item and value records its line; pydantic validates the
structure (``extra="forbid"``: an unknown key is an error at the key's line); then a
second pass checks what refers to what (links and tunnels naming hosts and ports that
exist, address families present where a tunnel needs them, duplicate addresses, files).
Every problem is reported, each on its own line, sorted by line.

Secrets: a pre-shared key is never written in the file (``psk: {env: NAME}`` or
``psk: {file: PATH}``); an inline key is an error whose message does not repeat it.
Paths (``known_hosts``, ``key_file``, psk ``file``) are resolved relative to the file.

The schema is documented in docs/DESIGN.md ("Topology file") and topologies/README.md.
"""

from __future__ import annotations

import difflib
import ipaddress
import itertools
import os
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from plugin.lab.errors import LabError, ProfileError, TopologyError
from plugin.lab.esp_math import CIPHERS, FAMILIES
from plugin.lab.hardware import MODELS, HardwareProfile, profile_for

Family = Literal["ipv4", "ipv6"]
Cipher = Literal["aes-gcm-16", "aes-cbc-hmac-sha256"]

MTU_MAX = 9216
MTU_MIN_IPV4 = 576
MTU_MIN_IPV6 = 1280
MAX_CHILDREN = 256

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_PORT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------- models


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class LabInfo(_Model):
    """``lab:`` -- the lab as a whole."""

    name: str = Field(min_length=1)
    virtual: bool = False
    known_hosts: Path | None = None


class Jump(_Model):
    """An SSH jump host in front of a lab's management network."""

    address: str = Field(min_length=1)
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key_file: Path | None = None


class Mgmt(_Model):
    """How the suite reaches a host: SSH (``address``...) or ``local`` (optionally in a netns).

    A virtual lab's file may leave it empty: the twin fills it in ``lab.resolved.yaml``.
    """

    address: str | None = None
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key_file: Path | None = None
    jump: Jump | None = None
    connect_timeout: float = Field(10, gt=0)
    command_timeout: float = Field(60, gt=0)
    local: bool = False
    netns: str | None = None

    @model_validator(mode="after")
    def _local_or_ssh(self) -> Mgmt:
        if self.local and (self.address or self.jump):
            raise ValueError("expected either local: true or an SSH address, found both")
        if self.netns and not self.local:
            raise ValueError("expected netns only with local: true, found netns on an SSH host")
        return self


def _interface(value: Any, family: str) -> Any:
    if value is None:
        return None
    example = "192.0.2.1/24" if family == "ipv4" else "2001:db8::1/64"
    kind = ipaddress.IPv4Interface if family == "ipv4" else ipaddress.IPv6Interface
    if isinstance(value, kind):
        return value
    if not isinstance(value, str) or "/" not in value:
        raise ValueError(
            f"expected an {family} address with prefix length (e.g. {example}), found {value!r}"
        )
    try:
        return kind(value)
    except ValueError:
        raise ValueError(
            f"expected an {family} address with prefix length (e.g. {example}), found {value!r}"
        ) from None


class Port(_Model):
    """One network port of a host: addresses (with prefix), MTU, the link's rate."""

    ipv4: ipaddress.IPv4Interface | None = None
    ipv6: ipaddress.IPv6Interface | None = None
    mtu: int = 1500
    rate_mbit: float | None = Field(None, gt=0)
    ifname: str | None = None  # the OS's name (e.g. ix0) when the suite must name it

    @field_validator("ipv4", mode="before")
    @classmethod
    def _v4(cls, v: Any) -> Any:
        return _interface(v, "ipv4")

    @field_validator("ipv6", mode="before")
    @classmethod
    def _v6(cls, v: Any) -> Any:
        return _interface(v, "ipv6")

    @field_validator("mtu")
    @classmethod
    def _mtu(cls, v: int, info: ValidationInfo) -> int:
        has_v6 = info.data.get("ipv6") is not None
        lo = MTU_MIN_IPV6 if has_v6 else MTU_MIN_IPV4
        if not lo <= v <= MTU_MAX:
            why = " (the port has an IPv6 address)" if has_v6 else ""
            raise ValueError(f"expected an MTU in {lo}..{MTU_MAX}{why}, found {v}")
        return v

    def address(self, family: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface | None:
        """The port's interface address of ``family`` (``ipv4``/``ipv6``), or None."""
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}")
        return self.ipv4 if family == "ipv4" else self.ipv6

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(f for f in FAMILIES if self.address(f) is not None)


class Host(_Model):
    """An appliance (with a model) or the bench PC."""

    role: Literal["appliance", "bench"]
    model: str | None = None
    profile: dict[str, Any] = Field(default_factory=dict)
    mgmt: Mgmt = Field(default_factory=Mgmt)
    ports: dict[str, Port] = Field(min_length=1)
    _name: str = PrivateAttr("")
    _hardware: HardwareProfile | None = PrivateAttr(None)

    @field_validator("model")
    @classmethod
    def _model(cls, v: str | None, info: ValidationInfo) -> str | None:
        role = info.data.get("role")
        if role == "appliance" and v is None:
            raise ValueError(f"expected a model ({' or '.join(MODELS)}) for an appliance, found none")
        if role == "bench" and v is not None:
            raise ValueError(f"expected no model on the bench host, found {v!r}")
        if v is not None and v not in MODELS:
            raise ValueError(f"expected one of {', '.join(MODELS)}, found {v!r}")
        return v

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_appliance(self) -> bool:
        return self.role == "appliance"

    @property
    def hardware(self) -> HardwareProfile:
        """The model's hardware profile with this host's ``profile:`` overrides."""
        if self.model is None:
            raise LabError(f"host {self._name} is the bench: it has no hardware profile")
        if self._hardware is None:
            self._hardware = profile_for(self.model, self.profile)
        return self._hardware

    def port(self, name: str) -> Port:
        try:
            return self.ports[name]
        except KeyError:
            raise LabError(f"host {self._name} has no port {name!r}; ports: {', '.join(self.ports)}") from None


class Link(_Model):
    """A point-to-point wire between two ports, ``a: host.port`` and ``b: host.port``."""

    a: str
    b: str
    rate_mbit: float | None = Field(None, gt=0)

    @field_validator("a", "b")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if not re.fullmatch(r"[^.\s]+\.[^.\s]+", v):
            raise ValueError(f"expected HOST.PORT (e.g. dut3300.lan), found {v!r}")
        return v

    @property
    def ends(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """((host, port), (host, port))."""
        a, b = self.a.split("."), self.b.split(".")
        return (a[0], a[1]), (b[0], b[1])


class TunnelEnd(_Model):
    """One end of a tunnel: the host, the port carrying ESP, the port of its LAN."""

    host: str
    port: str
    lan: str
    cipher: Literal["kernel", "offload"] = "offload"


class Children(_Model):
    """How many child SAs a connection has and how traffic is split between them."""

    count: int
    by: Literal["tcp_port"] | None = None
    first_port: int | None = Field(None, ge=1, le=65535)

    @field_validator("count")
    @classmethod
    def _count(cls, v: int) -> int:
        if not 1 <= v <= MAX_CHILDREN:
            raise ValueError(f"expected 1..{MAX_CHILDREN} children, found {v}")
        return v

    @model_validator(mode="after")
    def _split(self) -> Children:
        if self.count > 1 and (self.by is None or self.first_port is None):
            raise ValueError(
                f"expected by: tcp_port and first_port for {self.count} children, found "
                f"by: {self.by}, first_port: {self.first_port}"
            )
        if self.first_port is not None and self.first_port + self.count - 1 > 65535:
            raise ValueError(f"expected first_port + count - 1 <= 65535, found {self.first_port + self.count - 1}")
        return self

    def ports(self) -> list[int]:
        """The TCP port of each child (empty for one child without a split)."""
        if self.first_port is None:
            return []
        return list(range(self.first_port, self.first_port + self.count))


class Identities(_Model):
    """IKE identities of a connection (null: the two outer addresses)."""

    local: str = Field(min_length=1)
    remote: str = Field(min_length=1)


class PskRef(_Model):
    """Where a tunnel's pre-shared key comes from: an environment variable or a file.

    Holds only the reference; :meth:`read` fetches the key when it is needed and the
    value is never stored on the model, logged or put into a message.
    """

    env: str | None = None
    file: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _not_inline(cls, v: Any) -> Any:
        inline = "expected {env: NAME} or {file: PATH}, found an inline key (never write a key in the topology; use env or file)"
        if isinstance(v, (str, bytes, int, float)):
            raise ValueError(inline)
        if isinstance(v, dict) and ({"value", "key", "secret", "psk"} & set(v)):
            raise ValueError(inline)
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_RE.match(v):
            # not repeated: a key pasted here by mistake must not reach a log
            raise ValueError("expected an environment variable name (letters, digits, _), found something else (not shown)")
        return v

    @model_validator(mode="after")
    def _one(self) -> PskRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("expected exactly one of env or file, found " + ("both" if self.env else "neither"))
        return self

    def read(self) -> str:
        """The key. LabError naming the variable or file (never the key) when unusable."""
        if self.env is not None:
            value = os.environ.get(self.env)
            if not value:
                raise LabError(f"pre-shared key: environment variable {self.env} is not set (or empty)")
            return value
        assert self.file is not None
        try:
            value = self.file.read_text().strip()
        except OSError as exc:
            raise LabError(f"pre-shared key: cannot read {self.file}: {exc.strerror}") from None
        if not value:
            raise LabError(f"pre-shared key: {self.file} is empty")
        return value

    def __repr__(self) -> str:  # explicit: there is nothing secret here, keep it that way
        return f"PskRef(env={self.env!r}, file={str(self.file) if self.file else None!r})"


class Tolerance(_Model):
    """Relative tolerances for invariants measured under congestion."""

    congested: float = Field(0.001, ge=0, le=1)


@dataclass(frozen=True)
class TunnelConfig:
    """One way to build a tunnel: the key of the tunnel fixture's parametrisation."""

    outer: str
    inner: str
    cipher: str
    children: int = 1

    @property
    def id(self) -> str:
        """Short test id, e.g. ``v4in6-gcm`` (inner v4 in outer v6), ``-c6`` for six children."""
        short = {"aes-gcm-16": "gcm", "aes-cbc-hmac-sha256": "cbc"}[self.cipher]
        kids = f"-c{self.children}" if self.children != 1 else ""
        return f"v{self.inner[-1]}in{self.outer[-1]}-{short}{kids}"


class Tunnel(_Model):
    """A connection between two appliances and the combinations it may be built with."""

    local: TunnelEnd
    remote: TunnelEnd
    outer: list[Family] = Field(min_length=1)
    inner: list[Family] = Field(min_length=1)
    ciphers: list[Cipher] = Field(min_length=1)
    children: Children = Field(default_factory=lambda: Children(count=1))
    identities: Identities | None = None
    psk: PskRef
    tolerance: Tolerance = Field(default_factory=Tolerance)
    _name: str = PrivateAttr("")

    @field_validator("children", mode="before")
    @classmethod
    def _children(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError(f"expected a count or {{count, by, first_port}}, found {v!r}")
        if isinstance(v, int):
            return {"count": v}
        return v

    @field_validator("outer", "inner", "ciphers")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        dup = [x for x in dict.fromkeys(v) if v.count(x) > 1]
        if dup:
            raise ValueError(f"expected each value once, found {dup[0]!r} twice")
        return v

    @property
    def name(self) -> str:
        return self._name

    def configs(self) -> list[TunnelConfig]:
        """Every supported (outer, inner, cipher) combination, children as configured."""
        return [
            TunnelConfig(o, i, c, self.children.count)
            for o, i, c in itertools.product(self.outer, self.inner, self.ciphers)
        ]


class Topology(_Model):
    """A whole lab: hosts, wires between them and the tunnels the suite may build."""

    lab: LabInfo
    hosts: dict[str, Host] = Field(min_length=1)
    links: list[Link] = Field(default_factory=list)
    tunnels: dict[str, Tunnel] = Field(default_factory=dict)
    _source: Path | None = PrivateAttr(None)

    def model_post_init(self, __context: Any) -> None:
        for name, host in self.hosts.items():
            host._name = name
        for name, tunnel in self.tunnels.items():
            tunnel._name = name

    @property
    def source(self) -> Path | None:
        """The file this topology was loaded from."""
        return self._source

    def appliances(self, model: str | None = None) -> list[Host]:
        """Appliances in file order, optionally only those of ``model``."""
        if model is not None and model not in MODELS:
            raise ValueError(f"unknown model {model!r}; expected one of {', '.join(MODELS)}")
        return [h for h in self.hosts.values() if h.is_appliance and (model is None or h.model == model)]

    @property
    def models(self) -> set[str]:
        return {h.model for h in self.appliances() if h.model}

    @property
    def bench(self) -> Host:
        """The bench PC (a loaded topology has exactly one)."""
        for h in self.hosts.values():
            if h.role == "bench":
                return h
        raise LabError(f"topology {self.lab.name} has no bench host")

    def host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise LabError(f"topology {self.lab.name} has no host {name!r}; hosts: {', '.join(self.hosts)}") from None

    def port(self, host: str, port: str) -> Port:
        return self.host(host).port(port)

    def tunnel(self, name: str) -> Tunnel:
        try:
            return self.tunnels[name]
        except KeyError:
            raise LabError(f"topology {self.lab.name} has no tunnel {name!r}; tunnels: {', '.join(self.tunnels)}") from None

    def link_of(self, host: str, port: str) -> Link | None:
        """The link a port is wired to, if any."""
        for link in self.links:
            if (host, port) in link.ends:
                return link
        return None

    def peer_of(self, host: str, port: str) -> tuple[str, str] | None:
        """(host, port) at the other end of the port's link, if wired."""
        link = self.link_of(host, port)
        if link is None:
            return None
        a, b = link.ends
        return b if a == (host, port) else a

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON/YAML-safe; paths absolute) -- e.g. for a resolved copy."""
        return self.model_dump(mode="json", exclude_none=True)


# --------------------------------------------------------------------------- loading

Path_ = tuple[Any, ...]


class _Located:
    """Plain data built from YAML nodes plus the line of every path in it."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[Path_, int] = {}
        self.problems: list[tuple[int, str]] = []

    def line(self, path: Path_) -> int:
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return 1

    def add(self, path: Path_, message: str, line: int | None = None) -> None:
        ln = self.line(path) if line is None else line
        self.problems.append((ln, f"{self.file}:{ln}: {_dotted(path) or '(top)'}: {message}"))

    def build(self, loader: yaml.SafeLoader, node: yaml.Node, path: Path_) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    self.add(path, "expected plain keys, found a YAML merge key (<<); write the keys out", key_node.start_mark.line + 1)
                    continue
                if not isinstance(key_node, yaml.ScalarNode):
                    self.add(path, "expected a plain key, found a mapping or list used as key", key_node.start_mark.line + 1)
                    continue
                key = str(loader.construct_object(key_node))
                key_line = key_node.start_mark.line + 1
                if key in out:
                    self.add(path + (key,), f"expected each key once, found {key!r} again (first on line {self.lines[path + (key,)]})", key_line)
                    continue
                self.lines[path + (key,)] = key_line
                out[key] = self.build(loader, value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(loader, item, path + (i,)) for i, item in enumerate(node.value)]
        return loader.construct_object(node, deep=True)


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _found(value: Any, path: Path_) -> str:
    if any(p == "psk" for p in path):
        return "a value (not shown: it is under psk)"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unwrap(ann: Any) -> Any:
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        return args[0] if len(args) == 1 else ann
    return ann


def _model_at(path: Path_) -> type[BaseModel] | None:
    ann: Any = Topology
    for part in path:
        ann = _unwrap(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            field = ann.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            ann = field.annotation
        elif typing.get_origin(ann) is dict:
            ann = typing.get_args(ann)[1]
        elif typing.get_origin(ann) is list:
            ann = typing.get_args(ann)[0]
        else:
            return None
    ann = _unwrap(ann)
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


_EXPECTED = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "dict_type": "a mapping", "model_type": "a mapping",
    "model_attributes_type": "a mapping", "list_type": "a list", "path_type": "a path",
}  # fmt: skip


def _describe(err: dict[str, Any]) -> str:
    kind, ctx, loc = err["type"], err.get("ctx") or {}, tuple(err["loc"])
    found = _found(err.get("input"), loc)
    if kind == "missing":
        return "expected a value (required), found nothing"
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = list(model.model_fields) if model else []
        hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        did = f" (did you mean {hint[0]!r}?)" if hint else ""
        return f"expected one of {', '.join(allowed)}, found unknown key {loc[-1]!r}{did}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind == "literal_error":
        return f"expected {ctx['expected']}, found {found}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, found {found}"
    for bound, word in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if kind.startswith(("greater_than", "less_than")) and bound in ctx:
            return f"expected a value {word} {ctx[bound]}, found {found}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length', 1)} entry, found none"
    return f"expected {err['msg'][0].lower()}{err['msg'][1:]}, found {found}"


def _compose(text: str, doc: _Located) -> Any:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            doc.add((), "expected a topology (lab, hosts, links, tunnels), found an empty file")
            return None
        return doc.build(loader, node, ())
    except yaml.MarkedYAMLError as exc:
        # Not str(exc): it quotes the offending line, which may hold a secret.
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        where = ""
        if exc.context and exc.context_mark is not None and exc.context_mark.line + 1 != line:
            where = f" ({exc.context} started on line {exc.context_mark.line + 1})"
        doc.add((), f"expected valid YAML, found a syntax error: {exc.problem or exc.context}{where}", line)
        return None
    except yaml.YAMLError as exc:
        doc.add((), f"expected valid YAML, found: {type(exc).__name__}")
        return None
    finally:
        loader.dispose()


def _resolve(base: Path, p: Path | None) -> Path | None:
    if p is None:
        return None
    p = p.expanduser()
    return p if p.is_absolute() else (base / p).resolve()


def _check(topo: Topology, doc: _Located, check_files: bool) -> None:
    """Cross-references and facts pydantic cannot see field by field."""
    add = doc.add
    benches = [n for n, h in topo.hosts.items() if h.role == "bench"]
    if len(benches) != 1:
        add(("hosts",), f"expected exactly one host with role: bench, found {len(benches)}" + (f" ({', '.join(benches)})" if benches else ""))
    if not topo.appliances():
        add(("hosts",), "expected at least one host with role: appliance, found none")

    seen_addr: dict[str, Path_] = {}
    for hname, host in topo.hosts.items():
        hp = ("hosts", hname)
        if not _NAME_RE.match(hname):
            add(hp, f"expected a host name of letters, digits, - or _ starting with a letter (max 32), found {hname!r}")
        for pname, port in host.ports.items():
            pp = hp + ("ports", pname)
            if not _PORT_RE.match(pname):
                add(pp, f"expected a port name of letters, digits or _ starting with a letter, found {pname!r}")
            for fam in FAMILIES:
                addr = port.address(fam)
                if addr is None:
                    continue
                ip = str(addr.ip)
                if ip in seen_addr:
                    add(pp + (fam,), f"expected a unique address, found {ip} again (also {_dotted(seen_addr[ip])})")
                else:
                    seen_addr[ip] = pp + (fam,)
        if host.model is not None and host.profile:
            for key, value in host.profile.items():
                kp = hp + ("profile", key)
                items = value.items() if key in ("counters", "oids") and isinstance(value, dict) else [(None, value)]
                for sub, subval in items:
                    try:
                        profile_for(host.model, {key: {sub: subval} if sub is not None else subval})
                    except ProfileError as exc:
                        add(kp + ((sub,) if sub is not None else ()), f"expected what the {host.model} profile knows, found: {exc}")
        if not topo.lab.virtual:
            m = host.mgmt
            if not m.local and not m.address:
                add(hp + ("mgmt",), "expected mgmt.address (SSH) or mgmt.local: true for a hardware lab, found neither")

    used: dict[tuple[str, str], Path_] = {}
    for i, link in enumerate(topo.links):
        lp = ("links", i)
        ends = link.ends
        for side, (h, p) in zip(("a", "b"), ends):
            if h not in topo.hosts:
                add(lp + (side,), f"expected a host of this file ({', '.join(topo.hosts)}), found {h!r}")
                continue
            if p not in topo.hosts[h].ports:
                add(lp + (side,), f"expected a port of {h} ({', '.join(topo.hosts[h].ports)}), found {p!r}")
                continue
            if (h, p) in used:
                add(lp + (side,), f"expected each port on one link, found {h}.{p} already on {_dotted(used[(h, p)])}")
            else:
                used[(h, p)] = lp
        if ends[0] == ends[1]:
            add(lp + ("b",), f"expected two different ports, found {link.a} at both ends")
            continue
        if all(h in topo.hosts and p in topo.hosts[h].ports for h, p in ends):
            pa, pb = (topo.hosts[h].ports[p] for h, p in ends)
            for fam in FAMILIES:
                xa, xb = pa.address(fam), pb.address(fam)
                if xa is not None and xb is not None and xb.ip not in xa.network:
                    add(lp + ("b",), f"expected {link.b}'s {fam} address in {link.a}'s network {xa.network}, found {xb}")

    for tname, tun in topo.tunnels.items():
        tp = ("tunnels", tname)
        if not _NAME_RE.match(tname):
            add(tp, f"expected a tunnel name of letters, digits, - or _ starting with a letter, found {tname!r}")
        ok = True
        for side in ("local", "remote"):
            end: TunnelEnd = getattr(tun, side)
            sp = tp + (side,)
            host = topo.hosts.get(end.host)
            if host is None:
                add(sp + ("host",), f"expected a host of this file ({', '.join(topo.hosts)}), found {end.host!r}")
                ok = False
                continue
            if not host.is_appliance:
                add(sp + ("host",), f"expected an appliance, found the bench host {end.host!r}")
                ok = False
            for key in ("port", "lan"):
                pname = getattr(end, key)
                if pname not in host.ports:
                    add(sp + (key,), f"expected a port of {end.host} ({', '.join(host.ports)}), found {pname!r}")
                    ok = False
        if tun.local.host == tun.remote.host:
            add(tp + ("remote", "host"), f"expected the other end on another host, found {tun.remote.host!r} at both ends")
            ok = False
        if ok:
            for side in ("local", "remote"):
                end = getattr(tun, side)
                host = topo.hosts[end.host]
                for key, fams in (("port", tun.outer), ("lan", tun.inner)):
                    port = host.ports[getattr(end, key)]
                    role = "outer" if key == "port" else "inner"
                    for fam in fams:
                        if port.address(fam) is None:
                            add(
                                tp + (role,),
                                f"expected an {fam} address on {end.host}.{getattr(end, key)} for {role} {fam}, found none",
                            )
        if tun.psk.file is not None:
            if check_files and not topo.lab.virtual and not tun.psk.file.is_file():
                add(tp + ("psk", "file"), f"expected a readable file, found no file at {tun.psk.file}")

    if check_files and not topo.lab.virtual:
        kh = topo.lab.known_hosts
        ssh_hosts = [n for n, h in topo.hosts.items() if not h.mgmt.local]
        if kh is None and ssh_hosts:
            add(("lab",), f"expected lab.known_hosts (host keys are pinned, never auto-added) for SSH hosts {', '.join(ssh_hosts)}, found none")
        elif kh is not None and not kh.is_file():
            add(("lab", "known_hosts"), f"expected a known_hosts file, found no file at {kh}")
        for hname, host in topo.hosts.items():
            for kp, key in ((("mgmt", "key_file"), host.mgmt.key_file), (("mgmt", "jump", "key_file"), host.mgmt.jump.key_file if host.mgmt.jump else None)):
                if key is not None and not key.is_file():
                    add(("hosts", hname) + kp, f"expected a private key file, found no file at {key}")


def _base(topo: Topology) -> Path:
    return topo.source.parent if topo.source else Path.cwd()


def _resolve_paths(topo: Topology) -> None:
    base = _base(topo)
    topo.lab.known_hosts = _resolve(base, topo.lab.known_hosts)
    for host in topo.hosts.values():
        host.mgmt.key_file = _resolve(base, host.mgmt.key_file)
        if host.mgmt.jump is not None:
            host.mgmt.jump.key_file = _resolve(base, host.mgmt.jump.key_file)
    for tunnel in topo.tunnels.values():
        tunnel.psk.file = _resolve(base, tunnel.psk.file)


def parse_topology(text: str, file: str | Path = "<topology>", *, check_files: bool = False) -> Topology:
    """Validate topology ``text``; ``file`` names it in errors and anchors relative paths."""
    doc = _Located(str(file))
    data = _compose(text, doc)
    if data is not None and not isinstance(data, dict):
        doc.add((), f"expected a mapping with lab, hosts, links, tunnels, found {_found(data, ())}")
    topo: Topology | None = None
    if not doc.problems:
        try:
            topo = Topology.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                loc = tuple(err["loc"])
                doc.add(loc, _describe(err))
    if topo is not None:
        topo._source = Path(file).resolve() if str(file) != "<topology>" else None
        _resolve_paths(topo)
        _check(topo, doc, check_files)
    if doc.problems:
        doc.problems.sort(key=lambda p: p[0])
        raise TopologyError("\n".join(dict.fromkeys(msg for _, msg in doc.problems)))
    assert topo is not None
    return topo


def load_topology(path: str | Path, *, check_files: bool = False) -> Topology:
    """Load and validate a topology file.

    ``check_files``: also require the files it names (known_hosts, key files, psk files)
    to exist -- for hardware labs (a virtual lab's are generated by the twin).
    Raises FileNotFoundError for a missing file and TopologyError for an invalid one.
    """
    p = Path(path)
    text = p.read_text()
    return parse_topology(text, p, check_files=check_files)


__all__ = [
    "Topology",
    "LabInfo",
    "Host",
    "Mgmt",
    "Jump",
    "Port",
    "Link",
    "Tunnel",
    "TunnelEnd",
    "Children",
    "Identities",
    "PskRef",
    "Tolerance",
    "TunnelConfig",
    "load_topology",
    "parse_topology",
    "CIPHERS",
    "FAMILIES",
]
