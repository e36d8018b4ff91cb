"""netstat(1) `-r` of FreeBSD 14: the routing table, text and `--libxo json`, from the
namespace's real routes.

Why: `netstat -rn` is the first command an operator types on an appliance; the lab must
answer it as FreeBSD 14 does, from the same routes the namespace forwards by.

The format is usr.bin/netstat's: route.c (routepr, pr_family, pr_rthdr, set_wid and its
WID_*_DEFAULT widths, p_sockaddr, fmt_sockaddr, netname4/netname6, rt_bits) and
route_netlink.c (p_rtable_netlink, p_rtentry_netlink, p_path: FreeBSD 14 reads the table
over netlink). What follows from netlink: RTF_UP is always set; a route without a gateway
(connected prefixes, the own addresses' loopback routes) prints `link#N` of its outgoing
interface (the kernel's rt.c dump_rc_nhop sends RTA_GATEWAY only for gateway next hops);
a link-local address takes the outgoing interface as its scope (add_scopeid), so an own
link-local address's loopback route prints `%lo0`; the MTU of `-W` is the interface's
when the route fixes none; JSON carries `weight` and `nhop-kidx` (`nhg-kidx` for a
multipath route's legs) beside the visible columns.

Which routes: the main and local tables of `ip -j route show table all`, as FreeBSD keeps
them in fib 0 -- a connected prefix is `U` on its port, an own address a host route
`UHS` on lo0 (`UH` for 127.0.0.1: FreeBSD gives lo0's IPv4 address no loopback route),
a route added by hand `S` (Linux: every protocol but the kernel's and router
advertisements'), a gateway `G`, a full-length prefix `H`, unreachable/prohibit `R`,
blackhole `B`. Linux's broadcast, anycast and multicast entries of the local table and
its 127.0.0.0/8 have no FreeBSD counterpart and are left out, as is everything on the
engine's TUN (esp0, ifconfig.HIDDEN) and in its tables: the engine's machinery, not the
appliance's. A route `route add` gave the engine (an inner prefix inside an SA's
selectors: ipsec_hil_twin.fbsd.route) is the appliance's, and is listed from the engine's
status (`fbsd_routes`). Rows are in the radix tree's order: by address (a link-local
one's zone embedded in bytes 2-3, as the KAME kernel keys it), the longer prefix first.

Without `-n`, names come from FreeBSD's default /etc/hosts (127.0.0.1 and ::1 are
`localhost`); the lab has no DNS, so every other address prints as a number, and the
columns are cut to their widths as FreeBSD cuts them. Interface indexes (`link#N`) are
the namespace's own. `Nhop#` (-W) and `nhop-kidx` number the distinct next hops of each
family from 1 in table order: FreeBSD's kernel indexes them, Linux keeps no such number.
"""
from __future__ import annotations

import ipaddress
import json
import sys

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd.ifconfig import HIDDEN, _ip_json, fbsd_name

PROG = "netstat"

AF_UNIX, AF_INET, AF_LINK, PF_KEY, AF_INET6, AF_NETGRAPH = 1, 2, 18, 27, 28, 32
"""FreeBSD's family numbers: the dump walks the tables in this order (IPv4 first)."""

FAMILIES = {"inet": AF_INET, "inet6": AF_INET6, "pfkey": PF_KEY, "unix": AF_UNIX, "local": AF_UNIX,
            "ng": AF_NETGRAPH, "netgraph": AF_NETGRAPH, "link": AF_LINK}
"""main.c's `-f` names; a family without routes prints the title only."""

AF_NAMES = {AF_INET: "Internet", AF_INET6: "Internet6"}
"""route.c pr_family."""

RT_BITS = (("U", "up"), ("G", "gateway"), ("H", "host"), ("R", "reject"), ("D", "dynamic"),
           ("M", "modified"), ("d", "done"), ("X", "xresolve"), ("S", "static"), ("1", "proto1"),
           ("2", "proto2"), ("3", "proto3"), ("B", "blackhole"), ("b", "broadcast"))
"""route.c rt_bits: the letters in the order netstat prints them, with their flags_pretty names."""

HOSTS = {"127.0.0.1": "localhost", "::1": "localhost"}
"""FreeBSD's default /etc/hosts: what `netstat -r` without -n can name."""

UNFLAGGED_PROTOCOLS = ("kernel", "ra")
"""Linux route protocols whose routes FreeBSD keeps without RTF_STATIC (the kernel's own,
router advertisements'); a route of any other protocol was added by hand or a daemon."""

DEFAULT_WEIGHT = 1
"""RT_DEFAULT_WEIGHT: a path's weight when the route names none."""

EX_USAGE = 64


class RoutePath:
    """One printed line (p_path): a route, or one leg of a multipath route."""

    __slots__ = ("family", "dst", "plen", "zone", "gateway", "oif", "flags", "mtu", "expire", "weight", "mpath")

    def __init__(self, family: int, dst, plen: int, zone: int, gateway: str | None, oif: int, flags: str,
                 mtu: int = 0, expire: int = 0, weight: int = DEFAULT_WEIGHT, mpath: bool = False) -> None:
        self.family = family      # AF_INET / AF_INET6
        self.dst = dst            # ipaddress address: the prefix's (masked) or the host's
        self.plen = plen
        self.zone = zone          # a link-local key's interface (radix order), else 0
        self.gateway = gateway    # an address; None: `link#oif`
        self.oif = oif            # outgoing interface index (0: unknown)
        self.flags = flags        # rt_bits letters, any order
        self.mtu = mtu            # a fixed route MTU, 0: the interface's
        self.expire = expire
        self.weight = weight
        self.mpath = mpath

    def radix_key(self) -> tuple:
        raw = bytearray(self.dst.packed)
        if self.zone and self.dst.version == 6:
            raw[2:4] = self.zone.to_bytes(2, "big")
        return (self.family, bytes(raw), -self.plen)


# ----------------------------------------------------------------------------- the routes


def _links() -> dict[int, tuple[str, int]]:
    """ifindex -> (FreeBSD name, MTU), the engine's TUN left out."""
    return {l["ifindex"]: (fbsd_name(l["ifname"]), int(l.get("mtu", 0)))
            for l in _ip_json(["link", "show"]) if l.get("ifname") not in HIDDEN}


def _flags(typ: str, protocol: str, gateway: bool, host: bool) -> str:
    flags = "U" + ("G" if gateway else "") + ("H" if host else "")
    if typ in ("unreachable", "prohibit"):
        flags += "R"
    elif typ == "blackhole":
        flags += "B"
    if protocol not in UNFLAGGED_PROTOCOLS:
        flags += "S"
    return flags


def _prefix(dst: str, fam: int) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """`ip route`'s dst (`default`, `A/len`, a host `A`) as the address and prefix length."""
    net = ipaddress.ip_network(("0.0.0.0/0" if fam == AF_INET else "::/0") if dst == "default" else dst,
                               strict=False)
    return net.network_address, net.prefixlen


def _linux_paths(fam: int, routes: list[dict], index: dict[str, int], lo: int) -> list[RoutePath]:
    """The namespace's main and local tables of one family as FreeBSD's fib 0 holds them."""
    out: list[RoutePath] = []
    full = 32 if fam == AF_INET else 128
    for r in routes:
        typ = r.get("type", "unicast")
        dev = r.get("dev", "")
        if r.get("table", "main") not in ("main", "local") or dev in HIDDEN:
            continue
        if typ in ("broadcast", "anycast", "multicast", "nat", "throw"):
            continue
        addr, plen = _prefix(r.get("dst", "default"), fam)
        zone = index.get(dev, 0) if addr.is_link_local else 0
        if typ == "local":
            if plen != full:
                continue  # 127.0.0.0/8: Linux's, FreeBSD's lo0 has the host route only
            flags = "UH" if fam == AF_INET and index.get(dev) == lo else "UHS"
            out.append(RoutePath(fam, addr, plen, zone, None, lo, flags))
            continue
        metrics = {k: v for m in r.get("metrics") or [] if isinstance(m, dict) for k, v in m.items()}
        mtu, expire = int(metrics.get("mtu", 0)), int(r.get("expires", 0) or 0)
        legs = r.get("nexthops") or [r]
        for leg in legs:
            gw = leg.get("gateway") or (leg.get("via") or {}).get("host")
            oif = index.get(leg.get("dev", dev), 0) if typ == "unicast" else lo
            mpath = len(legs) > 1  # each leg a line of its own, with its weight
            out.append(RoutePath(fam, addr, plen, zone, gw, oif,
                                 _flags(typ, r.get("protocol", "boot"), bool(gw), plen == full), mtu, expire,
                                 int(leg.get("weight", DEFAULT_WEIGHT)) if mpath else DEFAULT_WEIGHT, mpath))
    return out


def _engine_paths(fams: list[int], index: dict[str, int]) -> list[RoutePath]:
    """The routes `route add` gave the engine (inner prefixes inside an SA's selectors):
    `UGS` toward the gateway's port, or `US` for `-interface IF`; none when no engine
    answers (a lab without one, or the command run outside a twin host)."""
    try:
        routes = c.engine(c.host_dir(), {"op": "status"}).get("fbsd_routes") or {}
    except Exception:  # noqa: BLE001 -- no engine, no routes of its own: the kernel's table stands
        return []
    out: list[RoutePath] = []
    for dest, gw in sorted(routes.items()):
        net = ipaddress.ip_network(dest, strict=False)
        fam = AF_INET if net.version == 4 else AF_INET6
        if fam not in fams or not gw:
            continue
        host = "H" if net.prefixlen == net.max_prefixlen else ""
        try:
            ipaddress.ip_address(gw)
        except ValueError:  # `-interface IF`: a direct route on that port
            out.append(RoutePath(fam, net.network_address, net.prefixlen, 0, None, index.get(gw, 0), "U" + host + "S"))
            continue
        try:
            dev = (_ip_json([f"-{net.version}", "route", "get", gw]) or [{}])[0].get("dev", "")
        except RuntimeError:
            dev = ""
        out.append(RoutePath(fam, net.network_address, net.prefixlen, 0, gw, index.get(dev, 0), "UG" + host + "S"))
    return out


def routing_table(af: int | None, links: dict[int, tuple[str, int]]) -> list[RoutePath]:
    """Every path of fib 0 of family ``af`` (None: all), in the dump's order; ``links``:
    the namespace's interfaces (_links)."""
    fams = [f for f in (AF_INET, AF_INET6) if af in (None, f)]
    if not fams:
        return []
    index = {name: i for i, (name, _) in links.items()}
    index.update({"lo": index.get("lo0", 1)})  # Linux names the loopback `lo`
    lo = index["lo"]
    paths = _engine_paths(fams, index)
    for fam in fams:
        paths += _linux_paths(fam, _ip_json([f"-{4 if fam == AF_INET else 6}", "route", "show", "table", "all"]),
                              index, lo)
    return sorted(paths, key=RoutePath.radix_key)


# ----------------------------------------------------------------------------- the format


class Widths:
    """route.c set_wid: the columns of one family (each followed by one space)."""

    def __init__(self, fam: int, numeric: bool, wide: bool) -> None:
        v6 = fam == AF_INET6
        self.dst = 33 if v6 and numeric else 18
        self.gw = 29 if v6 and numeric else 18
        self.flags = 6
        self.mtu = 6
        self.iface = 8 if v6 else (10 if wide else 8)
        self.expire = 6


def _numeric(addr, scope: str | None) -> str:
    """getnameinfo(NI_NUMERICHOST): a link-local address carries its scope's interface."""
    text = str(addr)
    if scope and addr.version == 6 and (addr.is_link_local or addr.is_multicast and (addr.packed[1] & 0x0F) == 2):
        text += "%" + scope
    return text


def _routename(addr, scope: str | None, numeric: bool) -> str:
    text = _numeric(addr, scope)
    return text if numeric else HOSTS.get(text, text)


def _destination(p: RoutePath, scope: str | None, numeric: bool) -> str:
    """fmt_sockaddr: a host route by routename, a prefix by netname4/netname6."""
    if "H" in p.flags:
        return _routename(p.dst, scope, numeric)
    if p.plen == 0 and int(p.dst) == 0:
        return "default"
    text = _numeric(p.dst, scope)
    if p.family == AF_INET6 and not numeric and HOSTS.get(text):
        return HOSTS[text]  # netname6: a resolved name goes without its prefix length
    return f"{text}/{p.plen}" if p.family == AF_INET6 or p.plen else text


def _column(text: str, width: int, exact: bool) -> tuple[str, int]:
    """p_sockaddr: the cell and how far it protrudes into the next column's width."""
    if width < 0:
        return text + " ", 0
    if exact:
        return f"{text:<{width}} ", max(0, len(text) - width)
    return f"{text[:width]:<{width}} ", 0


def _rows(paths: list[RoutePath], links: dict[int, tuple[str, int]], numeric: bool, wide: bool):
    """(family, [(text line, JSON entry)]) in the dump's order."""
    families: list[tuple[int, list[tuple[str, dict]]]] = []
    nhops: dict[tuple, int] = {}
    for p in paths:
        if not families or families[-1][0] != p.family:
            families.append((p.family, []))
            nhops.clear()
        w = Widths(p.family, numeric, wide)
        name, ifmtu = links.get(p.oif, ("", 0))
        ifname = name or "---"  # p_path's prettyname of an index without an interface
        scope = name or (str(p.oif) if p.oif else None)  # getnameinfo: an unnamed zone by number
        dst = _destination(p, scope, numeric)
        gw = f"link#{p.oif}" if p.gateway is None else _routename(ipaddress.ip_address(p.gateway), scope, numeric)
        flags = "".join(ch for ch, _ in RT_BITS if ch in p.flags)
        kidx = nhops.setdefault((p.gateway, p.oif, p.flags.replace("H", "")), len(nhops) + 1)
        mtu = p.mtu or ifmtu
        cell, out = _column(dst, w.dst, wide or numeric)
        line = cell
        cell, out = _column(gw, w.gw - out, wide or numeric)
        line += cell + f"{flags:<{max(0, w.flags - out)}} "
        entry: dict = {"destination": dst, "gateway": gw, "flags": flags,
                       "flags_pretty": [word for ch, word in RT_BITS if ch in p.flags],
                       "weight": p.weight, ("nhg-kidx" if p.mpath else "nhop-kidx"): kidx}
        if wide:
            entry["nhop"] = 0 if p.mpath else kidx
            line += f"{entry['nhop']:>{w.mtu}} "
            if mtu:
                entry["mtu"] = mtu
                line += f"{mtu:>{w.mtu}} "
            else:
                line += " " * w.mtu + " "
            line += f"{ifname:>{w.iface}}"
        else:
            line += f"{ifname[:w.iface]:>{w.iface}}"
        entry["interface-name"] = ifname
        if p.expire > 0:
            entry["expire-time"] = p.expire
            line += f" {p.expire:>{w.expire}}"
        families[-1][1].append((line, entry))
    return families


def _header(fam: int, numeric: bool, wide: bool) -> str:
    """pr_rthdr."""
    w = Widths(fam, numeric, wide)
    head = f"{'Destination':<{w.dst}.{w.dst}} {'Gateway':<{w.gw}.{w.gw}} {'Flags':<{w.flags}.{w.flags}} "
    if wide:
        head += f"{'Nhop#':>{w.mtu}.{w.mtu}} {'Mtu':>{w.mtu}.{w.mtu}} "
    return head + f"{'Netif':>{w.iface}.{w.iface}} {'Expire':>{w.expire}}"


def render(paths: list[RoutePath], links: dict[int, tuple[str, int]], *, numeric: bool, wide: bool,
           style: str | None) -> str:
    """routepr's output: text, or libxo JSON (`json`, `json,pretty`) inside main.c's
    `statistics` container (FreeBSD 14's netstat sets no libxo version: no `__version`)."""
    families = _rows(paths, links, numeric, wide)
    styles = (style or "").split(",")
    if "json" in styles:
        table = [{"address-family": AF_NAMES[fam], "rt-entry": [entry for _, entry in rows]}
                 for fam, rows in families]
        doc = {"statistics": {"route-information": {"route-table": {"rt-family": table}}}}
        return (json.dumps(doc, indent=2) if "pretty" in styles else json.dumps(doc)) + "\n"
    out = ["Routing tables\n"]
    for fam, rows in families:
        out.append(f"\n{AF_NAMES[fam]}:\n{_header(fam, numeric, wide)}\n")
        out += [line + "\n" for line, _ in rows]
    return "".join(out)


def routepr(given: list[tuple[str, str | None]], sflag: int, style: str | None) -> int:
    """`netstat -r` with the options ``given`` in the order typed (main.c's getopt: the last
    of -4/-6/-f wins; -n numeric; -W/-l wide; -F the fib). -rs is not emulated."""
    af: int | None = None
    numeric = wide = False
    fib: str | None = None
    for opt, value in given:
        if opt in "46":
            af = AF_INET if opt == "4" else AF_INET6
        elif opt == "f":
            if value not in FAMILIES:
                c.err(PROG, f"{value}: unknown address family")
                return 1
            af = FAMILIES[value]
        elif opt == "F":
            fib = value
        elif opt == "n":
            numeric = True
        elif opt in "Wl":
            wide = True
    if sflag:
        c.err(PROG, "routing statistics (-rs) are not emulated on this appliance")
        return 1
    if fib is not None:
        try:
            number = int(fib, 0)
        except ValueError:
            c.err(PROG, f"{fib}: invalid fib")
            return 1
        if number not in (0, -1):  # net.fibs is 1; -1 is net.my_fibnum, 0
            c.err(PROG, f"{number}: invalid fib")
            return EX_USAGE
    try:
        links = _links()
        paths = routing_table(af, links)
    except RuntimeError as exc:
        c.err(PROG, f"netlink: {exc}")
        return 1
    sys.stdout.write(render(paths, links, numeric=numeric, wide=wide, style=style))
    return 0
