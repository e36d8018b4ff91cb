"""An injection set up for an active tunnel: who sends, who counts, which association.

Why here and not in each test: every wire test needs the same facts from the topology
(`tunnels.<t>.inject`), the appliance under test (`setkey -D`: the inbound association's
keys and window, `replay=` in bytes), the sender's side (`swanctl --list-sas`: how many
packets it sent, i.e. where the right edge of the window stands) and the bench (the
address behind the appliance under test where the receiver listens).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .craft import Crafter, Frame, Inner, InjectError
from .run import Delivery, WirePath, inject

log = logging.getLogger(__name__)
RATE_SHARE = 0.5
"""Of the slowest port's rate: the injection is not a load test; its frames must not queue."""
EDGE_MARGIN = 1000
"""Sequence numbers kept free above the sender's last one (frames still in flight)."""


def share_of_path(tunnel: Any, lan_end: str) -> float | None:
    """RATE_SHARE of the slowest port a batch crosses: both outer ports, ``lan_end``'s LAN
    port and the bench's port facing it (None when no port states a rate)."""
    topo, e = tunnel.topology, tunnel.end(lan_end)
    ports = [topo.port(tunnel.end(x).host, tunnel.end(x).port) for x in ("local", "remote")]
    ports.append(topo.port(e.host, e.lan))
    facing = tunnel.lab.bench_port_facing(e.host, e.lan)
    if facing is not None:
        ports.append(facing[1])
    rates = [p.rate_mbit for p in ports if getattr(p, "rate_mbit", None)]
    return RATE_SHARE * min(rates) if rates else None


class NoInjectionPoint(InjectError):
    """The topology gives this tunnel no injection point, or the bench cannot count."""


@dataclass
class TunnelWire:
    """The injection point of one active tunnel (ipsec_hil.lab.tunnel.ActiveTunnel)."""

    tunnel: Any
    under: str  # the end under test: "local" | "remote"
    sender: Any  # Host
    receiver: Any  # Host
    path: WirePath
    inner: Inner
    rate_mbit: float | None = None  # what the injection may use of the slowest port on its way
    sa: Any = None  # the SadEntry (KEYS INSIDE: never log it)

    @classmethod
    def of(cls, tunnel: Any) -> "TunnelWire":
        spec = tunnel.topology.tunnels[tunnel.name].inject
        if spec is None:
            raise NoInjectionPoint(f"tunnel {tunnel.name}: no inject: in the topology (topologies/README.md)")
        under = spec.toward
        other = "remote" if under == "local" else "local"
        bench = tunnel.bench
        dst = tunnel.bench_inner_address(under)
        if bench is None or dst is None:
            raise NoInjectionPoint(f"tunnel {tunnel.name}: the bench has no {tunnel.config.inner} address on "
                                   f"{tunnel.end(under).host}'s LAN to count deliveries")
        sender = tunnel.appliance(other).host if spec.via == "peer" else bench.host
        path = WirePath(dst=tunnel.outer_address(under),
                        src=tunnel.outer_address(other) if spec.via == "peer" else None)
        inner = Inner(tunnel.config.inner, tunnel.inner_address(other), dst)
        return cls(tunnel, under, sender, bench.host, path, inner, share_of_path(tunnel, under))

    @property
    def appliance(self) -> Any:
        return self.tunnel.appliance(self.under)

    def inbound_sa(self) -> Any:
        """The association the appliance under test decrypts with (newest if several)."""
        sads = [e for e in self.appliance.setkey_sas().entries
                if e.dst == self.path.dst and e.satype == "esp" and e.state in ("mature", "dying")
                and e.spi in self.tunnel.spis(self.appliance)]
        if not sads:
            raise InjectError(f"{self.appliance.name}: no inbound association of tunnel {self.tunnel.name} "
                              f"to {self.path.dst} in setkey -D")
        self.sa = max(sads, key=lambda e: e.spi if e.state == "mature" else -1)
        return self.sa

    def crafter(self) -> Crafter:
        """Frames for the inbound association, 64-bit sequence numbers when the tunnel's
        children were proposed with ESN (a child that would not agree never comes up)."""
        return Crafter(self.sa or self.inbound_sa(), esn=self.tunnel.esn)

    def window(self) -> int:
        """The inbound window in packets (FreeBSD prints replay= in bytes)."""
        return (self.sa or self.inbound_sa()).replay_window_packets

    def right_edge(self) -> int:
        """A sequence number above everything the tunnel's own traffic used: the other
        end's packets out (its last sequence number) plus a margin."""
        other = self.tunnel.appliance("remote" if self.under == "local" else "local")
        sent = 0
        for ike in other.list_sas().ike_sas:
            if ike.name == self.tunnel.conn:
                sent = max([sent] + [c.packets_out or 0 for c in ike.children])
        return sent + EDGE_MARGIN

    def send(self, crafter: Crafter, frames: list[Frame], end_seq: int, pps: float = 4000.0) -> Delivery:
        return inject(self.sender, self.receiver, self.path, self.inner, frames,
                      crafter.end(self.inner, end_seq), pps=pps, rate_mbit=self.rate_mbit)

    def restore(self) -> None:
        """Fresh associations for the tunnel's children: an injection moved the window past
        the tunnel's own sequence numbers, so its traffic would now be replays."""
        self.tunnel.renew_children()
        self.sa = None
