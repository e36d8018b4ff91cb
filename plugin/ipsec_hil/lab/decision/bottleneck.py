"""The path's bottleneck for offered UDP load, in the search's unit (Mbit/s of UDP payload),
and how long a trial must last so the path's buffer cannot hide an overload (issue 41).

Why: a throughput figure above the slowest link's line rate is impossible, so the search's
ceiling and the test's physical-limit check both need that rate -- in the unit iperf3
counts (UDP payload), for the frames each link really carries: the bench's link carries
the datagram in plain IP, the tunnel's outer link carries it in ESP (outer header, ESP
header, IV, padding, ICV; ipsec_hil.lab.expectations.esp_math). A 1,200-byte datagram on
a 100 Mbit/s link is 96.6 Mbit/s of payload in plain IPv4 and 92.4 in ESP (GCM).

Per frame on the wire: Ethernet's 14-byte header, 4-byte FCS and 20 bytes of preamble and
inter-frame gap (38) on hardware; in the virtual lab tc's tbf counts the skb, i.e. the
14-byte header and nothing else, so its line rate is what that shaper lets through.

The buffer (RFC 2544 section 24 asks for trials long enough; MLRsearch,
draft-ietf-bmwg-mlrsearch, lets the trial duration be chosen against the DUT's buffers):
iperf3 ends a trial with a message on its TCP control connection, which travels the same
path and queues behind the datagrams, so datagrams still in a queue when the sender stops
are counted as received. The suite therefore does not cut late datagrams; it makes trials
long enough that a queue cannot hide much: a load L above the bottleneck's capacity C
loses nothing for T seconds while ``(L - C) * T`` fits the bottleneck port's queue Q, so a
trial of T seconds can read at most ``Q / (C * T)`` (the *hidden ratio*) above C as
loss-free. The search's trials last at least :meth:`Bottleneck.min_trial_seconds` for the
goal width, and the physical-limit check allows exactly the hidden ratio of the trial
length used (:meth:`Bottleneck.limit`): a queue deeper than the topology states makes it fail.

Library code: no pytest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ipsec_hil.lab.decision.errors import bad
from ipsec_hil.lab.expectations.esp_math import IP_HEADER, outer_packet_len

UDP_HEADER = 8
#: Bytes a frame costs on an Ethernet wire beyond its IP packet: header 14, FCS 4,
#: preamble 8, inter-frame gap 12.
WIRE_OVERHEAD = 38
#: What the twin's tbf counts beyond the IP packet: the Ethernet header only.
TWIN_OVERHEAD = 14


@dataclass(frozen=True)
class Hop:
    """One link of the path as the offered datagrams cross it, from its sending port."""

    sender: str  # host.port whose egress feeds the link
    receiver: str
    rate_mbit: float  # the link's line rate
    frame_bytes: int  # what one datagram costs on it (IP packet + per-frame overhead)
    payload_bytes: int
    queue_bytes: int  # the sending port's egress buffer

    @property
    def payload_mbit(self) -> float:
        """The most UDP payload the link carries per second (Mbit/s)."""
        return self.rate_mbit * self.payload_bytes / self.frame_bytes

    def describe(self) -> str:
        return (f"{self.sender} -> {self.receiver}: {self.rate_mbit:g} Mbit/s line, {self.frame_bytes} B a "
                f"frame = {self.payload_mbit:.1f} Mbit/s of payload, queue {self.queue_bytes // 1024} KiB")


@dataclass(frozen=True)
class Bottleneck:
    """The path's hops and the slowest one, for datagrams of ``payload_bytes``."""

    hops: tuple[Hop, ...]

    @property
    def slowest(self) -> Hop:
        return min(self.hops, key=lambda h: h.payload_mbit)

    @property
    def payload_mbit(self) -> float:
        """The bottleneck's line rate in UDP payload (the search's unit)."""
        return self.slowest.payload_mbit

    def hidden_ratio(self, trial_seconds: float) -> float:
        """How far above the line rate a loss-free trial of ``trial_seconds`` can read when
        the bottleneck's queue absorbs the excess: Q / (C * T), C in bits of the line."""
        if not trial_seconds > 0:
            raise bad("trial_seconds", trial_seconds, "seconds > 0")
        h = self.slowest
        return h.queue_bytes * 8 / (h.rate_mbit * 1e6 * trial_seconds)

    def min_trial_seconds(self, ratio: float) -> float:
        """The shortest trial whose hidden ratio is at most ``ratio`` (e.g. the goal width)."""
        if not 0 < ratio < 1:
            raise bad("hidden ratio", ratio, "a ratio in (0, 1)")
        h = self.slowest
        return h.queue_bytes * 8 / (h.rate_mbit * 1e6 * ratio)

    def limit(self, trial_seconds: float, loss_ratio: float = 0.0) -> float:
        """The highest load a goal of ``loss_ratio`` can physically meet with trials of
        ``trial_seconds``: the line rate, over (1 - loss) since lost datagrams need no
        room, plus what the queue can hide."""
        return self.payload_mbit / (1.0 - loss_ratio) * (1.0 + self.hidden_ratio(trial_seconds))


def _rate(topology: Any, host: str, port: str) -> float | None:
    rates = [topology.port(host, port).rate_mbit]
    peer = topology.peer_of(host, port)
    link = topology.link_of(host, port)
    if link is not None:
        rates.append(link.rate_mbit)
    if peer is not None:
        rates.append(topology.port(*peer).rate_mbit)
    known = [r for r in rates if r]
    return min(known) if known else None


def path_bottleneck(topology: Any, tunnel: str, config: Any, payload_bytes: int) -> Bottleneck:
    """The hops of UDP datagrams of ``payload_bytes`` sent from the bench on the tunnel's
    local LAN to the remote end through ``tunnel`` in ``config`` (outer, inner, cipher,
    encap), each with its line rate in payload. A hop without a stated rate is left out;
    a path with none is an error naming the tunnel (the search needs a ceiling)."""
    t = topology.tunnel(tunnel)
    virtual = bool(getattr(topology.lab, "virtual", False))
    overhead = TWIN_OVERHEAD if virtual else WIRE_OVERHEAD
    inner = IP_HEADER[config.inner] + UDP_HEADER + payload_bytes
    esp = outer_packet_len(config.cipher, config.outer, inner, encap=bool(getattr(t, "encap", False)))
    hops: list[Hop] = []
    bench_end = topology.peer_of(t.local.host, t.local.lan)
    legs = []
    if bench_end is not None:
        legs.append((bench_end, (t.local.host, t.local.lan), inner))
    legs.append(((t.local.host, t.local.port), (t.remote.host, t.remote.port), esp))
    for (sh, sp), (rh, rp), size in legs:
        rate = _rate(topology, sh, sp)
        if rate is None:
            continue
        hops.append(Hop(f"{sh}.{sp}", f"{rh}.{rp}", float(rate), size + overhead, payload_bytes,
                        topology.queue_bytes(sh, sp)))
    if not hops:
        raise bad(f"tunnel {tunnel}: rate_mbit", None, "a rate on a port or link of its path (the search's ceiling)")
    return Bottleneck(tuple(hops))


#: The search's ceiling above the bottleneck's line rate: enough that a DUT at line rate
#: is bracketed (its upper bound must be a load that lost), little enough that the bench
#: is not asked for much more than a wire can carry.
CEILING_MARGIN = 0.10
#: The search's floor, as a share of the bottleneck's line rate.
FLOOR_SHARE = 0.02


@dataclass(frozen=True)
class SearchPlan:
    """Where the NDR/PDR search may look and how long its final trials last, from the path."""

    bottleneck: Bottleneck
    max_rate: float
    min_rate: float
    final_duration: float
    asked_duration: float  # what the options asked; final_duration is at least the queue's need
    width: float

    def lines(self) -> list[str]:
        """The plan in words, for the page."""
        b, h = self.bottleneck, self.bottleneck.slowest
        longer = (f" (asked {self.asked_duration:g} s; {b.min_trial_seconds(self.width):.2f} s keep the queue's "
                  f"share under the goal width {self.width:.1%})" if self.final_duration > self.asked_duration else "")
        return [f"hop {hop.describe()}" for hop in b.hops] + [
            f"bottleneck {h.sender} -> {h.receiver}: {b.payload_mbit:.1f} Mbit/s of UDP payload",
            f"search range {self.min_rate:.1f} .. {self.max_rate:.1f} Mbit/s (ceiling {1 + CEILING_MARGIN:g} x the "
            f"bottleneck)",
            f"final trials {self.final_duration:g} s{longer}: its {h.queue_bytes // 1024} KiB queue can hide "
            f"{b.hidden_ratio(self.final_duration):.2%} of an overload (late datagrams are not cut: iperf3's end "
            f"message queues behind them)",
        ]


def search_plan(bottleneck: Bottleneck, *, width: float, trial_seconds: float,
                margin: float = CEILING_MARGIN) -> SearchPlan:
    """The ceiling (line rate x (1 + margin)), the floor, and final trials at least long
    enough that the bottleneck's queue hides no more than the goal ``width``."""
    if not trial_seconds > 0:
        raise bad("trial_seconds", trial_seconds, "seconds > 0")
    if not 0 < margin <= 1:
        raise bad("ceiling margin", margin, "a ratio in (0, 1], e.g. 0.1")
    need = math.ceil(bottleneck.min_trial_seconds(width) * 10) / 10
    rate = bottleneck.payload_mbit
    return SearchPlan(bottleneck, rate * (1 + margin), rate * FLOOR_SHARE, max(trial_seconds, need), trial_seconds,
                      width)


def physical_limit_problems(result: Any, plan: SearchPlan) -> list[str]:
    """What the search's figures claim beyond physics: a goal's lower bound above what the
    bottleneck can carry at that goal's loss with the queue's hidden share
    (:meth:`Bottleneck.limit`), or a stricter goal (NDR) above a looser one (PDR). Each
    message carries the figures; empty when the figures obey the path."""
    out: list[str] = []
    b = plan.bottleneck
    proved = [g for g in result.goals if g.lower_bound is not None]
    for g in proved:
        limit = b.limit(g.proved_at, g.goal.loss_ratio)
        if g.lower_bound > limit:
            out.append(
                f"{g.goal.name} {g.lower_bound:.1f} Mbit/s is above the bottleneck's line rate: "
                f"{b.slowest.sender} carries {b.payload_mbit:.1f} Mbit/s of payload, {limit:.1f} with "
                f"{g.goal.loss_ratio:.1%} loss and what its {b.slowest.queue_bytes // 1024} KiB queue hides in "
                f"{g.proved_at:g} s trials ({b.hidden_ratio(g.proved_at):.2%}): a queue deeper than stated, or "
                f"loss not counted")
    for stricter, looser in zip(proved, proved[1:]):
        if stricter.lower_bound > looser.lower_bound:
            out.append(f"{stricter.goal.name} {stricter.lower_bound:.1f} Mbit/s is above {looser.goal.name} "
                       f"{looser.lower_bound:.1f} Mbit/s: a load met the stricter goal but not the looser one")
    return out
