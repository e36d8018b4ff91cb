"""`python -m ipsec_hil_twin`: up | down | status | fault | seq | reboot for the virtual lab.

`up` prints one JSON line {"resolved", "prefix", "run_dir"} and returns while a detached
supervisor keeps the lab running (DESIGN.md "The virtual lab at run time").  Errors go
to stderr as one line starting `twin: ` and exit 1 (2 for usage errors). `up` takes a lab
file as written (topologies/virtual.yaml: it is this command that makes its template a
running lab); the suite's console scripts name this command when given such a template.
"""
from __future__ import annotations

import argparse
import json
import sys

from ipsec_hil_twin import faults
from ipsec_hil_twin.errors import TwinError
from ipsec_hil_twin.lifecycle.lab import Lab, LabBuildError, cleanup_dead, find_run, list_runs
from ipsec_hil_twin.machinery.runtime import read_json
from ipsec_hil.lab.topology import TopologyError  # the lab file's schema: the one contract shared with the suite


def _components(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c for c in value.split(",") if c and c != "netns"]


def cmd_up(a: argparse.Namespace) -> int:
    from ipsec_hil_twin.lifecycle import supervisor
    comps = _components(a.components)
    if a.foreground:
        from ipsec_hil_twin.lifecycle.lab import _free_prefix
        import os
        prefix = a.prefix or _free_prefix()
        return supervisor.run(a.topology, prefix, a.run_dir, comps, os.getpid(), a.owner_pid, None)
    out = supervisor.spawn(a.topology, prefix=a.prefix, run_dir=a.run_dir, components=comps,
                           owner_pid=a.owner_pid, timeout=a.timeout)
    print(json.dumps({k: out[k] for k in ("resolved", "prefix", "run_dir")}), flush=True)
    return 0


def cmd_down(a: argparse.Namespace) -> int:
    from ipsec_hil_twin.lifecycle import supervisor
    if a.all_dead:
        done = cleanup_dead()
        print(json.dumps({"removed": done}))
        return 0
    prefix = supervisor.down(run_dir=a.run_dir, prefix=a.prefix)
    print(json.dumps({"removed": [prefix]}))
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    if a.prefix or a.run_dir:
        runs = [find_run(run_dir=a.run_dir, prefix=a.prefix)]
    else:
        runs = list_runs()
    out = []
    for rd in runs:
        info = read_json(rd.lab_json, default=None)
        if info is None:
            continue
        lab = Lab.attach(run_dir=rd.path)
        out.append(lab.status())
    print(json.dumps(out if not (a.prefix or a.run_dir) else out[0], indent=2))
    return 0


def cmd_fault(a: argparse.Namespace) -> int:
    words = list(a.words)
    if a.list:
        active = None
        if words and (a.prefix or a.run_dir):
            lab = Lab.attach(run_dir=a.run_dir, prefix=a.prefix)
            lab._check_host(words[0])
            active = faults.active_faults(lab.host_dir(words[0]))
        sys.stdout.write(faults.registry_table(active))
        return 0
    if len(words) < 2:
        raise faults.FaultError("usage: fault [--prefix P|--run-dir D] HOST NAME [k=v ...] [--off] | --list")
    host, name, kv = words[0], words[1], words[2:]
    faults.get_fault(name)
    lab = Lab.attach(run_dir=a.run_dir, prefix=a.prefix)
    if a.off:
        if kv:
            raise faults.FaultError("--off takes no parameters")
        lab.clear_fault(host, name)
        print(json.dumps({"host": host, "fault": name, "on": False}))
    else:
        params = lab.fault(host, name, **faults.parse_kv(kv))
        print(json.dumps({"host": host, "fault": name, "on": True, "params": params}))
    return 0


def cmd_seq(a: argparse.Namespace) -> int:
    """Start an outbound association's sequence number at SEQ (the engine's set_seq):
    how a test reaches 2^32 with ESN in seconds."""
    from ipsec_hil_twin.engine.client import engine_request
    lab = Lab.attach(run_dir=a.run_dir, prefix=a.prefix)
    lab._check_host(a.host)
    req = {"op": "set_seq", "spi": int(a.spi, 0), "seq": int(a.seq, 0)}
    if a.dst:
        req["dst"] = a.dst
    engine_request(lab.host_dir(a.host).engine_sock, req)
    print(json.dumps({"host": a.host, "spi": req["spi"], "seq": req["seq"]}))
    return 0


def cmd_reboot(a: argparse.Namespace) -> int:
    from ipsec_hil_twin.lifecycle import supervisor
    rd = find_run(run_dir=a.run_dir, prefix=a.prefix)
    reply = supervisor.request_reboot(rd, a.host, wait=not a.no_wait, timeout=a.timeout)
    print(json.dumps({"host": a.host, **{k: v for k, v in reply.items() if k != "ok"}}))
    return 0


class Parser(argparse.ArgumentParser):
    """Usage errors as one line starting `twin: ` (exit 2), like every other error here; its
    subcommands' parsers are of this class too (argparse's default)."""

    def error(self, message: str):
        self.exit(2, f"twin: {self.prog}: {message} (`{self.prog} --help` lists the options)\n")


def parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m ipsec_hil_twin", description="the virtual IPsec lab")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def where(p: argparse.ArgumentParser) -> None:
        g = p.add_mutually_exclusive_group()
        g.add_argument("--prefix", help="lab prefix (tw + 4 hex)")
        g.add_argument("--run-dir", help="lab run dir")

    p = sub.add_parser("up", help="build and start a lab")
    p.add_argument("topology")
    p.add_argument("--prefix")
    p.add_argument("--run-dir")
    p.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C tears down")
    p.add_argument("--components", help="comma list of engine,ike,sshd (or 'netns' for none); "
                                        "default: every installed one")
    p.add_argument("--owner-pid", type=int, help="tear the lab down when this process exits")
    p.add_argument("--timeout", type=float, default=90.0)
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="tear a lab down")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--prefix")
    g.add_argument("--run-dir")
    g.add_argument("--all-dead", action="store_true", help="remove every run whose supervisor died")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("status", help="namespaces, pids, ports, components alive")
    where(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("fault", help="switch a fault on/off; --list shows the registry")
    where(p)
    p.add_argument("--off", action="store_true")
    p.add_argument("--list", action="store_true")
    p.add_argument("words", nargs="*", metavar="HOST NAME [k=v ...]")
    p.set_defaults(func=cmd_fault)

    p = sub.add_parser("seq", help="start an outbound SA's sequence number at SEQ (next frame: SEQ+1)")
    where(p)
    p.add_argument("host")
    p.add_argument("spi", help="the outbound SPI (0x... or decimal)")
    p.add_argument("seq", help="the last sequence number sent, e.g. 0xfffffff0 (above 2^32-1: ESN only)")
    p.add_argument("--dst", help="the SA's destination, when two outbound SAs share the SPI")
    p.set_defaults(func=cmd_seq)

    p = sub.add_parser("reboot", help="reboot one appliance")
    where(p)
    p.add_argument("host")
    p.add_argument("--no-wait", action="store_true")
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=cmd_reboot)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        return a.func(a)
    except (TwinError, LabBuildError, TopologyError, ValueError, OSError) as exc:  # FaultError is a TwinError
        print(f"twin: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
