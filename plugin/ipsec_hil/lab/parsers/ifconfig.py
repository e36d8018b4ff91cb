"""`ifconfig [IF]` (FreeBSD 14 sbin/ifconfig) -> IfconfigResult.

What the suite needs: flags, mtu, inet/inet6 addresses (prefixlen, scopeid, address
flags such as tentative/duplicated) and the nd6 options, where IFDISABLED (0x8) means
IPv6 is off on the interface (`nd6 options=29<PERFORMNUD,IFDISABLED,AUTO_LINKLOCAL>`).
Detail lines the suite does not use are kept verbatim in `other`, by keyword, but a
keyword outside the known set is an error.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from ._base import fail
from ._lines import LineTable, content_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("ifconfig")  # ifconfig.COMMAND(name): one interface
_INET6_FLAGS = frozenset("anycast tentative duplicated detached deprecated autoconf temporary prefer_source".split())
_ND6_BITS = {"PERFORMNUD": 0x1, "ACCEPT_RTADV": 0x2, "PREFER_SOURCE": 0x4, "IFDISABLED": 0x8,
             "DONT_SET_IFROUTE": 0x10, "AUTO_LINKLOCAL": 0x20, "NO_RADR": 0x40, "NO_PREFER_IFACE": 0x80,
             "NO_DAD": 0x100, "IPV6_ONLY": 0x200, "IPV6_ONLY_MANUAL": 0x400, "DEFAULTIF": 0x8000}
_LINES = LineTable(COMMAND, {
    "head": r"(?P<name>[A-Za-z0-9_.-]+): flags=(?P<hex>[0-9a-f]+)<(?P<flags>[A-Z0-9_,]*)>"
            r"(?: metric (?P<metric>[0-9]+))? mtu (?P<mtu>[0-9]+)",
    # an interface's detail lines
    "inet": r"\tinet (?P<addr>[0-9.]+)(?: --> (?P<peer>[0-9.]+))? netmask 0x(?P<mask>[0-9a-f]{8})"
            r"(?: broadcast (?P<bcast>[0-9.]+))?(?: vhid [0-9]+)?",
    "inet6": r"\tinet6 (?P<addr>[0-9a-fA-F:.]+)(?:%(?P<zone>[A-Za-z0-9_.-]+))?(?: --> (?P<peer>\S+))? "
             r"prefixlen (?P<plen>[0-9]+)(?P<flags>(?: [a-z_]+)*)(?: scopeid 0x(?P<scope>[0-9a-f]+))?"
             r"(?: pltime [0-9]+ vltime [0-9]+)?(?: vhid [0-9]+)?",
    "nd6": r"\tnd6 options=(?P<hex>[0-9a-f]+)<(?P<names>[A-Z0-9_,]*)>",
    "other": r"\t(?P<key>options|capabilities|ether|hwaddr|media|status|groups|description|drivername|tunnel|"
             r"vlan|vlanproto|vlanpcp|parent|laggproto|laggoptions|laggstatistics|lagghash|laggport|member|"
             r"plugged|vendor|syncpeer|pfsync|carp|id|priority|bridge|maxaddr|ifmaxaddr|root|"
             r"ssid|regdomain|country|channel)[:= ](?P<value>.*)",
})

@dataclass(frozen=True)
class Inet4:
    address: str
    prefixlen: int
    broadcast: Optional[str] = None
    peer: Optional[str] = None


@dataclass(frozen=True)
class Inet6:
    address: str
    prefixlen: int
    zone: Optional[str] = None  # the %ifname of link-local addresses
    scopeid: Optional[int] = None
    flags: tuple[str, ...] = ()  # tentative, duplicated, ...
    peer: Optional[str] = None


@dataclass(frozen=True)
class Interface:
    name: str
    flags: tuple[str, ...]
    mtu: int
    metric: Optional[int] = None
    inet: tuple[Inet4, ...] = ()
    inet6: tuple[Inet6, ...] = ()
    nd6_options: Optional[int] = None
    nd6_flags: tuple[str, ...] = ()
    other: tuple[tuple[str, str], ...] = ()  # (keyword, rest of line) for lines not modelled

    @property
    def up(self) -> bool:
        return "UP" in self.flags

    @property
    def ifdisabled(self) -> bool:
        """IPv6 disabled on the interface (nd6 IFDISABLED); False when no nd6 line."""
        return "IFDISABLED" in self.nd6_flags


@dataclass(frozen=True)
class IfconfigResult:
    interfaces: tuple[Interface, ...]

    def get(self, name: str) -> Interface:
        for i in self.interfaces:
            if i.name == name:
                return i
        raise KeyError(f"interface {name} not in the ifconfig output")


def parse(text: str) -> IfconfigResult:
    interfaces: list[Interface] = []
    cur: Optional[dict] = None

    def close() -> None:
        if cur is not None:
            interfaces.append(Interface(**{k: tuple(v) if isinstance(v, list) else v for k, v in cur.items()}))

    for no, line in content_lines(text):
        if m := _LINES.match(line, "head"):
            close()
            flags = tuple(f for f in m["flags"].split(",") if f)
            cur = dict(name=m["name"], flags=flags, mtu=int(m["mtu"]),
                       metric=int(m["metric"]) if m["metric"] else None, inet=[], inet6=[], other=[])
            continue
        if cur is None:
            fail(COMMAND, no, line, "expected an interface header '<if>: flags=...<...> mtu N'")
        kind, m = _LINES.read(no, line, "unknown ifconfig detail line", "inet", "inet6", "nd6", "other")
        if kind == "inet":
            mask = int(m["mask"], 16)
            plen = bin(mask).count("1")
            if mask != ((1 << 32) - 1) ^ ((1 << (32 - plen)) - 1):
                fail(COMMAND, no, line, "netmask is not contiguous")
            cur["inet"].append(Inet4(m["addr"], plen, m["bcast"], m["peer"]))
        elif kind == "inet6":
            try:
                ipaddress.IPv6Address(m["addr"])
            except ValueError:
                fail(COMMAND, no, line, "invalid IPv6 address")
            flags6 = tuple(m["flags"].split())
            bad = [f for f in flags6 if f not in _INET6_FLAGS]
            if bad or int(m["plen"]) > 128:
                fail(COMMAND, no, line, f"unknown inet6 address flag(s) {bad}" if bad else "prefixlen > 128")
            cur["inet6"].append(Inet6(m["addr"], int(m["plen"]), m["zone"],
                                      int(m["scope"], 16) if m["scope"] else None, flags6, m["peer"]))
        elif kind == "nd6":
            value = int(m["hex"], 16)
            names = tuple(n for n in m["names"].split(",") if n)
            if any(n not in _ND6_BITS for n in names) or sum(_ND6_BITS[n] for n in names) != value:
                fail(COMMAND, no, line, "nd6 option names do not match the hex value")
            cur["nd6_options"], cur["nd6_flags"] = value, names
        else:
            cur["other"].append((m["key"], m["value"].strip()))
    close()
    if not interfaces:
        fail(COMMAND, 0, text, "no interface in the output")
    return IfconfigResult(interfaces=tuple(interfaces))
