"""`route -n get [-6] X` (FreeBSD 14 sbin/route, netlink) -> RouteGet.

Labels are right-aligned to a colon; values (IPv6) contain colons, so each line is split
on its FIRST colon. `mask` is absent for host routes, `gateway` without the GATEWAY flag.
No route: empty stdout and `route: route has not been found` on stderr -> found=False.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from ._base import fail, to_int
from ._lines import content_lines
from ipsec_hil.lab.command import Command

#: ``route -n get DST`` of each family: ``route_get.BY_FAMILY[family](dst)``
BY_FAMILY = {"ipv4": Command("route", "-n", "get"), "ipv6": Command("route", "-6", "-n", "get")}
COMMAND = BY_FAMILY["ipv4"]
_LABELS = {"route to": "route_to", "destination": "destination", "mask": "mask", "gateway": "gateway",
           "fib": "fib", "interface": "interface", "flags": "flags", "if address": "if_address"}
_METRIC_HEADER = ("recvpipe", "sendpipe", "ssthresh", "rtt,msec", "mtu", "weight", "expire")
_FLAGS = re.compile(r"<(?P<f>[A-Z0-9_]+(?:,[A-Z0-9_]+)*)?>")
_NOT_FOUND = re.compile(r"route: (?:route has not been found|writing to routing socket: No such process)")


@dataclass(frozen=True)
class RouteGet:
    found: bool
    route_to: Optional[str] = None
    destination: Optional[str] = None
    mask: Optional[str] = None  # None for host routes
    gateway: Optional[str] = None  # None without the GATEWAY flag
    fib: Optional[int] = None
    interface: Optional[str] = None
    if_address: Optional[str] = None
    flags: tuple[str, ...] = ()
    metrics: dict[str, int] = field(default_factory=dict)  # recvpipe ... mtu ... expire

    @property
    def mtu(self) -> Optional[int]:
        return self.metrics.get("mtu")


def parse(text: str, stderr: str = "", status: int = 0) -> RouteGet:
    if not text.strip():
        if any(_NOT_FOUND.fullmatch(l.strip()) for l in stderr.splitlines()):
            return RouteGet(found=False)
        fail(COMMAND, 0, stderr.strip()[:200], "empty stdout without 'route has not been found'")
    values: dict = {}
    header: Optional[list[str]] = None
    metrics: dict[str, int] = {}
    for no, line in content_lines(text):
        if header is not None:
            nums = line.split()
            if metrics or len(nums) != len(header):
                fail(COMMAND, no, line, f"expected one line of {len(header)} metric values")
            metrics = {h: to_int(COMMAND, no, line, v, h) for h, v in zip(header, nums)}
            continue
        if tuple(line.split()) == _METRIC_HEADER:
            header = line.split()
            continue
        label, colon, value = line.partition(":")
        key = _LABELS.get(label.strip())
        if not colon or key is None:
            fail(COMMAND, no, line, "expected '<label>: <value>' with a known label")
        if key in values:
            fail(COMMAND, no, line, f"{label.strip()} given twice")
        value = value.strip()
        if key == "fib":
            values[key] = to_int(COMMAND, no, line, value, "fib")
        elif key == "flags":
            m = _FLAGS.fullmatch(value)
            if not m:
                fail(COMMAND, no, line, "expected flags '<A,B,...>'")
            values[key] = tuple(m["f"].split(",")) if m["f"] else ()
        else:
            if not value or " " in value:
                fail(COMMAND, no, line, f"{label.strip()}: expected one value")
            values[key] = value
    if "route_to" not in values or "interface" not in values:
        fail(COMMAND, 0, text.splitlines()[0], "'route to' or 'interface' missing")
    if header is not None and not metrics:
        fail(COMMAND, 0, text.splitlines()[-1], "metric values missing")
    if "GATEWAY" in values.get("flags", ()) and "gateway" not in values:
        fail(COMMAND, 0, text.splitlines()[0], "GATEWAY flag without a gateway line")
    return RouteGet(found=True, metrics=metrics, **values)
