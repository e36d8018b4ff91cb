"""`ip -j route show table main` / `ip -j route get ADDR` (Linux iproute2) -> IpRoutes.

The bench PC's routes (ipsec_hil.lab.probes.route). iproute2 prints one JSON array of
route objects; a host route's ``dst`` has no prefix length ("203.0.113.65"), a network's
has one ("192.0.2.0/26"), the default route is "default". ``get`` of an address no route
reaches prints nothing and exits 2 with "RTNETLINK answers: Network is unreachable" (or
"No route to host") on stderr: ``unreachable``. Golden samples: tests/golden/ip_route
(iproute2 6.1 in a throw-away namespace).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from ._base import fail, json_line_of, load_json
from ipsec_hil.lab.command import Command

COMMAND = Command("ip", "-j", "route")  # the bench's, run by ipsec_hil.lab.probes.route
#: of one family: ``BY_FAMILY["ipv6"]("get", dst)``, ``("show", "table", "main")`` (the route
#: probe; ``ip route add|del``, whose answer is its exit status: ipsec_hil.lab.command.IP_ROUTE)
BY_FAMILY = {"ipv4": Command("ip", "-j", "-4", "route"), "ipv6": Command("ip", "-j", "-6", "route")}
_UNREACHABLE = ("RTNETLINK answers: Network is unreachable", "RTNETLINK answers: No route to host")


@dataclass(frozen=True)
class Route:
    dst: str  # the network with its length ("203.0.113.65/32"), or "default"
    gateway: Optional[str] = None  # None for a directly connected network
    dev: Optional[str] = None
    prefsrc: Optional[str] = None
    protocol: Optional[str] = None  # "kernel" for the routes of an address; None: added by hand (boot)
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class IpRoutes:
    routes: tuple[Route, ...] = ()
    unreachable: bool = False  # `get`: no route reaches the address


def _text(command_text: str, entry: dict, key: str) -> Optional[str]:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        no, line = json_line_of(command_text, f'"{key}"')
        fail(COMMAND, no, line, f"{key}: expected a string, found {type(value).__name__}")
    return value


def _route(text: str, entry: object) -> Route:
    if not isinstance(entry, dict):
        fail(COMMAND, 0, text[:200], f"expected route objects, found {type(entry).__name__}")
    dst = _text(text, entry, "dst")
    if dst is None:
        fail(COMMAND, *json_line_of(text, "{"), "a route without dst")
    if dst != "default":
        try:
            dst = str(ipaddress.ip_network(dst, strict=False))
        except ValueError:
            fail(COMMAND, *json_line_of(text, dst), f"dst: not an address or network: {dst!r}")
    flags = entry.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        fail(COMMAND, *json_line_of(text, '"flags"'), "flags: expected a list of words")
    return Route(dst, _text(text, entry, "gateway"), _text(text, entry, "dev"), _text(text, entry, "prefsrc"),
                 _text(text, entry, "protocol"), tuple(flags))


def parse(text: str, stderr: str = "", status: int = 0) -> IpRoutes:
    if status != 0:
        if not text.strip() and stderr.strip() in _UNREACHABLE:
            return IpRoutes(unreachable=True)
        fail(COMMAND, 0, stderr.strip()[:200] or text.strip()[:200], f"exit status {status}")
    data = load_json(COMMAND, text)
    if not isinstance(data, list):
        fail(COMMAND, 1, text.strip()[:200], f"expected a JSON array of routes, found {type(data).__name__}")
    return IpRoutes(tuple(_route(text, e) for e in data))
