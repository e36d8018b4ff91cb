"""The argv of one ping, for FreeBSD's ping (the appliances) and iputils' (the bench).

Why two builders over one request: the two programs share the question (to whom, how many
bytes, don't-fragment, from where, how long) but not a flag -- FreeBSD says ``-D`` and
``-S`` and ``-t``, iputils ``-M do``, ``-I`` and ``-w``. The request, the run and the parse
are shared (:meth:`ipsec_hil.lab.appliance.ShellCommands.ping`); only the spelling differs.

FreeBSD's ping6 and payloads above 8,192 bytes: without ``-b`` the raw socket keeps the
kernel's default buffers and ping6 itself warns "you need -b to increase socket buffer
size" for such a payload (sbin/ping/ping6.c); the jumbo paths (MTU 9000: 8,952 data
bytes) need it. :func:`ping6_sockbuf` gives the ``-b`` value.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipsec_hil.lab.command import Command

#: Above this many data bytes FreeBSD's ping6 needs ``-b`` (ping6.c: ``datalen > 8 * 1024``).
PING6_DEFAULT_DATA_MAX = 8 * 1024
#: IPv6 header + ICMPv6 echo header in front of the data.
_IPV6_ECHO_HEADERS = 40 + 8


@dataclass(frozen=True)
class PingRequest:
    """One ping as the suite asks for it, whatever program sends it."""

    dst: str
    family: str  # ipv4 | ipv6
    count: int
    deadline: int  # whole seconds the program may run
    size: int | None = None  # data bytes after the ICMP header (None: the program's default)
    dont_fragment: bool = False
    source: str | None = None
    interval: float | None = None


def ping6_sockbuf(size: int | None) -> int | None:
    """The ``-b`` of FreeBSD's ping6 for ``size`` data bytes: None up to 8,192 (the default
    buffers do), else room for four whole packets (the echo and its reply, with a reply
    or two queued), so the warning's condition ``datalen > sockbufsize`` never holds."""
    if size is None or size <= PING6_DEFAULT_DATA_MAX:
        return None
    return 4 * (size + _IPV6_ECHO_HEADERS)


def freebsd(req: PingRequest) -> list[str | int]:
    """FreeBSD's merged ping (``-6`` for IPv6): ``-D`` don't fragment, ``-S`` source,
    ``-t`` deadline, ``-b`` socket buffer for IPv6 payloads above 8,192 bytes."""
    args: list[str | int] = ["ping"]
    if req.family == "ipv6":
        args.append("-6")
        sockbuf = ping6_sockbuf(req.size)
        if sockbuf is not None:
            args += ["-b", sockbuf]
    args += ["-c", req.count]
    if req.size is not None:
        args += ["-s", req.size]
    if req.dont_fragment:
        args.append("-D")
    if req.source:
        args += ["-S", req.source]
    if req.interval is not None:
        args += ["-i", f"{req.interval:g}"]
    return args + ["-t", req.deadline, req.dst]


def iputils(req: PingRequest) -> list[str | int]:
    """iputils' ping (Linux bench): ``-M do|dont`` don't fragment, ``-I`` source, ``-w`` deadline."""
    args: list[str | int] = ["ping", "-6" if req.family == "ipv6" else "-4", "-c", req.count, "-n"]
    if req.size is not None:
        args += ["-s", req.size]
    args += ["-M", "do" if req.dont_fragment else "dont"]
    if req.source:
        args += ["-I", req.source]
    if req.interval is not None:
        args += ["-i", f"{req.interval:g}"]
    return args + ["-w", req.deadline, req.dst]


def iputils_under_load(dst: str, count: int, *, interval: float = 0.05, source: str | None = None) -> Command:
    """iputils' ping of the round trips under load (traffic.udp_load.rtt_probe): only ``-n
    -c -i`` and ``-I`` -- no family flag, no ``-M``, no ``-w``: it runs inside the load's
    seconds and its replies are read line by line (``icmp_seq=N ... time=T ms``), not by
    parsers.ping, so it keeps the line it had rather than :func:`iputils`'s."""
    return Command("ping", "-n", "-c", count, "-i", f"{interval:g}", *(["-I", source] if source else []), dst)
