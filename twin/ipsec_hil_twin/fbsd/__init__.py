"""FreeBSD commands of the emulated appliance (14.1 by default; 14.3 and 15.1 by the lab file: osrel): `python -m ipsec_hil_twin.fbsd.<cmd>`.

Each module prints what FreeBSD prints (formats: shared/reference/freebsd-opnsense-formats.md),
with FreeBSD's exit codes and error texts, computed from the lab's real state: the ESP
engine (DIR/engine.sock), state.json, sysctl.json, faults.json and the namespace's real
interfaces and routes. They run on every SSH command, so imports stay small (stdlib only).

COMMANDS below is the registry: every command the appliance shell finds, the module
that implements it and how its DIR/bin wrapper starts it (ipsec_hil_twin.fbsd.install writes the
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
    "sysctl": Command("ipsec_hil_twin.fbsd.sysctl", "stdlib", "sysctl(8): the net.inet.ipsec and driver subtrees"),
    "netstat": Command("ipsec_hil_twin.fbsd.netstat", "stdlib", "netstat(1) -s -p esp|ipsec|ipsec6|ip|ip6, -m and -r, text and libxo json"),
    "vmstat": Command("ipsec_hil_twin.fbsd.vmstat", "stdlib", "vmstat(8) -z / -m: UMA zones and malloc types (ipsec_hil_twin.fbsd._kmem)"),
    "setkey": Command("ipsec_hil_twin.fbsd.setkey", "stdlib", "setkey(8) -D / -DP from the engine's SA table"),
    "kldload": Command("ipsec_hil_twin.fbsd.kldload", "stdlib", "kldload(8) of the offload driver (ipsec_hil_twin.fbsd.kld)"),
    "kldunload": Command("ipsec_hil_twin.fbsd.kldunload", "stdlib", "kldunload(8) (ipsec_hil_twin.fbsd.kld)"),
    "kldstat": Command("ipsec_hil_twin.fbsd.kldstat", "stdlib", "kldstat(8) (ipsec_hil_twin.fbsd.kld)"),
    "md5": Command("ipsec_hil_twin.fbsd.md5", "stdlib", "md5(1) (ipsec_hil_twin.fbsd.digest)"),
    "sha256": Command("ipsec_hil_twin.fbsd.sha256", "stdlib", "sha256(1) (ipsec_hil_twin.fbsd.digest)"),
    "ping": Command("ipsec_hil_twin.fbsd.ping", "stdlib", "ping(8) over the namespace's real ping"),
    "ping6": Command("ipsec_hil_twin.fbsd.ping6", "stdlib", "ping6: ping(8) forced to IPv6, KAME texts"),
    "ifconfig": Command("ipsec_hil_twin.fbsd.ifconfig", "stdlib", "ifconfig(8) of the namespace's interfaces"),
    "route": Command("ipsec_hil_twin.fbsd.route", "stdlib", "route(8) add / delete / get"),
    "shutdown": Command("ipsec_hil_twin.fbsd.shutdown", "stdlib", "shutdown(8) -r now: a reboot by the lab's supervisor"),
    "b64decode": Command("ipsec_hil_twin.fbsd.b64decode", "stdlib", "b64decode(1) -r"),
    "dmesg": Command("ipsec_hil_twin.fbsd.dmesg", "stdlib", "dmesg(8): the appliance's /var/log/dmesg.txt"),
    "uname": Command("ipsec_hil_twin.fbsd.uname", "stdlib", "uname(1) of the appliance's release (ipsec_hil_twin.fbsd.osrel)"),
    "freebsd-version": Command("ipsec_hil_twin.fbsd.freebsd_version", "stdlib", "freebsd-version(1) -kru"),
    "opnsense-version": Command("ipsec_hil_twin.fbsd.opnsense_version", "stdlib", "OPNsense's opnsense-version(8)"),
    "swanctl": Command("ipsec_hil_twin.ike.swanctl", "stdlib", "strongSwan 5.9.8 swanctl (talks to ipsec_hil_twin.ike.daemon)"),
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
    "osrel": "the OPNsense / FreeBSD release an appliance runs and what differs between releases",
    "version": "uname/freebsd-version/opnsense-version behind their three names",
    "netstat_if": "netstat -i / -I IF [-d]: the ports' counters, the drops FreeBSD counts there included",
    "netstat_ip": "netstat -s -p ip|ip6: FreeBSD's ipstat/ip6stat from the namespace's own IP counters",
    "netstat_route": "netstat -r: FreeBSD 14's routing table from the namespace's routes and the engine's",
    "cptime": "the appliance's CPU time as sysctl kern.cp_time / kern.clockrate show it (a model, issue 41)",
}
"""The modules of this package that are no command themselves."""
