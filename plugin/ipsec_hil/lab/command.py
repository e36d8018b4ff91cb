"""A command line the suite sends, as an object: its argv, built once, quoted for sh.

Why (issue 53, "a command is an object"): the lines were spelled where they were sent --
``netstat -s -p esp --libxo json`` five times, ``swanctl --list-sas`` in three modules --
while each parser kept a ``COMMAND`` string nothing used. Now each parser module's
``COMMAND`` is the line the suite sends for it (``netstat_esp.COMMAND``), beside its parser,
its result type and its golden cases (tests/golden/<command>/), and every sender uses that
object: the appliance, the health snapshot, the survey, preflight. A :class:`Command` is a
``str`` (the quoted line, what :meth:`ipsec_hil.lab.remote.Host.run` takes) that keeps its
argv; calling it adds arguments (``sysctl.COMMAND("-n", oid)``, ``ifconfig.COMMAND(name)``).
tests/parsers/test_commands.py finds a command's line spelled anywhere else.

:func:`argv` is the one sh quoting of an argument list (``ipsec_hil.lab.remote.argv`` is
this function).
"""

from __future__ import annotations

import os
import shlex

__all__ = ["Command", "argv", "IP_ADDR", "IP_NETNS_EXEC", "IP_ROUTE", "IP_VERSION", "KLDLOAD", "KLDUNLOAD",
           "REBOOT", "ROUTE", "SWANCTL_LIST_CONNS", "SWANCTL_REKEY", "SWANCTL_STATS", "SWANCTL_TERMINATE",
           "TCPDUMP_WRITE"]


def argv(*args: str | os.PathLike[str] | int) -> str:
    """One sh command line, every argument quoted with shlex.quote (safe for any bytes
    sh accepts: quotes, backslashes, `$`, `!`, backticks, `;`, newlines)."""
    if not args:
        raise ValueError("argv() needs at least the command name")
    return " ".join(shlex.quote(os.fspath(a) if not isinstance(a, int) else str(a)) for a in args)


class Command(str):
    """A command line (the str) and its argv (``.argv``); ``cmd(*more)`` is the same command
    with more arguments, a Command too."""

    argv: tuple[str, ...]

    def __new__(cls, *args: str | os.PathLike[str] | int) -> Command:
        self = super().__new__(cls, argv(*args))
        self.argv = tuple(os.fspath(a) if not isinstance(a, int) else str(a) for a in args)
        return self

    def __call__(self, *more: str | os.PathLike[str] | int) -> Command:
        return Command(*self.argv, *more)

    def __reduce__(self) -> tuple[type[Command], tuple[str, ...]]:  # pickled (xdist) as its argv
        return Command, self.argv

    def __repr__(self) -> str:
        return f"Command{self.argv!r}"


# -- the commands whose answer is their exit status: no output to parse, so no parser module
# to live beside; each is built here once (a command with output: its parser's COMMAND).

#: ``swanctl --terminate`` + ``--ike X`` | ``--child X`` | ``--child-id N``, ``--timeout S``, ``--force``
SWANCTL_TERMINATE = Command("swanctl", "--terminate")
#: ``swanctl --rekey --child|--ike NAME``
SWANCTL_REKEY = Command("swanctl", "--rekey")
#: exits 0 when charon answers (preflight); its text is saved raw by the survey (no parser)
SWANCTL_STATS = Command("swanctl", "--stats")
#: the loaded connections, saved raw by the survey (no parser)
SWANCTL_LIST_CONNS = Command("swanctl", "--list-conns")
#: ``route [-6] add|delete -net PREFIX ...`` of each family (``route -n get``: parsers.route_get)
ROUTE = {"ipv4": Command("route"), "ipv6": Command("route", "-6")}
KLDLOAD = Command("kldload")
KLDUNLOAD = Command("kldunload")
REBOOT = Command("shutdown", "-r", "now")

# -- iproute2's ``ip`` on the bench (Linux) and on the controller (``ip -j route``: parsers.ip_route)

#: ``ip -4|-6 route add|del NET via GW [proto N]`` of each family (the route probe)
IP_ROUTE = {"ipv4": Command("ip", "-4", "route"), "ipv6": Command("ip", "-6", "route")}
#: the bench's addresses as JSON (preflight reads the JSON itself: no parser module)
IP_ADDR = Command("ip", "-j", "addr", "show")
#: exits 0 when iproute2 is installed (preflight's bench tools)
IP_VERSION = Command("ip", "-V")
#: ``IP_NETNS_EXEC(netns, *argv)``: a program inside a network namespace (remote.local)
IP_NETNS_EXEC = Command("ip", "netns", "exec")

#: a capture to a file, ``TCPDUMP_WRITE("-s", N, "-i", IF, "-w", PATH, *bpf)`` (traffic.capture:
#: its status line is read there); every packet written at once (``-U``, ``--immediate-mode``:
#: a SIGINT would lose libpcap's buffered last packets), no name lookups (``-n``)
TCPDUMP_WRITE = Command("tcpdump", "--immediate-mode", "-n", "-U")
