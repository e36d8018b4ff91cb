"""FreeBSD 14 commands of the emulated appliance: `python -m twin.fbsd.<cmd>`.

Each module prints what FreeBSD prints (formats: shared/reference/freebsd-opnsense-formats.md),
with FreeBSD's exit codes and error texts, computed from the lab's real state: the ESP
engine (DIR/engine.sock), state.json, sysctl.json, faults.json and the namespace's real
interfaces and routes. They run on every SSH command, so imports stay small (stdlib only).

COMMANDS below is the registry: every command the appliance shell finds, the module
that implements it and how its DIR/bin wrapper starts it (twin.fbsd.install writes the
wrappers from it).  To add a command: a module here with `main(argv) -> int`, run through
`_common.run_main`, and one line in COMMANDS.
"""
from __future__ import annotations

from collections import namedtuple


class Command(namedtuple("Command", "module wrapper emulates")):
    """One emulated command (a namedtuple, not typing's NamedTuple: importing typing cost
    every command ~8 ms of start-up; tests/twin_shell/test_command_imports.py).

    module: run as `python -m <module>`.
    wrapper: `stdlib`: `python -S` with the repository on PYTHONPATH (no site-packages, ~0.1 s
    faster per call; the module must import only the stdlib and twin's stdlib-only
    modules); `full`: `python -m` with the caller's environment (needs site-packages).
    emulates: what of FreeBSD it answers for.
    """

    __slots__ = ()


COMMANDS: dict[str, Command] = {
    "sysctl": Command("twin.fbsd.sysctl", "stdlib", "sysctl(8): the net.inet.ipsec and driver subtrees"),
    "netstat": Command("twin.fbsd.netstat", "stdlib", "netstat(1) -s -p esp|ipsec|ipsec6 and -m, text and libxo json"),
    "vmstat": Command("twin.fbsd.vmstat", "stdlib", "vmstat(8) -z / -m: UMA zones and malloc types (twin.fbsd._kmem)"),
    "setkey": Command("twin.fbsd.setkey", "stdlib", "setkey(8) -D / -DP from the engine's SA table"),
    "kldload": Command("twin.fbsd.kldload", "stdlib", "kldload(8) of the offload driver (twin.fbsd.kld)"),
    "kldunload": Command("twin.fbsd.kldunload", "stdlib", "kldunload(8) (twin.fbsd.kld)"),
    "kldstat": Command("twin.fbsd.kldstat", "stdlib", "kldstat(8) (twin.fbsd.kld)"),
    "md5": Command("twin.fbsd.md5", "stdlib", "md5(1) (twin.fbsd.digest)"),
    "sha256": Command("twin.fbsd.sha256", "stdlib", "sha256(1) (twin.fbsd.digest)"),
    "ping": Command("twin.fbsd.ping", "stdlib", "ping(8) over the namespace's real ping"),
    "ping6": Command("twin.fbsd.ping6", "stdlib", "ping6: ping(8) forced to IPv6, KAME texts"),
    "ifconfig": Command("twin.fbsd.ifconfig", "stdlib", "ifconfig(8) of the namespace's interfaces"),
    "route": Command("twin.fbsd.route", "stdlib", "route(8) add / delete / get"),
    "shutdown": Command("twin.fbsd.shutdown", "stdlib", "shutdown(8) -r now: a reboot by the lab's supervisor"),
    "b64decode": Command("twin.fbsd.b64decode", "stdlib", "b64decode(1) -r"),
    "dmesg": Command("twin.fbsd.dmesg", "stdlib", "dmesg(8): the appliance's /var/log/dmesg.txt"),
    "swanctl": Command("twin.ike.swanctl", "stdlib", "strongSwan 5.9.8 swanctl (talks to twin.ike.daemon)"),
}
"""Command name -> module and wrapper."""

HELPER_MODULES: dict[str, str] = {
    "_common": "the commands' shared plumbing (host dir, engine requests, option letters)",
    "kld": "kldload/kldunload/kldstat behind their three names",
    "digest": "md5/sha256 behind their two names",
    "nd6": "IPv6 interface state (nd6 IFDISABLED) for ifconfig and ping",
    "pingout": "FreeBSD ping's reply, error and summary lines, whichever sender ping uses",
    "pingloop": "FreeBSD's ping loop on a raw socket, for streams (no iputils busy-wait)",
    "_kmem": "kernel memory and kernel log under traffic for netstat -m, vmstat, dmesg",
    "install": "writes the DIR/bin wrappers from COMMANDS",
}
"""The modules of this package that are no command themselves."""
