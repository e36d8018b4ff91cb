"""Network namespaces, veth wires, addresses and rate limits for the virtual lab (pyroute2).

Why pyroute2 and not `ip`: netlink calls fail with an errno we can report per object
(which veth, which address), they are fast (a whole lab in ~0.1 s), and they need no
parsing of `ip`'s output.  Processes are still started with `ip netns exec` elsewhere
(ipsec_hil_twin.lifecycle.lab), because that also gives them the namespace's /etc/netns view.

What a freshly built lab has, and nothing more (the real lab after boot):
- one namespace `P-<host>` per host, `lo` up;
- one veth pair per topology link, each end renamed inside its namespace to the
  port's name (`lan`, `wan10g`, `a_lan`...), with the port's MTU, IPv4 and IPv6
  addresses (IPv6 with IFA_F_NODAD, DAD off in the namespace so addresses are usable
  at once), up;
- appliances forward (net.ipv4.ip_forward, net.ipv6.conf.all.forwarding);
  accept_ra and rp_filter off everywhere;
- a tbf qdisc on both ends of every link slower than 10 Gbit/s (the "gigabit" ports),
  holding the port's stated egress queue (`queue_kib` in the lab file, default 128 KiB:
  a switch port's buffer) -- bucket and queue together, so a short overload hides no more
  than a real port would (`add_rate_limit`);
- only connected routes.  Routes across the lab (the bench to a remote LAN through its
  appliance, the pages' temporary routes) are a test's business: `add_route()`.
"""
from __future__ import annotations

import ctypes
import errno
import ipaddress
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ipsec_hil_twin.errors import NetnsError
from ipsec_hil_twin.machinery.runtime import netns_name, veth_name

NETNS_RUN_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
IFA_F_NODAD = 0x02
FULL_RATE_MBIT = 10000
"""Links at or above this rate get no qdisc: the veth is the wire."""
DEFAULT_QUEUE_BYTES = 128 * 1024
"""A shaped port's buffer when its spec states none (the topology's DEFAULT_QUEUE_KIB)."""
ETHERNET_HEADER = 14


@dataclass(frozen=True)
class PortSpec:
    """One host port as the builder needs it."""

    host: str
    name: str
    ipv4: str | None = None
    ipv6: str | None = None
    mtu: int = 1500
    rate_mbit: int | None = None
    queue_bytes: int | None = None  # the egress buffer a shaped port holds (None: DEFAULT_QUEUE_BYTES)


@dataclass(frozen=True)
class LinkSpec:
    """One point-to-point wire between two ports."""

    a: PortSpec
    b: PortSpec
    rate_mbit: int | None = None

    @property
    def effective_rate_mbit(self) -> int | None:
        """The link's own rate, else the slower port's, else None (unlimited)."""
        rates = [r for r in (self.rate_mbit, self.a.rate_mbit, self.b.rate_mbit) if r]
        if self.rate_mbit:
            return self.rate_mbit
        return min(rates) if rates else None


@dataclass(frozen=True)
class HostSpec:
    name: str
    role: str  # "appliance" | "bench"


@dataclass
class NetworkSpec:
    prefix: str
    hosts: list[HostSpec]
    links: list[LinkSpec]


@dataclass
class BuiltLink:
    index: int
    veth_a: str
    veth_b: str
    netns_a: str
    netns_b: str
    ifname_a: str
    ifname_b: str
    rate_mbit: int | None
    mtu_a: int
    mtu_b: int

    def as_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class BuiltNetwork:
    prefix: str
    namespaces: dict[str, str] = field(default_factory=dict)  # host -> netns
    links: list[BuiltLink] = field(default_factory=list)


# --------------------------------------------------------------------------- pyroute2


def _pr():
    """pyroute2, imported on first use: it costs ~1 s under load, and `python -m ipsec_hil_twin
    fault/status` never needs it."""
    import pyroute2
    from pyroute2 import netns as pr_netns
    if getattr(pr_netns, "__libc", False) is None:
        # pyroute2 0.7 looks libc up (ctypes.util.find_library: an `ldconfig -p` run and
        # its parsing) in every helper process a NetNS forks, about 25 a lab, unless this
        # process did it first: hand it ours (issue 15)
        setattr(pr_netns, "__libc", _libc)
    return pyroute2.IPRoute, pyroute2.NetNS, pr_netns


def IPRoute():  # noqa: N802 - stands for the class
    return _pr()[0]()


def NetNS(name: str):  # noqa: N802
    return _pr()[1](name)


class _LazyNetns:
    def __getattr__(self, name: str):
        return getattr(_pr()[2], name)


pr_netns = _LazyNetns()


# --------------------------------------------------------------------------- setns


_libc = ctypes.CDLL("libc.so.6", use_errno=True)  # glibc (Debian), as ipsec_hil_twin.machinery.nsexec: find_library runs ldconfig


@contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the block with this thread inside namespace `name` (then switch back).

    Used for /proc/sys writes, which apply to the opener's network namespace.
    """
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(NETNS_RUN_DIR / name, os.O_RDONLY)
    except FileNotFoundError:
        os.close(here)
        raise NetnsError(f"namespace {name!r} does not exist") from None
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise NetnsError(f"setns({name}): {os.strerror(e)}")
        try:
            yield
        finally:
            if _libc.setns(here, CLONE_NEWNET) != 0:  # pragma: no cover - fatal
                e = ctypes.get_errno()
                raise NetnsError(f"setns back to the root namespace: {os.strerror(e)}")
    finally:
        os.close(target)
        os.close(here)


def write_sysctls(ns: str, values: dict[str, str]) -> None:
    """Write `net.*` sysctls inside namespace `ns` through /proc/sys."""
    with in_netns(ns):
        for key, value in values.items():
            path = Path("/proc/sys") / key.replace(".", "/")
            try:
                path.write_text(str(value))
            except OSError as exc:
                raise NetnsError(f"{ns}: sysctl {key}={value}: {exc.strerror}") from None


def read_sysctl(ns: str, key: str) -> str:
    with in_netns(ns):
        return (Path("/proc/sys") / key.replace(".", "/")).read_text().strip()


BENCH_TCP_QUEUED_BYTES = 16 * 1024
"""What one TCP connection of the bench may hold in its port's queue (the bench's
``net.ipv4.tcp_limit_output_bytes``, TCP Small Queues).

Why: the bench PC is a Linux host. On hardware its adapter's qdisc holds a thousand
frames or more, so its own TCP never loses a segment there; here the bench's port IS the
shaped link, a tbf holding the stated 128 KiB (14 jumbo frames). With this kernel's
default budget (4 MiB per connection) six streams pushed far more than that into it, the
tbf dropped them locally, and a connection whose first segments were dropped with
nothing in flight retried only on Linux's local-congestion timer (every 500 ms) into a
queue its five neighbours refilled at each dequeue: it carried nothing for whole seconds
(measured: 2 of 6 six-stream runs of 3 s, 1 of a CI's 6 s runs, "carried nothing" with
0 retransmits). At 16 KiB each connection keeps its port busy (over 1 ms of 100 Mbit/s
queued) and eight fit the default queue, so the bench's streams lose segments only where
the path drops them, as on the bench PC. UDP is not under this budget (the NDR/PDR
trials' offered load and its drops at the bench's port are unchanged)."""


def base_sysctls(role: str) -> dict[str, str]:
    """What every namespace gets before its links arrive (defaults apply to new links)."""
    fwd = "1" if role == "appliance" else "0"
    values = {
        "net.ipv4.ip_forward": fwd,
        "net.ipv4.conf.all.rp_filter": "0",
        "net.ipv4.conf.default.rp_filter": "0",
        "net.ipv6.conf.all.forwarding": fwd,
        "net.ipv6.conf.default.forwarding": fwd,
    }
    for scope in ("all", "default"):
        values[f"net.ipv6.conf.{scope}.accept_ra"] = "0"
        values[f"net.ipv6.conf.{scope}.accept_dad"] = "0"
        values[f"net.ipv6.conf.{scope}.dad_transmits"] = "0"
    if role == "bench":
        values["net.ipv4.tcp_limit_output_bytes"] = str(BENCH_TCP_QUEUED_BYTES)
    return values


# --------------------------------------------------------------------------- queries


def list_namespaces(prefix: str | None = None) -> list[str]:
    """Named namespaces (all, or those of one lab prefix)."""
    try:
        names = sorted(os.listdir(NETNS_RUN_DIR))
    except FileNotFoundError:
        names = []
    if prefix is None:
        return names
    return [n for n in names if n.startswith(prefix + "-")]


def root_links(prefix: str) -> list[str]:
    """Root-namespace interfaces whose name starts with the prefix (veth leftovers)."""
    with IPRoute() as ipr:
        names = [l.get_attr("IFLA_IFNAME") for l in ipr.get_links()]
    return [n for n in names if n and n.startswith(prefix)]


# --------------------------------------------------------------------------- build


def _check_port(port: PortSpec) -> None:
    for fam, value in (("ipv4", port.ipv4), ("ipv6", port.ipv6)):
        if value is None:
            continue
        try:
            ipaddress.ip_interface(value)
        except ValueError as exc:
            raise NetnsError(f"{port.host}.{port.name}.{fam}: {exc}") from None
    if len(port.name) > 15:
        raise NetnsError(f"{port.host}.{port.name}: port name longer than 15 characters")


def create_namespace(name: str, role: str) -> None:
    """Create one namespace with lo up and the role's sysctls."""
    if name in pr_netns.listnetns():
        raise NetnsError(f"namespace {name!r} already exists (another lab with this prefix?)")
    pr_netns.create(name)
    write_sysctls(name, base_sysctls(role))
    with NetNS(name) as ns:
        lo = ns.link_lookup(ifname="lo")[0]
        ns.link("set", index=lo, state="up")


def _configure_end(ns_name: str, old: str, port: PortSpec, rate_mbit: int | None) -> None:
    with NetNS(ns_name) as ns:
        found = ns.link_lookup(ifname=old)
        if not found:
            raise NetnsError(f"{ns_name}: veth {old} did not arrive")
        idx = found[0]
        try:
            ns.link("set", index=idx, ifname=port.name, mtu=port.mtu)
        except Exception as exc:
            raise NetnsError(f"{port.host}.{port.name}: rename/mtu {port.mtu}: {exc}") from None
        for fam, value in (("ipv4", port.ipv4), ("ipv6", port.ipv6)):
            if not value:
                continue
            iface = ipaddress.ip_interface(value)
            kw = {"flags": IFA_F_NODAD} if iface.version == 6 else {}
            try:
                ns.addr("add", index=idx, address=str(iface.ip), prefixlen=iface.network.prefixlen, **kw)
            except Exception as exc:
                raise NetnsError(f"{port.host}.{port.name}.{fam} {value}: {exc}") from None
        if rate_mbit and rate_mbit < FULL_RATE_MBIT:
            add_rate_limit(ns, idx, rate_mbit, where=f"{port.host}.{port.name}",
                           queue_bytes=port.queue_bytes or DEFAULT_QUEUE_BYTES, mtu=port.mtu)
        ns.link("set", index=idx, state="up")


def tbf_sizes(rate_mbit: float, queue_bytes: int, mtu: int = 1500) -> tuple[int, int]:
    """(burst, limit) in bytes of a tbf that holds `queue_bytes` in all.

    Why both count: tbf lets a full bucket (`burst`) through at once and queues up to
    `limit` behind it, so what an overload can hide is their sum. The bucket is 4 ms of
    the rate (HZ=250's tick, so the shaper keeps its rate when a timer fires late on a
    busy machine), at most half the buffer, at least two frames; the queue is the rest of
    the stated buffer, at least one frame. Before issue 41 the queue was `latency 50ms` on a 125 kB bucket,
    about 875 kB at 100 Mbit/s: 1 s trials 7 % over the rate lost nothing.
    """
    frame = mtu + ETHERNET_HEADER
    burst = max(min(int(rate_mbit * 1_000_000 // 8 * 4 // 1000), int(queue_bytes) // 2), 2 * frame)
    limit = max(int(queue_bytes) - burst, frame)
    return burst, limit


#: What an Ethernet frame costs on the wire beyond the bytes Linux counts (its 14-byte
#: header included): preamble and start delimiter 8, FCS 4, inter-frame gap 12. A tbf
#: counts only the skb, so without it a "100 Mbit/s" veth carried ~1.6 % more 1,470-byte
#: datagrams than a 100 Mbit/s Ethernet port can (an NDR search read 98.4 Mbit/s of UDP
#: payload on a port whose line rate carries 96.6).
ETHERNET_WIRE_OVERHEAD = 24


def _tbf_with_overhead() -> None:
    """pyroute2's tbf request (0.9) takes no per-packet overhead: its parameters are
    wrapped once so that an ``overhead`` argument reaches tc_ratespec.overhead, which the
    kernel adds to every packet's length (psched_l2t_ns), as `tc ... tbf ... overhead N` does."""
    from pyroute2.netlink.rtnl.tcmsg import sched_tbf

    if getattr(sched_tbf.get_parameters, "hil_overhead", False):
        return
    plain = sched_tbf.get_parameters

    def get_parameters(kwarg):
        out = plain(kwarg)
        if kwarg.get("overhead"):
            out["attrs"][0][1]["rate_overhead"] = int(kwarg["overhead"])
        return out

    get_parameters.hil_overhead = True  # type: ignore[attr-defined]
    sched_tbf.get_parameters = get_parameters


def add_rate_limit(ns, index: int, rate_mbit: int, where: str = "", *, queue_bytes: int = DEFAULT_QUEUE_BYTES,
                   mtu: int = 1500) -> None:
    """A tbf root qdisc at `rate_mbit` holding `queue_bytes` (:func:`tbf_sizes`), each frame
    counted with Ethernet's wire overhead (:data:`ETHERNET_WIRE_OVERHEAD`)."""
    burst, limit = tbf_sizes(rate_mbit, queue_bytes, mtu)
    _tbf_with_overhead()
    try:
        ns.tc("add", "tbf", index=index, handle="1:", rate=f"{rate_mbit}mbit", burst=burst, limit=limit,
              overhead=ETHERNET_WIRE_OVERHEAD)
    except Exception as exc:
        raise NetnsError(f"{where}: tbf {rate_mbit} Mbit/s, queue {queue_bytes} B: {exc}") from None


def build_network(spec: NetworkSpec) -> BuiltNetwork:
    """Create namespaces and wires for `spec`; on any error, remove what was made."""
    built = BuiltNetwork(prefix=spec.prefix)
    roles = {h.name: h.role for h in spec.hosts}
    for link in spec.links:
        for port in (link.a, link.b):
            if port.host not in roles:
                raise NetnsError(f"link {port.host}.{port.name}: unknown host {port.host!r}")
            _check_port(port)
    try:
        for host in spec.hosts:
            name = netns_name(spec.prefix, host.name)
            create_namespace(name, host.role)
            built.namespaces[host.name] = name
        for i, link in enumerate(spec.links):
            va, vb = veth_name(spec.prefix, i, "a"), veth_name(spec.prefix, i, "b")
            na, nb = built.namespaces[link.a.host], built.namespaces[link.b.host]
            with IPRoute() as ipr:
                try:
                    ipr.link("add", ifname=va, kind="veth", peer=vb)
                except Exception as exc:
                    raise NetnsError(f"veth {va}/{vb} for {link.a.host}.{link.a.name}: {exc}") from None
                ia = ipr.link_lookup(ifname=va)[0]
                ib = ipr.link_lookup(ifname=vb)[0]
                ipr.link("set", index=ia, net_ns_fd=na)
                ipr.link("set", index=ib, net_ns_fd=nb)
            rate = link.effective_rate_mbit
            _configure_end(na, va, link.a, rate)
            _configure_end(nb, vb, link.b, rate)
            built.links.append(BuiltLink(
                index=i, veth_a=va, veth_b=vb, netns_a=na, netns_b=nb,
                ifname_a=link.a.name, ifname_b=link.b.name,
                rate_mbit=rate if rate and rate < FULL_RATE_MBIT else None,
                mtu_a=link.a.mtu, mtu_b=link.b.mtu,
            ))
    except BaseException:
        destroy_prefix(spec.prefix)
        raise
    return built


def add_route(ns_name: str, dst: str, gateway: str) -> None:
    """Add a route inside a namespace (for tests and fixtures; the builder adds none)."""
    net = ipaddress.ip_network(dst, strict=False)
    with NetNS(ns_name) as ns:
        try:
            ns.route("add", dst=str(net.network_address), dst_len=net.prefixlen, gateway=gateway,
                     family=10 if net.version == 6 else 2)
        except Exception as exc:
            raise NetnsError(f"{ns_name}: route {dst} via {gateway}: {exc}") from None


def destroy_prefix(prefix: str) -> list[str]:
    """Remove every namespace and root-namespace link of one lab prefix.

    Deleting a namespace deletes the veth ends inside it (and thereby their peers).
    Returns what was removed, for logs.  Idempotent.
    """
    removed: list[str] = []
    for name in list_namespaces(prefix):
        try:
            pr_netns.remove(name)
            removed.append(name)
        except OSError as exc:
            # another cleaner (a concurrent `down --all-dead`) may have won the race
            if exc.errno != errno.ENOENT and name in pr_netns.listnetns():
                raise NetnsError(f"remove namespace {name}: {exc}") from None
    leftovers = root_links(prefix)
    if leftovers:
        with IPRoute() as ipr:
            for name in leftovers:
                found = ipr.link_lookup(ifname=name)
                if found:
                    try:
                        ipr.link("del", index=found[0])
                        removed.append(name)
                    except Exception:
                        pass  # the peer's deletion took it already
    return removed


def netns_exec(ns_name: str, argv: list[str]) -> list[str]:
    """argv to run a command inside a namespace (with its /etc/netns view)."""
    return ["ip", "netns", "exec", ns_name, *argv]


RT_TABLE_MAIN = 254
RTPROT_KERNEL = 2


def reset_host_network(ns_name: str, ports: list[PortSpec]) -> list[str]:
    """Put a namespace's ports back as a fresh boot has them (the reboot of an appliance).

    On hardware a reboot forgets runtime changes: `route add`, `ifconfig ... alias`, an
    MTU set by hand.  Here the namespace survives the "reboot", so undo them: every
    topology port gets exactly its topology addresses (link-local kept) and MTU, and the
    main table keeps only the kernel's connected routes.  Interfaces that are not ports
    (a test's own) are left alone.  Returns what was changed, for the supervisor's log.
    """
    changed: list[str] = []
    want = {p.name: p for p in ports}
    with NetNS(ns_name) as ns:
        for link in ns.get_links():
            name = link.get_attr("IFLA_IFNAME")
            port = want.get(name)
            if port is None:
                continue
            idx = link["index"]
            if link.get_attr("IFLA_MTU") != port.mtu:
                ns.link("set", index=idx, mtu=port.mtu)
                changed.append(f"{name} mtu {port.mtu}")
            keep = {str(ipaddress.ip_interface(a)) for a in (port.ipv4, port.ipv6) if a}
            have = set()
            for addr in ns.get_addr(index=idx):
                ip = addr.get_attr("IFA_ADDRESS")
                iface = ipaddress.ip_interface(f"{ip}/{addr['prefixlen']}")
                if iface.version == 6 and iface.ip.is_link_local:
                    continue
                if str(iface) in keep:
                    have.add(str(iface))
                    continue
                ns.addr("del", index=idx, address=ip, prefixlen=addr["prefixlen"])
                changed.append(f"{name} -{iface}")
            for a in sorted(keep - have):
                iface = ipaddress.ip_interface(a)
                kw = {"flags": IFA_F_NODAD} if iface.version == 6 else {}
                ns.addr("add", index=idx, address=str(iface.ip), prefixlen=iface.network.prefixlen, **kw)
                changed.append(f"{name} +{iface}")
            ns.link("set", index=idx, state="up")
        for family in (2, 10):
            for route in ns.get_routes(family=family, table=RT_TABLE_MAIN):
                table = route.get_attr("RTA_TABLE") or route["table"]
                if table != RT_TABLE_MAIN or route["proto"] == RTPROT_KERNEL:
                    continue
                try:
                    ns.route("del", **{k: v for k, v in (
                        ("family", family), ("dst", route.get_attr("RTA_DST")),
                        ("dst_len", route["dst_len"]), ("gateway", route.get_attr("RTA_GATEWAY")),
                        ("oif", route.get_attr("RTA_OIF")), ("table", RT_TABLE_MAIN),
                        ("priority", route.get_attr("RTA_PRIORITY")),
                    ) if v is not None})
                    changed.append(f"route -{route.get_attr('RTA_DST') or 'default'}/{route['dst_len']}")
                except Exception as exc:  # already gone with its interface
                    changed.append(f"route {route.get_attr('RTA_DST')}: {exc}")
    return changed
