"""``python -m ipsec_hil.lab.sharing status|break TOPOLOGY [HOST...] [--reason TEXT]``.

Why a command: a lab that refuses a run must say who holds it without anybody reading
JSON on an appliance, and a dead holder whose lease has not expired yet (or a holder
that must be stopped) is broken with a reason that the broken run and the next acquirer
both see. In a lab with a labgrid coordinator (``lab.labgrid`` in the topology) the
places and reservations ARE the lock: ``status`` shows them, ``break`` kicks the place
(labgrid's ``release --kick``) with the reason recorded in the coordinator's place comment.

Exit status: 0 done, 1 a lock could not be read or broken (the message names the host and
the file), 2 bad arguments, a lab file that is missing or invalid, or a virtual lab's
template (its leases are on the running lab: one line naming the command that starts it,
ipsec_hil.cli).
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from pathlib import Path

from ipsec_hil.cli import ArgumentParser, InputError, load_lab_file
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.sharing.lock import BENCH_LOCK_PATH, DEFAULT_LOCK_PATH, ApplianceLock, bench_lock_path
from ipsec_hil.lab.remote import Host
from ipsec_hil.lab.remote.factory import host_from_mgmt
from ipsec_hil.lab.topology import Topology


def who_am_i() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def connect(topo: Topology, name: str) -> Host:
    """A Host for topology host ``name`` (through its jump host, if it has one)."""
    h = topo.host(name)
    if not h.mgmt.local and not h.mgmt.address:
        where = topo.source or "the topology"
        raise LabError(f"{where}: hosts.{name}.mgmt has no address (a virtual lab's file is filled in by "
                       "`python -m ipsec_hil_twin up`: use the lab.resolved.yaml it prints)")
    jump = host_from_mgmt(f"{name}-jump", h.mgmt.jump, topo.lab.known_hosts) if h.mgmt.jump else None
    return host_from_mgmt(name, h.mgmt, topo.lab.known_hosts, jump=jump)  # type: ignore[arg-type]


def lock_for(topo: Topology, name: str, host: Host, appliance_path: str, bench_path: str) -> ApplianceLock:
    path = bench_lock_path(host, bench_path) if topo.host(name).role == "bench" else appliance_path
    return ApplianceLock(host, who_am_i(), path=path)


def _appliance_leases(topo: Topology, args: argparse.Namespace) -> int:
    names = args.hosts or list(topo.hosts)
    failed = 0
    for name in names:
        try:
            host = connect(topo, name)
            try:
                lock = lock_for(topo, name, host, args.path, args.bench_path)
                if args.command == "status":
                    print(lock.status().describe())
                else:
                    before = lock.break_(args.reason, who_am_i())
                    print(f"broke {before.describe()} -- reason: {args.reason}")
            finally:
                host.close()
        except LabError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def _labgrid(topo: Topology, args: argparse.Namespace) -> int:
    from ipsec_hil.lab.sharing.labgrid_claim import LabgridLab

    assert topo.lab.labgrid is not None
    with LabgridLab(topo.lab.labgrid.coordinator) as lg:
        if args.command == "status":
            for line in lg.status_lines(topo.lab.labgrid):
                print(line)
            return 0
        for place in lg.matching_places(topo.lab.labgrid, args.hosts or None):
            print(lg.kick(place, args.reason, who_am_i()))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="ipsec-hil-lease",
                                 description="Show or break the leases of a lab's hosts (or its labgrid places).")
    ap.add_argument("command", choices=("status", "break"))
    ap.add_argument("topology", type=Path)
    ap.add_argument("hosts", nargs="*", metavar="HOST",
                    help="hosts of the topology (default: all); with labgrid: place names")
    ap.add_argument("--reason", default="", help="why the lease is broken (required for break)")
    ap.add_argument("--path", default=DEFAULT_LOCK_PATH, help=f"appliance lock file (default {DEFAULT_LOCK_PATH})")
    ap.add_argument("--bench-path", default=BENCH_LOCK_PATH, help=f"bench lock file (default {BENCH_LOCK_PATH})")
    args = ap.parse_args(argv)
    if args.command == "break" and not args.reason.strip():
        ap.error("break needs --reason TEXT (recorded for the broken run and the next one)")
    try:
        topo = load_lab_file(ap.prog, args.topology, then="give `ipsec-hil-lease status|break` its lab.resolved.yaml")
        for name in args.hosts if topo.lab.labgrid is None else ():
            topo.host(name)
    except LabError as exc:  # a host the lab file does not have
        return InputError(f"{ap.prog}: {args.topology}: {exc}").report()
    except InputError as exc:
        return exc.report()
    try:
        return _appliance_leases(topo, args) if topo.lab.labgrid is None else _labgrid(topo, args)
    except LabError as exc:
        print(str(exc), file=sys.stderr)
        return 1
