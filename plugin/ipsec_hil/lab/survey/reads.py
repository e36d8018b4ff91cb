"""What the survey reads: every command the suite reads, as the suite sends it.

Why a list of :class:`Read` values: each one is one command line (the exact line the
suite's code sends -- ipsec_hil.lab.appliance, preflight, ping_argv), the name of
its file in the bundle and the parser that reads it (``ipsec_hil.lab.parsers.<module>``,
called directly with the same arguments the suite gives it). The same record tells
:mod:`ipsec_hil.lab.survey.golden` how to turn the saved output into a golden case.
A read without a parser is saved raw and said so in the table.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.expectations.hardware import host_profile
from ipsec_hil.lab.command import IP_ADDR, SWANCTL_LIST_CONNS, SWANCTL_STATS
from ipsec_hil.lab.parsers import (cputime, dmesg, ifconfig, iperf3, ip_route, kldstat, netstat_esp, netstat_ip,
                                    netstat_ipsec, osversion, route_get, setkey, setkey_spd, swanctl_list_sas, sysctl)
from ipsec_hil.lab.remote import argv
from ipsec_hil.lab.topology import Topology
from ipsec_hil.lab import ping_argv

#: echoes per size ping, as tests_hil/test_sizes.py sends them
PING_COUNT = 3
#: what ipsec_hil.lab.appliance.PING_INTERVAL makes the suite's pings wait between echoes
PING_INTERVAL = 0.05


@dataclass(frozen=True)
class Read:
    """One command on one host.

    ``parser``: module of ipsec_hil.lab.parsers (None: saved raw, no parser reads it);
    ``function``/``kwargs``: how it is called (``stream``: with stdout, stderr and status,
    as route_get and ping take them); ``mask``: key material masked before saving and
    parsing (setkey -D); ``unknown_oids``: sysctl's ``unknown oid`` stderr lines are read
    (parsers.sysctl.parse_errors) and those names dropped from ``kwargs['names']``;
    ``ok_status``: exit statuses a raw read may end with and still count as read.
    """

    name: str
    command: str
    parser: str | None = None
    function: str = "parse"
    kwargs: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    mask: bool = False
    unknown_oids: bool = False
    ok_status: tuple[int, ...] = (0,)
    why: str = ""


def appliance_reads(topology: Topology, host: str) -> list[Read]:
    """Everything read from appliance ``host`` before the pings (which need its SAs)."""
    profile = host_profile(topology.hosts[host])
    oids = list(dict(profile.counters).values())
    reads = [
        Read("uname-a", "uname -a", why="kernel build (no parser in the suite)"),
        Read("freebsd-version", osversion.COMMAND, "osversion",
             why="installed kernel, running kernel and userland release (parsers.osversion)"),
        Read("opnsense-version", "opnsense-version", "osversion", function="parse_opnsense_version",
             why="OPNsense release (parsers.osversion)"),
        Read("kern-osrelease", sysctl.COMMAND("-n", "kern.osrelease"), "sysctl",
             kwargs={"mode": "n", "names": ["kern.osrelease"]}, why="Appliance.kernel_version"),
        Read("kldstat", kldstat.COMMAND, "kldstat", why="preflight, Appliance.module_info"),
        Read("cputime", cputime.COMMAND, "cputime",
             why="the comparison's CPU per packet (Appliance.cpu_times)"),
        Read(f"sysctl-dev.{profile.driver}", sysctl.COMMAND(f"dev.{profile.driver}"), "sysctl",
             unknown_oids=True, why="the driver's whole sysctl tree"),
        Read("sysctl-profile", sysctl.COMMAND(*oids), "sysctl", kwargs={"names": oids}, unknown_oids=True,
             why=f"every OID of the {profile.model} profile (Appliance.snapshot)"),
        Read("sysctl-ipsec-offload", sysctl.COMMAND("net.inet.ipsec.offload"), "sysctl", unknown_oids=True,
             why="FreeBSD 15's IPsec offload framework (unknown oid: absent)"),
        Read("netstat-esp", netstat_esp.COMMAND, "netstat_esp", why="Appliance.snapshot"),
        Read("netstat-ipsec", netstat_ipsec.COMMAND, why="no parser in the suite"),
        Read("netstat-ip", netstat_ip.COMMAND, "netstat_ip", why="the IP stack (parsers.netstat_ip)"),
        Read("netstat-ip6", netstat_ip.COMMAND6, "netstat_ip", why="the IPv6 stack (parsers.netstat_ip)"),
        Read("setkey-D", setkey.COMMAND, "setkey", mask=True, why="Appliance.setkey_sas (keys masked)"),
        Read("setkey-DP", setkey_spd.COMMAND, "setkey_spd", why="Appliance.setkey_policies"),
        Read("swanctl-list-sas", swanctl_list_sas.COMMAND, "swanctl_list_sas", why="Appliance.list_sas"),
        Read("swanctl-list-conns", SWANCTL_LIST_CONNS, why="no parser in the suite"),
        Read("swanctl-stats", SWANCTL_STATS, why="preflight: charon answers (no parser)"),
        Read("ifconfig", ifconfig.COMMAND, "ifconfig", why="preflight, Appliance.interface"),
    ]
    for dst in peer_addresses(topology, host):
        fam = "ipv6" if ipaddress.ip_address(dst).version == 6 else "ipv4"
        reads.append(Read(f"route-get-{dst}", route_get.BY_FAMILY[fam](dst), "route_get", stream=True,
                          why="Appliance.route_get to a tunnel peer"))
    reads.append(Read("dmesg", dmesg.COMMAND, "dmesg", why="driver load check, health"))
    return reads


def bench_reads() -> list[Read]:
    """The bench's view: its addresses, routes and iperf3 (preflight's commands)."""
    return [
        Read("ip-addr", IP_ADDR, why="preflight (JSON; no parser in the suite)"),
        Read("ip-route", ip_route.COMMAND("show"), why="no parser in the suite"),
        Read("ip6-route", ip_route.BY_FAMILY["ipv6"]("show"), why="no parser in the suite"),
        Read("iperf3-version", iperf3.VERSION, why="preflight"),
    ]


def peer_addresses(topology: Topology, host: str) -> list[str]:
    """The outer addresses of every tunnel peer of ``host`` (both families), in file order."""
    out: list[str] = []
    for t in topology.tunnels.values():
        for me, other in ((t.local, t.remote), (t.remote, t.local)):
            if me.host != host:
                continue
            port = topology.outer_port(other)
            for a in (port.ipv4, port.ipv6):
                if a is not None and str(a.ip) not in out:
                    out.append(str(a.ip))
    return out


@dataclass(frozen=True)
class PingPlan:
    """One gate and the two pings sent at it: ``size`` passes, ``size + 1`` does not."""

    gate: str
    src: str
    dst: str
    family: str
    size: int


def ping_plans(topology: Topology, host: str, sas: Any) -> list[PingPlan]:
    """The pings the size tests send near each gate, for ``host``'s tunnels.

    The outer path: the largest don't-fragment ping that fits the path MTU (and one more),
    to each peer's outer address. Through each tunnel whose SA pair is installed now
    (``sas``: parsers.setkey SadDump of this host, None when it did not parse): the
    appliance's own largest inner packet by ESP arithmetic
    (esp_math.max_inner, as tests_hil/test_sizes.py) and one more, LAN to LAN. The survey
    brings no tunnel up: with none installed, only the outer gates are pinged."""
    plans: list[PingPlan] = []
    seen: set[tuple[str, str, int]] = set()

    def add(p: PingPlan) -> None:
        if (p.src, p.dst, p.size) not in seen:
            seen.add((p.src, p.dst, p.size))
            plans.append(p)

    entries = list(getattr(sas, "entries", ()) or ()) if sas is not None else []
    for t in topology.tunnels.values():
        if t.local.host != host:
            continue
        mtu = topology.path_mtu(t)
        mine, theirs = topology.outer_port(t.local), topology.outer_port(t.remote)
        lan_mine, lan_theirs = topology.lan_port(t.local), topology.lan_port(t.remote)
        for fam, a, b in (("ipv4", mine.ipv4, theirs.ipv4), ("ipv6", mine.ipv6, theirs.ipv6)):
            if a is None or b is None:
                continue
            add(PingPlan(f"outer path MTU {mtu} ({fam})", str(a.ip), str(b.ip), fam,
                         esp_math.ping_data_for_inner(mtu, fam)))
            for sa in entries:
                if (sa.src, sa.dst) != (str(a.ip), str(b.ip)) or not getattr(sa, "cipher", None):
                    continue
                if bool(t.encap) != (sa.satype == "esp-udp"):  # the NAT-T tunnel's SAs are esp-udp
                    continue
                largest = esp_math.max_inner(sa.cipher, fam, mtu, encap=bool(t.encap))
                for inner, x, y in (("ipv4", lan_mine.ipv4, lan_theirs.ipv4),
                                    ("ipv6", lan_mine.ipv6, lan_theirs.ipv6)):
                    if x is not None and y is not None:
                        add(PingPlan(f"tunnel {t.name}: own largest inner {largest} ({sa.cipher}, {fam} outer, "
                                     f"{inner} inside)", str(x.ip), str(y.ip), inner,
                                     esp_math.ping_data_for_inner(largest, inner)))
    return plans


def ping_reads(plans: list[PingPlan]) -> list[Read]:
    """Two reads per plan: the size that must pass and one byte more, with DF, FreeBSD's ping
    flags (ping_argv.freebsd, as Appliance.ping sends them)."""
    reads = []
    for p in plans:
        for size in (p.size, p.size + 1):
            deadline = int(PING_COUNT * PING_INTERVAL + 3)
            req = ping_argv.PingRequest(p.dst, p.family, PING_COUNT, deadline, size, True, p.src, PING_INTERVAL)
            reads.append(Read(f"ping-{p.dst}-{size}", argv(*ping_argv.freebsd(req)), "ping", stream=True,
                              why=p.gate + (" +1" if size > p.size else "")))
    return reads
