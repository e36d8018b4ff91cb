"""The whole lab (:class:`Topology`) and every fact derived from it, each defined once.

Why here: provisioning, the fixtures, the expectations and the virtual lab's builder all
need the same derived facts (a tunnel end's addresses, its LAN network, its path MTU, the
bench port facing an appliance's LAN). Computed in one place from the validated model,
they cannot drift apart; a caller that needs one asks the topology, never re-derives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.topology.parts import DEFAULT_QUEUE_KIB, Host, LabInfo, Link, Port, _Model
from ipsec_hil.lab.topology.tunnels import Tunnel, TunnelEnd


class Topology(_Model):
    """A whole lab: hosts, wires between them and the tunnels the suite may build."""

    lab: LabInfo
    hosts: dict[str, Host] = Field(min_length=1)
    links: list[Link] = Field(default_factory=list)
    tunnels: dict[str, Tunnel] = Field(default_factory=dict)
    _source: Path | None = PrivateAttr(None)
    _model_names: tuple[str, ...] = PrivateAttr(())  # the loader's registry at load time

    def model_post_init(self, __context: Any) -> None:
        for name, host in self.hosts.items():
            host._name = name
        for name, tunnel in self.tunnels.items():
            tunnel._name = name

    @property
    def source(self) -> Path | None:
        """The file this topology was loaded from."""
        return self._source

    # ------------------------------------------------------------------ lookups

    def appliances(self, model: str | None = None) -> list[Host]:
        """Appliances in file order, optionally only those of ``model``."""
        if model is not None and model not in self._model_names:
            raise ValueError(f"unknown model {model!r}; expected one of {', '.join(self._model_names)}")
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

    # ------------------------------------------------------------------ wiring

    def link_of(self, host: str, port: str) -> Link | None:
        """The link a port is wired to, if any."""
        for link in self.links:
            if (host, port) in link.ends:
                return link
        return None

    def queue_bytes(self, host: str, port: str) -> int:
        """A port's egress buffer as the lab file states it: the port's ``queue_kib``, else its
        link's, else DEFAULT_QUEUE_KIB. One reading for the twin's shaper and the suite's
        trial lengths (ipsec_hil.lab.decision.bottleneck)."""
        p = self.port(host, port)
        link = self.link_of(host, port)
        kib = p.queue_kib or (link.queue_kib if link is not None else None) or DEFAULT_QUEUE_KIB
        return int(kib * 1024)

    def peer_of(self, host: str, port: str) -> tuple[str, str] | None:
        """(host, port) at the other end of the port's link, if wired."""
        link = self.link_of(host, port)
        if link is None:
            return None
        a, b = link.ends
        return b if a == (host, port) else a

    def bench_port_facing(self, host: str, port: str) -> tuple[str, Port] | None:
        """The bench's port wired to ``host.port`` as (name, Port), or None when the port
        is not wired to the bench (forwarded traffic enters an appliance's LAN there)."""
        peer = self.peer_of(host, port)
        if peer is None or self.hosts[peer[0]].role != "bench":
            return None
        return peer[1], self.hosts[peer[0]].ports[peer[1]]

    # ------------------------------------------------------------------ tunnel facts

    def outer_port(self, end: TunnelEnd) -> Port:
        """The port that carries a tunnel end's ESP packets (outer addresses live here)."""
        return self.port(end.host, end.port)

    def lan_port(self, end: TunnelEnd) -> Port:
        """The port of a tunnel end's LAN (its networks are the inner selectors)."""
        return self.port(end.host, end.lan)

    def path_mtu(self, tunnel: str | Tunnel) -> int:
        """The tunnel's path MTU: the MTU of the ports that carry its ESP packets.

        It is what a driver engineer means by it and what FreeBSD's IPsec gate uses
        (``ipsec4_check_pmtu``/``ipsec6_check_pmtu`` take the MTU of the interface the
        route to the peer leaves by: the local end's outer port). Loading a file checks
        that both ends' outer ports have the same MTU (a wire carries one MTU, and the
        two ends of a tunnel that are not wired to each other must still state one), so
        this number is the same seen from either end, and the suite's expectations and
        the virtual lab's gate agree by construction, not because a file is symmetric.
        """
        t = tunnel if isinstance(tunnel, Tunnel) else self.tunnel(tunnel)
        return self.outer_port(t.local).mtu

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON/YAML-safe; paths absolute) -- e.g. for a resolved copy."""
        return self.model_dump(mode="json", exclude_none=True)
