"""swanctl.conf rendering, the tunnel transaction, bring-up and teardown.

Why this module exists: the pages changed tunnels by hand (sed through a csh, the 001 page's
destroyed address lines) and lost measurements to it. Here a tunnel is *rendered* from the
topology -- one key per line in strongSwan's grammar -- and installed as a transaction on
both ends: back up, write atomically into ``conf.d`` (OPNsense rewrites swanctl.conf, conf.d
persists), verify, load, initiate every child, and undo it all byte-identically afterwards.

Naming (fixed here, used by tests and the report):
- connection ``hil-<tunnel>-<o><i>-<gcm|cbc>``, e.g. ``hil-lab-v4v6-gcm`` (outer v4, inner v6);
- one child: ``<conn>-net``; N children by TCP port: ``<conn>-p<port>``;
- file ``/usr/local/etc/swanctl/conf.d/hil-<tunnel>.conf`` on both ends.

Children by TCP port: the port is the *server's* port on the remote end's LAN (the 002 page:
"each child one TCP port of the 3300's Port8 address"); the local end's selector is the
local LAN with ``[tcp]`` (any port), the remote end's the remote LAN with ``[tcp/PORT]``.

Secrets: the PSK travels as :class:`Secret`, whose repr/str are masked; it only appears in
the text :func:`render_swanctl` returns (written straight to the appliance) and never in a
log, an exception or a report (:func:`render_masked` is the report's version).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import ipaddress
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

from plugin.lab.errors import LabError, ProvisionError

log = logging.getLogger(__name__)

CONF_DIR = "/usr/local/etc/swanctl/conf.d"
SWANCTL_CONF = "/usr/local/etc/swanctl/swanctl.conf"
INCLUDE_LINE = "include conf.d/*.conf"
MASK = "<masked>"

Family = Literal["ipv4", "ipv6"]
EndName = Literal["local", "remote"]

#: cipher name -> (IKE proposal, ESP proposal, short tag for names)
PROPOSALS: dict[str, tuple[str, str, str]] = {
    "aes-gcm-16": ("aes256gcm16-prfsha256-x25519", "aes256gcm16", "gcm"),
    "aes-cbc-hmac-sha256": ("aes256-sha256-x25519", "aes256-sha256", "cbc"),
}
_FAM_TAG = {"ipv4": "v4", "ipv6": "v6"}


class Secret:
    """A pre-shared key that never shows itself by accident (repr/str/format are masked)."""

    __slots__ = ("_value",)

    def __init__(self, value: str | bytes) -> None:
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        value = value.strip("\r\n")
        if not value:
            raise ProvisionError("pre-shared key is empty")
        self._value = value

    def reveal(self) -> str:
        """The key itself -- only for writing it into a file on the appliance."""
        return self._value

    def fingerprint(self) -> str:
        """A short non-reversible tag (8 hex of sha256) so two runs can say 'same key'."""
        return hashlib.sha256(self._value.encode()).hexdigest()[:8]

    def __repr__(self) -> str:
        return f"Secret({MASK})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self):  # pickling would copy the key into places we do not control
        raise TypeError("Secret is not picklable")


def as_secret(psk: Secret | str | bytes) -> Secret:
    return psk if isinstance(psk, Secret) else Secret(psk)


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class EndPlan:
    """One end of a tunnel, with everything rendering needs already resolved to addresses."""

    host: str
    port: str  # the association's port (outer addresses live here)
    lan: str  # the LAN port (inner selectors come from its networks)
    outer: Mapping[str, str]  # family -> address on `port` (no prefix)
    lan_if: Mapping[str, str]  # family -> interface address with prefix on `lan`
    port_if: Mapping[str, str] = field(default_factory=dict)  # family -> address/prefix on `port`
    cipher: str = "offload"  # kernel | offload (the topology's hint; rendering ignores it)
    ifname: str | None = None  # the OS's name of `port` (topology `ifname`), else the port name

    @property
    def port_ifname(self) -> str:
        return self.ifname or self.port

    def lan_net(self, family: str) -> str:
        try:
            return str(ipaddress.ip_interface(self.lan_if[family]).network)
        except KeyError:
            raise ProvisionError(
                f"{self.host}.{self.lan}: no {family} address in the topology for the inner selectors"
            ) from None

    def outer_addr(self, family: str) -> str:
        try:
            return self.outer[family]
        except KeyError:
            raise ProvisionError(
                f"{self.host}.{self.port}: no {family} address in the topology for the outer header"
            ) from None


@dataclass(frozen=True)
class TunnelPlan:
    """A topology tunnel resolved to addresses: the input of rendering and provisioning.

    ``identities`` is ``None`` (the two outer addresses, as the lab tunnel) or a pair
    ``(local_id, remote_id)`` as seen from the local end.
    """

    name: str
    local: EndPlan
    remote: EndPlan
    children_by: str | None = None  # None (one child) or "tcp_port"
    first_port: int = 5201
    identities: tuple[str, str] | None = None
    tolerance: Mapping[str, float] = field(default_factory=dict)

    def end(self, which: str) -> EndPlan:
        if which == "local":
            return self.local
        if which == "remote":
            return self.remote
        raise ProvisionError(f"tunnel {self.name}: end must be 'local' or 'remote', not {which!r}")

    def other(self, which: str) -> EndPlan:
        return self.remote if which == "local" else self.local

    @classmethod
    def from_topology(cls, topology: Any, name: str) -> "TunnelPlan":
        """Resolve `topology.tunnels[name]` (the H1 model, read by attribute) to a plan."""
        tunnels = getattr(topology, "tunnels")
        if name not in tunnels:
            raise ProvisionError(f"topology has no tunnel {name!r} (has: {', '.join(sorted(tunnels))})")
        t = tunnels[name]
        ends = []
        for end in (t.local, t.remote):
            host = topology.hosts[end.host]
            port = host.ports[end.port]
            lan = host.ports[end.lan]
            outer = {}
            port_if = {}
            lan_if = {}
            for fam in ("ipv4", "ipv6"):
                v = getattr(port, fam, None)
                if v:
                    port_if[fam] = str(v)
                    outer[fam] = str(ipaddress.ip_interface(str(v)).ip)
                w = getattr(lan, fam, None)
                if w:
                    lan_if[fam] = str(w)
            ends.append(
                EndPlan(
                    host=end.host,
                    port=end.port,
                    lan=end.lan,
                    outer=outer,
                    lan_if=lan_if,
                    port_if=port_if,
                    cipher=str(getattr(end, "cipher", "offload") or "offload"),
                    ifname=getattr(port, "ifname", None),
                )
            )
        ch = getattr(t, "children", 1)
        by = None
        first_port = 5201
        if not isinstance(ch, int):
            by = getattr(ch, "by", None)
            first_port = int(getattr(ch, "first_port", None) or 5201)
        ids = getattr(t, "identities", None)
        identities = None
        if ids is not None:
            identities = (str(_attr_or_key(ids, "local")), str(_attr_or_key(ids, "remote")))
        tol = getattr(t, "tolerance", None) or {}
        if not isinstance(tol, Mapping):
            tol = tol.model_dump() if hasattr(tol, "model_dump") else dict(vars(tol))
        return cls(
            name=name,
            local=ends[0],
            remote=ends[1],
            children_by=by,
            first_port=first_port,
            identities=identities,
            tolerance=dict(tol),
        )


def _attr_or_key(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj[key]
    return getattr(obj, key)


def _config_fields(config: Any) -> tuple[str, str, str, int]:
    outer, inner, cipher = config.outer, config.inner, config.cipher
    children = int(config.children)
    for what, fam in (("outer", outer), ("inner", inner)):
        if fam not in _FAM_TAG:
            raise ProvisionError(f"config.{what}: expected ipv4 or ipv6, found {fam!r}")
    if cipher not in PROPOSALS:
        raise ProvisionError(f"config.cipher: expected one of {sorted(PROPOSALS)}, found {cipher!r}")
    if children < 1:
        raise ProvisionError(f"config.children: expected >= 1, found {children}")
    return outer, inner, cipher, children


def conn_name(tunnel: TunnelPlan | str, config: Any) -> str:
    """The connection's name for one tunnel and config, e.g. ``hil-lab-v4v6-gcm``."""
    tname = tunnel if isinstance(tunnel, str) else tunnel.name
    outer, inner, cipher, _ = _config_fields(config)
    return f"hil-{tname}-{_FAM_TAG[outer]}{_FAM_TAG[inner]}-{PROPOSALS[cipher][2]}"


@dataclass(frozen=True)
class ChildPlan:
    name: str
    port: int | None  # the TCP port this child selects (None: the whole LANs)


def child_plans(tunnel: TunnelPlan, config: Any) -> list[ChildPlan]:
    """The children of a connection, in initiation order."""
    _, _, _, n = _config_fields(config)
    conn = conn_name(tunnel, config)
    if n == 1 and tunnel.children_by is None:
        return [ChildPlan(f"{conn}-net", None)]
    if tunnel.children_by not in (None, "tcp_port"):
        raise ProvisionError(f"tunnel {tunnel.name}: children.by {tunnel.children_by!r} is not supported")
    return [ChildPlan(f"{conn}-p{tunnel.first_port + i}", tunnel.first_port + i) for i in range(n)]


def conf_path(tunnel: TunnelPlan | str) -> str:
    tname = tunnel if isinstance(tunnel, str) else tunnel.name
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", tname):
        raise ProvisionError(f"tunnel name {tname!r} is not usable in a file name")
    return f"{CONF_DIR}/hil-{tname}.conf"


# --------------------------------------------------------------------------- rendering

_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:/@%\[\]-]+$")


def _value(v: str) -> str:
    """A value as strongSwan's settings parser reads it: bare if simple, else quoted."""
    if _SAFE_VALUE.match(v):
        return v
    if any(c in v for c in '"\\\n\r') or not v.isprintable():
        raise ProvisionError(f"value {v!r} cannot be written into swanctl.conf safely")
    return f'"{v}"'


def _secret_value(psk: Secret) -> str:
    """The PSK as swanctl.conf takes it: quoted when printable and quote-free, else ``0s`` base64."""
    v = psk.reveal()
    if v.isprintable() and v.isascii() and '"' not in v and "\\" not in v:
        return f'"{v}"'
    return "0s" + base64.b64encode(v.encode("utf-8")).decode("ascii")


def _ts(net: str, proto_port: str | None) -> str:
    return f"{net}[{proto_port}]" if proto_port else net


def render_swanctl(tunnel: TunnelPlan, config: Any, end: str, psk: Secret | str | bytes | None) -> str:
    """swanctl.conf text for one end (``"local"`` or ``"remote"``) of one tunnel config.

    ``psk=None`` renders the masked text (see :func:`render_masked`). The text has one
    ``key = value`` per line and balanced braces; :func:`check_grammar` verifies both.
    """
    outer, inner, cipher, _ = _config_fields(config)
    me, peer = tunnel.end(end), tunnel.other(end)
    ike_prop, esp_prop, _ = PROPOSALS[cipher]
    conn = conn_name(tunnel, config)
    if tunnel.identities is None:
        my_id, peer_id = me.outer_addr(outer), peer.outer_addr(outer)
    else:
        lid, rid = tunnel.identities
        my_id, peer_id = (lid, rid) if end == "local" else (rid, lid)
    secret_text = MASK if psk is None else _secret_value(as_secret(psk))

    out: list[str] = []
    w = out.append
    w(f"# Written by the IPsec HIL suite for tunnel {tunnel.name} ({end} end: {me.host}).")
    w("# Restored/removed at teardown; OPNsense keeps conf.d across its swanctl.conf rewrites.")
    w("connections {")
    w(f"    {conn} {{")
    w("        version = 2")
    w(f"        local_addrs = {_value(me.outer_addr(outer))}")
    w(f"        remote_addrs = {_value(peer.outer_addr(outer))}")
    w(f"        proposals = {ike_prop}")
    w("        local {")
    w("            auth = psk")
    w(f"            id = {_value(my_id)}")
    w("        }")
    w("        remote {")
    w("            auth = psk")
    w(f"            id = {_value(peer_id)}")
    w("        }")
    w("        children {")
    for child in child_plans(tunnel, config):
        if child.port is None:
            my_sel = peer_sel = None
        else:  # the port is the server's, on the remote end's LAN
            my_sel = f"tcp/{child.port}" if end == "remote" else "tcp"
            peer_sel = f"tcp/{child.port}" if end == "local" else "tcp"
        w(f"            {child.name} {{")
        w(f"                local_ts = {_ts(me.lan_net(inner), my_sel)}")
        w(f"                remote_ts = {_ts(peer.lan_net(inner), peer_sel)}")
        w(f"                esp_proposals = {esp_prop}")
        w("                mode = tunnel")
        w("                start_action = none")
        w("            }")
    w("        }")
    w("    }")
    w("}")
    w("secrets {")
    w(f"    ike-{conn} {{")
    w(f"        id-1 = {_value(my_id)}")
    w(f"        id-2 = {_value(peer_id)}")
    w(f"        secret = {secret_text}")
    w("    }")
    w("}")
    text = "\n".join(out) + "\n"
    check_grammar(text)
    return text


def render_masked(tunnel: TunnelPlan, config: Any, end: str, psk: Any = None) -> str:
    """The same text with the secret replaced by ``<masked>`` (for reports and logs)."""
    return render_swanctl(tunnel, config, end, None)


_KEY_LINE = re.compile(r'^[A-Za-z0-9_.-]+ = ("[^"\n]*"|[^\s"{}#=][^\s"{}#]*)$')
_OPEN_LINE = re.compile(r"^[A-Za-z0-9_.-]+ \{$")


def check_grammar(text: str, source: str = "<rendered>") -> None:
    """strongSwan-grammar sanity: one ``key = value`` per line, sections balanced.

    Raises ProvisionError naming ``source:line`` -- it runs on every rendered text before
    it can reach an appliance.
    """
    depth = 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == "}":
            depth -= 1
            if depth < 0:
                raise ProvisionError(f"{source}:{no}: unbalanced '}}'")
        elif _OPEN_LINE.match(line):
            depth += 1
        elif line.startswith("include "):
            if depth:
                raise ProvisionError(f"{source}:{no}: include inside a section")
        elif _KEY_LINE.match(line):
            if depth == 0:
                raise ProvisionError(f"{source}:{no}: key outside any section: {line.split(' ')[0]}")
        else:
            key = line.split("=")[0].strip()[:40]
            raise ProvisionError(f"{source}:{no}: not one 'key = value' per line (near {key!r})")
    if depth != 0:
        raise ProvisionError(f"{source}: {depth} section(s) not closed")


# --------------------------------------------------------------------------- the transaction


@dataclass
class BringUp:
    """What bring-up found: children established, each initiate outcome, both ends' SAs."""

    conn: str
    children_total: int
    children_up: int
    outcomes: dict[str, Any]  # child -> parsers.swanctl_initiate InitiateResult
    sas: dict[str, Any] = field(default_factory=dict)  # appliance -> parsers SaList

    @property
    def all_up(self) -> bool:
        return self.children_up == self.children_total

    def failures(self) -> list[tuple[str, str]]:
        return [(c, _outcome_name(r)) for c, r in self.outcomes.items() if not getattr(r, "ok", False)]


def _outcome_name(r: Any) -> str:
    o = getattr(r, "outcome", None)
    name = getattr(o, "value", None) or str(o)
    err = getattr(r, "error", None)
    return f"{name} ({err})" if err else str(name)


@dataclass(frozen=True)
class Undo:
    """One change outside the files (route, interface flag, address) and how to revert it."""

    appliance: str
    what: str  # human text for logs and the report
    kind: str  # route | ifconfig
    args: tuple[str, ...]
    entry: Any = None  # files.UndoEntry journalled on the appliance (None: not journalled)


class TunnelProvisioner:
    """Install one tunnel config on both ends as a transaction, bring it up, undo it.

    ``up()``: for each end, back up swanctl.conf and the tunnel's conf.d file
    (``files.Transaction``: sha256 + a journal on the appliance, so a crashed run is
    restored by the next one), make sure swanctl.conf includes ``conf.d/*.conf``, write the
    rendered file atomically (mode 0600), verify it byte for byte, ``swanctl --load-all``;
    initiate every child from the initiator end; for an IPv6 inner family make the
    association's port speak IPv6 (``-ifdisabled``, an address if it has none) and route the
    peer's inner network out of it (the 000 page's two raises); read both ends' SAs.
    Not all children up -> teardown, then ``ProvisionError`` naming each child and outcome.

    ``down()``: terminate, undo routes/flags/addresses, restore the files (sha256-checked by
    files.restore), load again so charon forgets the connection. ``keep=True`` skips all of
    it, loudly (the journal stays on the appliance for the next run's recovery).
    """

    def __init__(
        self,
        appliances: Mapping[str, Any] | Sequence[Any],
        tunnel: TunnelPlan,
        config: Any,
        psk: Secret | str | bytes,
        *,
        run_id: str,
        keep: bool = False,
        initiator: str = "local",
        initiate_timeout: float = 30.0,
        transaction_factory: Any = None,
    ) -> None:
        if not isinstance(appliances, Mapping):
            appliances = {a.name: a for a in appliances}
        self.apps = dict(appliances)
        for e in (tunnel.local, tunnel.remote):
            if e.host not in self.apps:
                raise ProvisionError(f"tunnel {tunnel.name}: no appliance {e.host!r} given (have {sorted(self.apps)})")
        self.tunnel = tunnel
        self.config = config
        self._psk = as_secret(psk)
        self.run_id = run_id
        self.keep = keep
        if initiator not in ("local", "remote"):
            raise ProvisionError(f"initiator must be 'local' or 'remote', not {initiator!r}")
        self.initiator = initiator
        self.initiate_timeout = initiate_timeout
        self._tx_factory = transaction_factory
        self.conn = conn_name(tunnel, config)
        self.path = conf_path(tunnel)
        # (appliance, open Transaction for the conf.d file, kind) with kind "conf" or "main"
        # (swanctl.conf, only opened when its include line had to be added)
        self._txs: list[tuple[str, Any, str]] = []
        self._undo: list[Undo] = []
        self.bringup: BringUp | None = None
        self.log: list[str] = []  # what was done, in order (no secrets) -- for the report
        from plugin.lab.files import DEFAULT_JOURNAL_DIR

        self.journal_dir = DEFAULT_JOURNAL_DIR  # where undo entries of routes/flags go

    def __repr__(self) -> str:
        return f"TunnelProvisioner({self.tunnel.name!r}, {self.conn!r}, psk={self._psk!r})"

    # -- helpers
    def _app(self, end: str) -> Any:
        return self.apps[self.tunnel.end(end).host]

    def _note(self, text: str) -> None:
        self.log.append(text)
        log.info("%s", text)

    def _transaction(self, app: Any) -> Any:
        if self._tx_factory is not None:
            return self._tx_factory(app.host, self.run_id)
        from plugin.lab.files import Transaction

        return Transaction(app.host, self.run_id)

    # -- bring-up
    def __enter__(self) -> BringUp:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> BringUp:
        try:
            for end in ("local", "remote"):
                self._install(end)
            for end in ("local", "remote"):
                self._load(end)
            bu = self._initiate()
            if self.config.inner == "ipv6":
                for end in ("local", "remote"):
                    self._inner_v6_prerequisites(end)
            bu.sas = {a.name: a.list_sas() for a in self._ends_apps()}
            self.bringup = bu
        except BaseException:
            self._teardown_after_failure()
            raise
        if not bu.all_up:
            self._teardown_after_failure()
            raise ProvisionError(
                f"tunnel {self.tunnel.name} ({self.conn}): {bu.children_up} of {bu.children_total} children "
                "established -- the run stops here (002 page); "
                + "; ".join(f"child {c}: {o}" for c, o in bu.failures())
            )
        return bu

    def _ends_apps(self) -> list[Any]:
        return [self._app("local"), self._app("remote")]

    def _install(self, end: str) -> None:
        app = self._app(end)
        self._ensure_include(app)
        tx = self._transaction(app)
        tx.__enter__()
        self._txs.append((app.name, tx, "conf"))
        tx.backup(self.path)
        text = render_swanctl(self.tunnel, self.config, end, self._psk)
        data = text.encode("utf-8")
        app.host.run(f"mkdir -p {_q(CONF_DIR)}", timeout=30).check(f"mkdir -p {CONF_DIR}")
        app.host.write_file_atomic(self.path, data, mode=0o600)
        back = app.host.read_file(self.path)
        if hashlib.sha256(back).digest() != hashlib.sha256(data).digest():
            raise ProvisionError(f"{app.name}: {self.path} does not read back as written ({len(back)} bytes)")
        self._note(f"{app.name}: wrote {self.path} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]})")

    def _ensure_include(self, app: Any) -> None:
        """OPNsense's swanctl.conf ends with ``include conf.d/*.conf``; add it if it does not.

        Only then is swanctl.conf itself backed up (its own transaction, restored last, after
        charon has been told to forget our connection while the include still stood).
        """
        current = app.host.read_file(SWANCTL_CONF) if app.host.exists(SWANCTL_CONF) else None
        if current is not None and any(l.strip() == INCLUDE_LINE for l in current.decode("utf-8", "replace").splitlines()):
            return
        tx = self._transaction(app)
        tx.__enter__()
        self._txs.append((app.name, tx, "main"))
        tx.backup(SWANCTL_CONF)
        base = current or b""
        if base and not base.endswith(b"\n"):
            base += b"\n"
        app.host.write_file_atomic(SWANCTL_CONF, base + (INCLUDE_LINE + "\n").encode(), mode=0o600)
        self._note(f"{app.name}: added '{INCLUDE_LINE}' to {SWANCTL_CONF}")

    def _load(self, end: str) -> None:
        app = self._app(end)
        res = app.swanctl_load()
        if not getattr(res, "ok", False) or self.conn not in getattr(res, "connections", (self.conn,)):
            errs = list(getattr(res, "config_errors", ())) + [
                f"{f.kind} {f.name}: {f.message}" for f in getattr(res, "failures", ())
            ]
            if getattr(res, "charon_error", None):
                errs.append(f"charon: {res.charon_error}")
            raise ProvisionError(
                f"{app.name}: swanctl --load-all did not load {self.conn} (status {getattr(res, 'status', '?')}): "
                + ("; ".join(errs) or "no error printed")
            )
        self._note(f"{app.name}: swanctl --load-all loaded {self.conn}")

    def _initiate(self) -> BringUp:
        app = self._app(self.initiator)
        kids = child_plans(self.tunnel, self.config)
        outcomes: dict[str, Any] = {}
        for child in kids:
            res = app.swanctl_initiate(child.name, ike=self.conn, timeout=self.initiate_timeout)
            outcomes[child.name] = res
            self._note(f"{app.name}: initiate {child.name}: {_outcome_name(res)}")
        up = sum(1 for r in outcomes.values() if getattr(r, "ok", False))
        return BringUp(self.conn, len(kids), up, outcomes)

    def _inner_v6_prerequisites(self, end: str) -> None:
        """The 000 page: the association's port must speak IPv6 and route the peer's inner net."""
        app = self._app(end)
        me, peer = self.tunnel.end(end), self.tunnel.other(end)
        ifname = me.port_ifname
        iface = app.interface(ifname)
        if getattr(iface, "ifdisabled", False):
            with self._journalled(app, Undo(app.name, f"{ifname} inet6 ifdisabled again", "ifconfig",
                                            (ifname, "inet6", "ifdisabled"))):
                app.ifconfig(ifname, "inet6", "-ifdisabled")
            self._note(f"{app.name}: ifconfig {ifname} inet6 -ifdisabled")
        if not _has_global_inet6(iface) and "ipv6" in me.port_if:
            addr = me.port_if["ipv6"]
            with self._journalled(app, Undo(app.name, f"{ifname} inet6 {addr} removed", "ifconfig",
                                            (ifname, "inet6", addr, "-alias"))):
                app.ifconfig(ifname, "inet6", addr, "alias")
            self._note(f"{app.name}: ifconfig {ifname} inet6 {addr} alias")
        net = peer.lan_net("ipv6")
        probe = str(next(ipaddress.ip_network(net).hosts()))
        route = app.route_get(probe, family="ipv6")
        if route is None or getattr(route, "interface", None) != ifname:
            # Out of the association's port: via the peer's IPv6 address on that link when the
            # topology gives one (an ordinary on-link gateway), else `-interface PORT`.
            gw = peer.port_if.get("ipv6")
            gw = str(ipaddress.ip_interface(gw).ip) if gw else None
            how = gw or f"-interface {ifname}"
            with self._journalled(app, Undo(app.name, f"route {net} via {how} removed", "route", (net, "ipv6"))):
                if gw:
                    app.route_add(net, gateway=gw, family="ipv6")
                else:
                    app.route_add(net, interface=ifname, family="ipv6")
            self._note(f"{app.name}: route -6 add -net {net} {how}")

    @contextlib.contextmanager
    def _journalled(self, app: Any, undo: Undo) -> Iterator[None]:
        """Journal ``undo`` on the appliance, make the change (the with-block), then keep it
        for ``down()``. Journalled BEFORE the change: a run killed right after the change
        leaves the recipe for the next run's ``files.recover``. If the change is refused as
        already existing, the entry is dropped (never undo what someone else made); on any
        other failure or interrupt it may have been made, so it is reverted like a success."""
        from plugin.lab import files

        entry = files.journal_undo(app.host, f"{app.name}: {undo.what}", _undo_script(undo),
                                   self.journal_dir, self.run_id)
        try:
            yield
        except LabError as e:
            if any(w in str(e) for w in ("already in table", "File exists")):
                # refused because it already existed: not ours, never undo it
                with contextlib.suppress(Exception):
                    files.forget_undo(app.host, entry)
            else:  # we cannot know whether it was made: down() reverts it (idempotent)
                self._undo.append(dataclasses.replace(undo, entry=entry))
            raise
        except BaseException:  # interrupted: the change may well be made
            self._undo.append(dataclasses.replace(undo, entry=entry))
            raise
        self._undo.append(dataclasses.replace(undo, entry=entry))

    # -- teardown
    def _reload(self, name: str) -> str:
        """Best effort: charon forgets the connection whose file is gone (the files and the
        SAs are what must be right; the next load or boot reconciles a failed reload)."""
        app = self.apps[name]
        try:
            if not app.host.exists(SWANCTL_CONF):
                return f"{name}: WARNING no {SWANCTL_CONF}; charon keeps {self.conn} loaded (no SAs)"
            res = app.swanctl_load()
            return f"{name}: swanctl --load-all (status {getattr(res, 'status', '?')})"
        except LabError as e:
            return f"{name}: WARNING swanctl --load-all after restore failed: {e}"

    def _teardown_after_failure(self) -> None:
        try:
            self.down()
        except LabError as e:  # the original error is the one to report; this one is logged
            log.error("teardown after a failed bring-up also failed: %s", e)
            self.log.append(f"teardown after failure also failed: {e}")

    def reestablish(self) -> BringUp:
        """After a reboot of an end: load the kept files on both ends and bring every child
        up again (a rebooted OPNsense keeps swanctl.conf and conf.d, but no SA; the peer
        replaces its stale SAs when the rebooted end initiates with INITIAL_CONTACT)."""
        for end in ("local", "remote"):
            self._load(end)
        bu = self._initiate()
        if not bu.all_up:
            raise ProvisionError(
                f"{self.conn}: after the reboot {bu.children_up} of {bu.children_total} children came back: "
                + "; ".join(f"child {c}: {o}" for c, o in bu.failures()))
        bu.sas = {a.name: a.list_sas() for a in self._ends_apps()}
        self.bringup = bu
        return bu

    def backups(self) -> list[tuple[str, Any]]:
        """(appliance, files.Backup) of every file this tunnel's transactions saved (the
        state to compare with after teardown)."""
        return [(t[0], b) for t in self._txs for b in t[1].backups]

    def down(self) -> list[str]:
        """Undo everything ``up`` did (reverse order); returns what was done. Idempotent."""
        if self.keep:
            msg = (
                f"KEEPING tunnel {self.tunnel.name} ({self.conn}) as asked (--keep-tunnels): "
                f"{self.path} stays on {', '.join(sorted({t[0] for t in self._txs}))}, "
                f"{len(self._undo)} route/interface change(s) stay; the journal restores them on the next run"
            )
            log.warning("%s", msg)
            self.log.append(msg)
            self._txs.clear()
            self._undo.clear()
            return [msg]
        done: list[str] = []
        errors: list[str] = []
        # A Ctrl-C (or any unexpected exception) during teardown must not leave half a
        # tunnel: every step still runs, the first such exception is re-raised at the end (a
        # second Ctrl-C in the same step does stop it; the journal then holds what is left).
        interrupted: list[BaseException] = []
        # exact reverse of up(): routes and interface changes, then the SAs, then the files
        while self._undo:
            u = self._undo.pop()
            app = self.apps[u.appliance]
            try:
                gone = ""
                if u.kind == "route":
                    gone = "" if app.route_delete(u.args[0], family=u.args[1]) else " (was already gone)"
                else:
                    app.ifconfig(*u.args)
                if u.entry is not None:
                    from plugin.lab.files import forget_undo

                    forget_undo(app.host, u.entry)
                done.append(f"{u.appliance}: {u.what}{gone}")
            except LabError as e:
                errors.append(f"{u.appliance}: {u.what}: {e} (journal entry kept for the next run)")
            except BaseException as e:  # noqa: BLE001 -- finish the teardown first
                interrupted.append(e)
                errors.append(f"{u.appliance}: {u.what}: interrupted (journal entry kept for the next run)")
        if self._txs:
            for end in (self.initiator, "remote" if self.initiator == "local" else "local"):
                app = self._app(end)
                try:
                    r = app.swanctl_terminate(ike=self.conn, timeout=15)
                    done.append(f"{app.name}: terminate {self.conn} (status {r.status})")
                except LabError as e:
                    errors.append(f"{app.name}: terminate {self.conn}: {e}")
                except BaseException as e:  # noqa: BLE001 -- finish the teardown first
                    interrupted.append(e)
                    errors.append(f"{app.name}: terminate {self.conn}: interrupted")
        # 1. the tunnel's own file, 2. load (the include still stands: charon drops the
        # connection), 3. swanctl.conf if we had to touch it.
        for kind in ("conf", "main"):
            for name, tx, k in reversed([t for t in self._txs if t[2] == kind]):
                what = self.path if kind == "conf" else SWANCTL_CONF
                try:
                    tx.__exit__(None, None, None)
                    done.append(f"{name}: restored {what} (sha256 verified)")
                except LabError as e:
                    errors.append(f"{name}: restoring {what}: {e}")
                    continue
                except BaseException as e:  # noqa: BLE001 -- finish the teardown first
                    interrupted.append(e)
                    errors.append(f"{name}: restoring {what}: interrupted (journal kept for the next run)")
                    continue
                if kind == "conf":
                    try:
                        done.append(self._reload(name))
                    except BaseException as e:  # noqa: BLE001 -- finish the teardown first
                        interrupted.append(e)
        self._txs.clear()
        for d in done:
            self._note(d)
        if interrupted:
            for e in errors:
                self._note(f"teardown: {e}")
            raise interrupted[0]
        if errors:
            raise ProvisionError(f"teardown of {self.conn} incomplete: " + "; ".join(errors))
        return done


def _undo_script(u: Undo) -> str:
    """The sh script ``files.recover`` runs for ``u``: the same command ``down()`` runs,
    made idempotent (an already-removed route or address is the wanted state)."""
    import shlex

    if u.kind == "route":
        net, fam = u.args
        cmd = ["route"] + (["-6"] if fam == "ipv6" else []) + ["delete", "-net", net]
    else:
        cmd = ["ifconfig", *u.args]
    return " ".join(shlex.quote(a) for a in cmd) + " >/dev/null 2>&1 || true\n"


def _has_global_inet6(iface: Any) -> bool:
    for a in getattr(iface, "inet6", ()) or ():
        addr = getattr(a, "address", a)
        try:
            ip = ipaddress.IPv6Address(str(addr).split("%", 1)[0])
        except ValueError:
            continue
        if not ip.is_link_local:
            return True
    return False


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)
