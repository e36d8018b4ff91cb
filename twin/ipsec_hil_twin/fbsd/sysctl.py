"""sysctl(8) of FreeBSD 14 for the emulated appliance.

Driver OIDs come from host.json's counters map (logical name -> OID, which ipsec_hil_twin.lifecycle.labfiles
writes from the model's ipsec_hil_twin.personality entry with the lab file's overrides; the lab
file is the contract) and are read from
the engine in one `counters` round trip; they exist only while the driver module is
loaded (state.json), as on FreeBSD.  Kernel OIDs are computed from state.json and the
writable ones live in DIR/sysctl.json; kern.cp_time is the CPU model of
ipsec_hil_twin.fbsd.cptime over the engine's charged CPU time (the same round trip).
Leaves are registered in FreeBSD's order, a node's static OID numbers first, then its
OID_AUTO ones (kern: ostype 1, osrelease 2, version 4, clockrate 12, boottime 21,
osreldate 24, then cp_time; hw: model 2, ncpu 3; the top: kern 1, net 4, hw 6, then dev),
so `sysctl kern` and `-a` list them as FreeBSD does.  Output forms, errors and the exit
status (the number of failed names) follow sbin/sysctl/sysctl.c.
"""
from __future__ import annotations

import sys
import time

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd import cptime, osrel
from ipsec_hil_twin.personality import PERSONALITIES

TYPE_CHECKING = False  # typing is not imported at run time: every emulated command pays for its imports
if TYPE_CHECKING:
    from typing import Any, Callable

PROG = "sysctl"

OS_RELEASE = osrel.RELEASES[osrel.DEFAULT].osrelease
KERN_VERSION = osrel.RELEASES[osrel.DEFAULT].kern_version
"""The default release's strings (the appliance's own come from osrel.of_host)."""

WRITABLE_DEFAULTS: dict[str, int] = {
    "net.inet.ipsec.def_policy": 1,
    "net.inet.ipsec.dfbit": 0,
    "net.inet.ipsec.offload.verbose": 0,  # FreeBSD 15 (IPSEC_OFFLOAD) only: Tree adds it there
    "net.inet.esp.esp_enable": 1,
    "net.enc.in.ipsec_filter_mask": 2,   # OPNsense's defaults (system.inc), not FreeBSD's
    "net.enc.in.ipsec_bpf_mask": 2,
    "net.enc.out.ipsec_filter_mask": 1,
    "net.enc.out.ipsec_bpf_mask": 1,
}


class Oid:
    """One leaf.  A plain class, not a dataclass: `dataclasses` costs ~60 ms of start-up
    per command under load, and every SSH counter read runs this."""

    __slots__ = ("name", "kind", "get", "writable")

    def __init__(self, name: str, kind: str, get: Callable[[], Any], writable: bool = False) -> None:
        self.name = name
        self.kind = kind          # integer | long | uint64_t | uint8_t | string | opaque | struct (`sysctl -t`)
        self.get = get
        self.writable = writable


class Tree:
    """The OIDs this appliance has right now, in registration order."""

    def __init__(self, hd) -> None:
        self.hd = hd
        self.host = c.host_info(hd)
        self.state = c.load_state(hd)
        self.sysctls = c.load_sysctls(hd)
        self.oids: dict[str, Oid] = {}
        self._engine_reply: dict[str, Any] | None = None
        self._build()

    def _add(self, oid: Oid) -> None:
        self.oids[oid.name] = oid

    def _writable(self, name: str) -> Oid:
        return Oid(name, "integer", lambda: int(self.sysctls.get(name, WRITABLE_DEFAULTS[name])), True)

    def _build(self) -> None:
        model = str(self.host.get("model", ""))
        boot = float(self.state.get("boot_time", time.time()))
        rel = osrel.of_host(self.host)
        self._add(Oid("kern.ostype", "string", lambda: "FreeBSD"))
        self._add(Oid("kern.osrelease", "string", lambda: rel.osrelease))
        self._add(Oid("kern.version", "string", lambda: rel.kern_version))
        self._add(Oid("kern.clockrate", "struct", cptime.clockrate))
        self._add(Oid("kern.boottime", "struct", lambda: _boottime(boot)))
        self._add(Oid("kern.osreldate", "integer", lambda: rel.osreldate))
        # an array of longs: sysctl -t names the element type, -n prints the elements
        self._add(Oid("kern.cp_time", "long", lambda: " ".join(
            str(n) for n in cptime.cp_time(time.time(), boot, self._ncpu(model), self._engine_cpu_ns()))))
        if c.module_loaded(self.state, "ipsec"):
            self._add(self._writable("net.inet.ipsec.def_policy"))
            self._add(self._writable("net.inet.ipsec.dfbit"))
            self._add(Oid("net.inet.ipsec.ipsecstats", "opaque", lambda: None))
            if rel.ipsec_offload:
                # ipsec_offload.c: SYSCTL_NODE(_net_inet_ipsec, offload) + SYSCTL_BOOL verbose
                # (CTLTYPE_U8: `sysctl -t` says uint8_t)
                verbose = self._writable("net.inet.ipsec.offload.verbose")
                verbose.kind = "uint8_t"
                self._add(verbose)
            self._add(self._writable("net.inet.esp.esp_enable"))
            self._add(Oid("net.inet.esp.stats", "opaque", lambda: None))
        for name in ("net.enc.in.ipsec_filter_mask", "net.enc.in.ipsec_bpf_mask",
                     "net.enc.out.ipsec_filter_mask", "net.enc.out.ipsec_bpf_mask"):
            self._add(self._writable(name))
        self._add(Oid("hw.model", "string",
                      lambda: str(self.host.get("hw_model") or _hw_model(model))))
        self._add(Oid("hw.ncpu", "integer", lambda: self._ncpu(model)))
        if c.driver_loaded(self.hd, self.state):
            counters = self.host.get("counters") or {}
            if not isinstance(counters, dict):
                raise ValueError(f"{self.hd.host_json}: counters: expected an object logical->oid")
            renamed = c.active_faults(self.hd).get("counter_renamed") or {}  # a driver naming it otherwise
            for logical, oid in counters.items():
                if logical == renamed.get("counter"):
                    oid = str(oid).rsplit(".", 1)[0] + "." + str(renamed.get("to"))
                self._add(Oid(str(oid), "uint64_t", self._driver_getter(str(logical))))

    def _engine_counters(self) -> dict[str, Any]:
        """The engine's `counters` reply, asked once per command (every driver OID and
        kern.cp_time read from the one answer)."""
        if self._engine_reply is None:
            self._engine_reply = c.engine(self.hd, {"op": "counters"})
        return self._engine_reply

    def _driver_getter(self, logical: str) -> Callable[[], int]:
        def get() -> int:
            return int((self._engine_counters().get("driver") or {}).get(logical, 0))
        return get

    def _engine_cpu_ns(self) -> int:
        """The CPU time the engine charged this appliance since boot, in ns (its loops'
        per-packet cost: ipsec_hil_twin.engine.cost); 0 from an engine that reports none."""
        return int(self._engine_counters().get("cpu_ns") or 0)

    def _ncpu(self, model: str) -> int:
        """hw.ncpu: host.json's, else the model's (ipsec_hil_twin.personality)."""
        p = PERSONALITIES.get(model)
        return int(self.host.get("ncpu") or (p.ncpu if p is not None else 1))

    def match(self, name: str) -> list[Oid] | None:
        """Leaf named `name`, or every leaf below the node `name`; None if unknown."""
        if name in self.oids:
            return [self.oids[name]]
        below = [o for n, o in self.oids.items() if n.startswith(name + ".")]
        return below or None


def _hw_model(model: str) -> str:
    """hw.model of the emulated model (ipsec_hil_twin.personality) for host.json files without one."""
    p = PERSONALITIES.get(model)
    return p.hw_model if p is not None else "Intel(R) Atom(TM) CPU"


def _boottime(t: float) -> str:
    sec = int(t)
    usec = int(round((t - sec) * 1e6)) % 1000000
    return "{ sec = %d, usec = %d } %s" % (sec, usec, time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(sec)))


def _fmt(oid: Oid, value: Any) -> str:
    return str(value)


def usage() -> int:
    sys.stderr.write(
        "usage: sysctl [-bdehiNnoqTtWx] [ -B <bufsize> ] [-f filename] name[=value] ...\n"
        "       sysctl [-bdehNnoqTtWx] [ -B <bufsize> ] -a\n")
    return 1


def main(argv: list[str]) -> int:
    opts = {"n": False, "e": False, "N": False, "q": False, "i": False, "a": False, "t": False}
    names: list[str] = []
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "-":
        a = args.pop(0)
        if a == "--":
            break
        for ch in a[1:]:
            if ch in opts:
                opts[ch] = True
            elif ch in "hbdoxTW":
                pass  # accepted, no effect on the values we print
            else:
                sys.stderr.write(f"sysctl: illegal option -- {ch}\n")
                return usage()
    names = args
    hd = c.host_dir()
    tree = Tree(hd)
    if opts["a"] and not names:
        names_to_show = [[o] for o in tree.oids.values()]
        return _show_all(tree, [o for group in names_to_show for o in group], opts)
    if not names:
        return usage()
    failed = 0
    for arg in names:
        if "=" in arg:
            failed += _set(tree, arg, opts)
            continue
        oids = tree.match(arg)
        if oids is None:
            if not opts["i"]:
                failed += 1
                if not opts["q"]:
                    c.err(PROG, f"unknown oid '{arg}'")
            continue
        try:
            _print_oids(tree, oids, opts)
        except c.EngineError as exc:
            c.err(PROG, str(exc))
            failed += 1
    return failed


def _show_all(tree: Tree, oids: list[Oid], opts: dict[str, bool]) -> int:
    try:
        _print_oids(tree, oids, opts)
    except c.EngineError as exc:
        c.err(PROG, str(exc))
        return 1
    return 0


def _print_oids(tree: Tree, oids: list[Oid], opts: dict[str, bool]) -> None:
    out = []
    for oid in oids:
        if oid.kind == "opaque":
            continue  # struct stats without a formatter: skipped silently, as FreeBSD does
        if opts["N"]:
            out.append(oid.name + "\n")
            continue
        if opts["t"]:
            value = oid.kind
        else:
            value = _fmt(oid, oid.get())
        if opts["n"]:
            out.append(f"{value}\n")
        elif opts["e"]:
            out.append(f"{oid.name}={value}\n")
        else:
            out.append(f"{oid.name}: {value}\n")
    sys.stdout.write("".join(out))


def _set(tree: Tree, arg: str, opts: dict[str, bool]) -> int:
    name, _, raw = arg.partition("=")
    oids = tree.match(name)
    if oids is None:
        if not opts["i"]:
            if not opts["q"]:
                c.err(PROG, f"unknown oid '{name}'")
            return 1
        return 0
    if len(oids) != 1 or oids[0].name != name:
        c.err(PROG, f"oid '{name}' isn't a leaf node")
        return 1
    oid = oids[0]
    if not oid.writable:
        c.err(PROG, f"oid '{name}' is read only")
        return 1
    if raw.strip() == "":
        c.err(PROG, "empty numeric value")
        return 1
    try:
        new = int(raw, 0)
    except ValueError:
        c.err(PROG, f"invalid integer '{raw}'")
        return 1
    old = oid.get()
    tree.sysctls[name] = new
    c.save_sysctls(tree.hd, tree.sysctls)
    if opts["n"]:
        line = f"{old} -> {new}\n"
    elif opts["e"]:
        line = f"{name}={old} -> {new}\n"
    else:
        line = f"{name}: {old} -> {new}\n"
    sys.stdout.write(line)
    return 0


if __name__ == "__main__":
    c.run_main(main)
