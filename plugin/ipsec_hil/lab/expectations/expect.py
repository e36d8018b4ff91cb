"""Expected values that come from the topology and the profiles, not from the pages' figures.

Why: "the rate is the gigabit link's, less the tunnels' envelope" (the 002 page) -- a
throughput floor is the slowest link on the path, times the share of a full-size packet
that is TCP payload once ESP has wrapped it, times the model's margin. The day a link or a
cipher changes, the floor moves with it. The path MTU of a tunnel is its outer port's MTU.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.expectations.hardware import HardwareProfile, host_profile
from ipsec_hil.lab.topology import Topology, TunnelConfig

#: Bytes of an IPv4/IPv6 + TCP header with timestamps (what iperf3's segments carry).
TCP_IP_HEADER = {"ipv4": 20 + 32, "ipv6": 40 + 32}
#: Ethernet framing on the wire per packet (header 14 + FCS 4 + preamble 8 + gap 12).
ETHERNET_FRAMING = 38


@dataclass(frozen=True)
class Floor:
    """A throughput floor and how it was derived (printed in a failure and on the page)."""

    mbit: float
    link_mbit: float
    goodput_share: float
    margin: float
    why: str

    def __str__(self) -> str:
        return (f"{self.mbit:.1f} Mbit/s = {self.link_mbit:g} Mbit/s link x {self.goodput_share:.3f} "
                f"goodput share x {self.margin:g} margin ({self.why})")


def goodput_share(config: TunnelConfig, mtu: int) -> float:
    """TCP payload per byte on the wire for full-size segments through the tunnel."""
    inner = esp_math.max_inner(config.cipher, config.outer, mtu)
    payload = inner - TCP_IP_HEADER[config.inner]
    wire = esp_math.outer_packet_len(config.cipher, config.outer, inner) + ETHERNET_FRAMING
    return payload / wire


def _port_rate(topology: Topology, host: str, port: str) -> float | None:
    rates = [topology.port(host, port).rate_mbit]
    for link in topology.links:
        if (host, port) in link.ends:
            rates.append(link.rate_mbit)
    known = [r for r in rates if r]
    return min(known) if known else None


def throughput_floor(topology: Topology, tunnel: str, config: TunnelConfig, *, via_bench: bool) -> Floor:
    """The least acceptable rate through ``tunnel`` in ``config``.

    ``via_bench``: the traffic enters from the bench on the local end's LAN (forwarded), so
    the bench's port is on the path too; otherwise it is the appliances' own.
    """
    t = topology.tunnels[tunnel]
    hops = [(t.local.host, t.local.port), (t.remote.host, t.remote.port)]
    if via_bench:
        hops.append((t.local.host, t.local.lan))
    rates = [r for r in (_port_rate(topology, h, p) for h, p in hops) if r]
    if not rates:
        raise ValueError(f"tunnel {tunnel}: no rate_mbit on any port or link of its path; the floor needs one")
    link = min(rates)
    mtu = topology.path_mtu(tunnel)
    share = goodput_share(config, mtu)
    profile = host_profile(topology.hosts[t.local.host])
    margin = profile.floor_margin
    return Floor(profile.throughput_floor_mbit(link * share), link, share, margin,
                 f"slowest port on the path, {config.cipher} over {config.outer}, path MTU {mtu}")


def first_host(network: str) -> str:
    """The first usable address of a network (a probe target inside a selector)."""
    return str(next(ipaddress.ip_network(network, strict=False).hosts()))


#: The kernel's ESP statistics that stand for the engine's counts when an end runs the
#: kernel's cipher. Which *driver* counters add up to "packets the engine encrypted" and
#: "packets it decrypted and handed up" is the model's: its profile's roles
#: (ipsec_hil.lab.expectations.hardware, DESIGN.md "Counter meanings").
KERNEL_ENCRYPTED = ("esp.sent-packets",)
KERNEL_DECRYPTED = ("esp.received-packets",)


def encrypted_refs(appliance: str, profile: HardwareProfile, kernel_cipher: bool = False) -> list[str]:
    """Ledger references whose deltas sum to the packets ``appliance`` encrypted."""
    names = KERNEL_ENCRYPTED if kernel_cipher else profile.roles.encrypted
    return [f"{appliance}:{n}" for n in names]


def decrypted_refs(appliance: str, profile: HardwareProfile, kernel_cipher: bool = False) -> list[str]:
    """Ledger references whose deltas sum to the packets ``appliance`` decrypted and handed up."""
    names = KERNEL_DECRYPTED if kernel_cipher else profile.roles.decrypted
    return [f"{appliance}:{n}" for n in names]


#: The kernel's ESP packet counters: on an end whose engine holds the associations they
#: must not move while the tunnel carries traffic (page 001: "the 3300's kernel ESP counters
#: did not move ... its engine took its side").
KERNEL_ESP_PACKETS = ("esp.received-packets", "esp.sent-packets")
#: The smallest TCP header (no options): dividing by the largest payload it leaves gives a
#: packet count no stream can go below.
TCP_MIN_HEADER = 20


def kernel_esp_refs(appliance: str) -> list[str]:
    """Ledger references of ``appliance``'s kernel ESP packet counters (in and out)."""
    return [f"{appliance}:{n}" for n in KERNEL_ESP_PACKETS]


def tx_drop_refs(appliance: str, profile: HardwareProfile, kernel_cipher: bool = False) -> list[str]:
    """Ledger references of packets counted as encrypted, then dropped before leaving
    (the profile's ``tx_drops`` role; none for the kernel's cipher, which counts a packet
    only once it is queued)."""
    return [] if kernel_cipher else [f"{appliance}:{n}" for n in profile.roles.tx_drops]


def if_drop(port: str, way: str) -> str:
    """The ledger name of ``port``'s drops going ``way`` ("in": netstat -i's Idrop, the
    receive ring full; "out": its Drop, the send queue full): a snapshot's key
    (measuring.measure.Snapshot.values) and a door's name in one place."""
    if way not in ("in", "out"):
        raise ValueError(f"if_drop: way must be 'in' or 'out', not {way!r}")
    return f"if.{port}.{'idrop' if way == 'in' else 'odrop'}"


def loss_doors(sender: str, sender_profile: HardwareProfile, sender_port: str, receiver: str,
               receiver_port: str, kernel_cipher: bool = False) -> list[str]:
    """Every door between ``sender``'s count of what it encrypted and ``receiver``'s count
    of what it decrypted (issue 52: a ledger closes on counts): the sender's transmit drops
    (the profile's ``tx_drops``: encrypted, then dropped at a full transmit queue; for the
    kernel's cipher, which counts a frame before the interface takes it, the sender port's
    output drops instead) and the receiver port's input drops (a missed receive ring) --
    `netstat -i -d`'s Drop and Idrop, if_data's ifi_oqdrops and ifi_iqdrops, kept by every
    FreeBSD the suite meets (14.x, 15.x) for every interface, so the model's profile names
    only its driver's own door. A frame lost anywhere else is counted nowhere: the
    conservation then fails, as it must."""
    doors = tx_drop_refs(sender, sender_profile, kernel_cipher)
    if kernel_cipher:
        doors.append(f"{sender}:{if_drop(sender_port, 'out')}")
    doors.append(f"{receiver}:{if_drop(receiver_port, 'in')}")
    return doors


def largest_tcp_payload(config: TunnelConfig, mtu: int) -> int:
    """The most TCP payload one packet through the tunnel can carry: the largest inner
    packet minus its IP header and the smallest TCP header."""
    return esp_math.max_inner(config.cipher, config.outer, mtu) - esp_math.IP_HEADER[config.inner] - TCP_MIN_HEADER


def least_packets(carried_bytes: int | None, largest_payload: int) -> int:
    """The fewest packets that can carry ``carried_bytes`` of payload (ceiling division);
    at least 1 -- a stream that reports nothing carried must not make a bound of 0."""
    if largest_payload <= 0:
        raise ValueError(f"largest payload must be positive, got {largest_payload}")
    return max(1, -(-(carried_bytes or 0) // largest_payload))
