"""A topology tunnel resolved for provisioning: its ends, children, names and file.

Naming (fixed here, used by tests and the report):
- connection ``hil-<tunnel>-<o><i>-<gcm|cbc>``, e.g. ``hil-lab-v4v6-gcm`` (outer v4, inner v6);
- one child: ``<conn>-net``; N children by TCP port: ``<conn>-p<port>``;
- file ``/usr/local/etc/swanctl/conf.d/hil-<tunnel>.conf`` on both ends.

Children by TCP port: the port is the *server's* port on the remote end's LAN (the 002 page:
"each child one TCP port of the 3300's Port8 address"); the local end's selector is the
local LAN with ``[tcp]`` (any port), the remote end's the remote LAN with ``[tcp/PORT]``.

The plan reads the typed topology (:class:`ipsec_hil.lab.topology.Topology`) and keeps its
ports: every address, network and MTU it hands out is the topology's own
(:meth:`Port.ip`, :meth:`Port.network`, :meth:`Topology.path_mtu`), never re-derived.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from ipsec_hil.lab.errors import ProvisionError
from ipsec_hil.lab.expectations.esp_math import FAMILIES
from ipsec_hil.lab.topology import Port, Topology, TunnelConfig, TunnelEnd
from ipsec_hil.lab.topology.tunnels import Lifetimes, pick_end

CONF_DIR = "/usr/local/etc/swanctl/conf.d"

#: cipher name -> (IKE proposal, ESP proposal, short tag for names)
PROPOSALS: dict[str, tuple[str, str, str]] = {
    "aes-gcm-16": ("aes256gcm16-prfsha256-x25519", "aes256gcm16", "gcm"),
    "aes-cbc-hmac-sha256": ("aes256-sha256-x25519", "aes256-sha256", "cbc"),
}
_FAM_TAG = {"ipv4": "v4", "ipv6": "v6"}


@dataclass(frozen=True)
class EndPlan:
    """One end of a tunnel: the topology's end (host, port, lan, cipher) and its two ports."""

    host: str
    port: str  # the association's port: outer addresses live here
    lan: str  # the LAN port: inner selectors come from its networks
    cipher: str  # kernel | offload: who encrypts at this end (rendering ignores it)
    outer_port: Port
    lan_port: Port

    @classmethod
    def of(cls, topology: Topology, end: TunnelEnd) -> EndPlan:
        return cls(end.host, end.port, end.lan, end.cipher, topology.outer_port(end), topology.lan_port(end))

    @property
    def ifname(self) -> str | None:
        return self.outer_port.ifname

    @property
    def port_ifname(self) -> str:
        """The OS's name of the outer port (topology ``ifname``), else the port's name."""
        return self.outer_port.ifname or self.port

    @property
    def outer(self) -> Mapping[str, str]:
        """family -> address on the outer port (no prefix)."""
        return {f: ip for f in FAMILIES if (ip := self.outer_port.ip(f)) is not None}

    @property
    def port_if(self) -> Mapping[str, str]:
        """family -> address/prefix on the outer port."""
        return {f: str(a) for f in FAMILIES if (a := self.outer_port.address(f)) is not None}

    @property
    def lan_if(self) -> Mapping[str, str]:
        """family -> address/prefix on the LAN port."""
        return {f: str(a) for f in FAMILIES if (a := self.lan_port.address(f)) is not None}

    def lan_net(self, family: str) -> str:
        """The LAN's network of ``family``: this end's inner selector."""
        net = self.lan_port.network(family)
        if net is None:
            raise ProvisionError(f"{self.host}.{self.lan}: no {family} address in the topology for the inner selectors")
        return net

    def inner_address(self, family: str) -> str:
        """The appliance's own address on its LAN in ``family``."""
        ip = self.lan_port.ip(family)
        if ip is None:
            raise ProvisionError(f"{self.host}.{self.lan}: no {family} address in the topology")
        return ip

    def outer_addr(self, family: str) -> str:
        """The appliance's address of ``family`` on the outer port (the ESP header's)."""
        ip = self.outer_port.ip(family)
        if ip is None:
            raise ProvisionError(f"{self.host}.{self.port}: no {family} address in the topology for the outer header")
        return ip


@dataclass(frozen=True)
class TunnelPlan:
    """A topology tunnel resolved for rendering and provisioning.

    ``identities`` is ``None`` (the two outer addresses, as the lab tunnel) or a pair
    ``(local_id, remote_id)`` as seen from the local end. ``path_mtu`` is
    :meth:`Topology.path_mtu` (one definition, documented there).
    """

    name: str
    local: EndPlan
    remote: EndPlan
    path_mtu: int
    children_by: str | None = None  # None (one child) or "tcp_port"
    first_port: int = 5201
    identities: tuple[str, str] | None = None
    tolerance: Mapping[str, float] = field(default_factory=dict)
    encap: bool = False  # NAT-T forced: `encap = yes` in both ends' swanctl.conf
    lifetimes: Lifetimes | None = None  # the children's rekey_time/life_time/rand_time (None: defaults)
    replay_window: int | None = None  # the children's swanctl `replay_window` in packets (None: 32)
    esn: bool = False  # children proposed with extended sequence numbers only (`-esn`)

    def end(self, which: str) -> EndPlan:
        return pick_end(which, self.local, self.remote, f"tunnel {self.name}", ProvisionError)

    def other(self, which: str) -> EndPlan:
        return self.remote if which == "local" else self.local

    @classmethod
    def from_topology(cls, topology: Topology, name: str) -> TunnelPlan:
        """Resolve ``topology.tunnels[name]`` to a plan."""
        if name not in topology.tunnels:
            raise ProvisionError(f"topology has no tunnel {name!r} (has: {', '.join(sorted(topology.tunnels))})")
        t = topology.tunnels[name]
        ids = t.identities
        return cls(
            name=name,
            local=EndPlan.of(topology, t.local),
            remote=EndPlan.of(topology, t.remote),
            path_mtu=topology.path_mtu(t),
            children_by=t.children.by,
            first_port=t.children.first_port or 5201,
            identities=None if ids is None else (ids.local, ids.remote),
            tolerance=t.tolerance.model_dump(),
            encap=t.encap,
            lifetimes=t.lifetimes,
            replay_window=t.replay_window,
            esn=t.esn,
        )


def check_config(config: TunnelConfig) -> None:
    """A hand-made config's families, cipher and children, each error naming the field."""
    for what, fam in (("outer", config.outer), ("inner", config.inner)):
        if fam not in _FAM_TAG:
            raise ProvisionError(f"config.{what}: expected ipv4 or ipv6, found {fam!r}")
    if config.cipher not in PROPOSALS:
        raise ProvisionError(f"config.cipher: expected one of {sorted(PROPOSALS)}, found {config.cipher!r}")
    if config.children < 1:
        raise ProvisionError(f"config.children: expected >= 1, found {config.children}")


def conn_name(tunnel: TunnelPlan | str, config: TunnelConfig) -> str:
    """The connection's name for one tunnel and config, e.g. ``hil-lab-v4v6-gcm``."""
    tname = tunnel if isinstance(tunnel, str) else tunnel.name
    check_config(config)
    return f"hil-{tname}-{_FAM_TAG[config.outer]}{_FAM_TAG[config.inner]}-{PROPOSALS[config.cipher][2]}"


@dataclass(frozen=True)
class ChildPlan:
    name: str
    port: int | None  # the TCP port this child selects (None: the whole LANs)


def child_plans(tunnel: TunnelPlan, config: TunnelConfig) -> list[ChildPlan]:
    """The children of a connection, in initiation order."""
    conn = conn_name(tunnel, config)
    n = config.children
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
