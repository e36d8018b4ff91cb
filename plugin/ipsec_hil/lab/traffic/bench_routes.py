"""The bench's temporary routes, journalled on the bench like an appliance's changes.

Why: a forwarded test makes the bench send into the tunnel through an appliance (a route
to the far side via the appliance's LAN address, probes/route.py). A run killed between
adding and removing it left the route on the bench, and nothing undid it: the next run's
``add`` of the same route then found it "existing" and never removed it either, and a
bench that routes a prefix through a tunnel that is gone silently sends a later test's
traffic nowhere (issue 55). So each route is journalled on the bench BEFORE it is added --
the same :func:`ipsec_hil.lab.files.journal_undo` entry the appliances' routes get, in the
bench's own journal (:func:`bench_journal_dir`) -- and the next run's recovery, holding the
bench's lease, runs the undo (ipsec_hil.lab.dead_runs).

The route carries the suite's routing protocol number (:data:`SUITE_PROTO`, ``ip route add
... proto 147``) and the undo removes only a route that carries it, so no step a run can
die at makes the recovery remove an operator's route to the same network (one that existed
before is reported ``existed`` by the probe and is never the suite's to remove).

Removal finishes through an interrupt (Ctrl-C, a cut connection): each step is done once
more and the interrupt re-raised after, so a run's own teardown leaves no route and no
entry (the same rule as the tunnel's teardown, provision.changes.Teardown).

Library code: no pytest.
"""

from __future__ import annotations

import ipaddress
import logging
import shlex
from typing import Any

from ipsec_hil.lab import files
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.remote import fence
from ipsec_hil.lab.sharing.holds import HOLDS

log = logging.getLogger(__name__)

#: The bench is a Linux PC: /var/lib survives its reboots (beside its lease, BENCH_LOCK_PATH).
BENCH_JOURNAL_DIR = "/var/lib/ipsec-hil/bench-journal"
#: The routing protocol number the suite's bench routes carry (``ip route ... proto 147``;
#: no name in iproute2's rt_protos, so ``ip route`` shows ``proto 147``).
SUITE_PROTO = 147
#: Where iproute2's ``ip`` may be (probes/route.py's IP_CANDIDATES): a non-login SSH
#: session's PATH may lack the sbin directories.
_IP = ('ip=""; for c in ip /usr/sbin/ip /sbin/ip /usr/bin/ip /bin/ip; do '
       'command -v "$c" >/dev/null 2>&1 && { ip=$c; break; }; done\n'
       '[ -n "$ip" ] || { echo "iproute2\'s ip not found" >&2; exit 127; }\n')


def bench_journal_dir(host: Any, base: str = BENCH_JOURNAL_DIR) -> str:
    """The bench's journal as ``host`` reaches it: a bench inside a network namespace (a
    virtual lab's, several side by side on one machine sharing its /var/lib) gets its own
    (``bench-journal.NETNS``), as its lease does (sharing.lock.bench_lock_path)."""
    netns = getattr(host, "netns", None)
    return f"{base}.{netns}" if netns else base


def route_undo_script(dst: str, gateway: str, proto: int = SUITE_PROTO) -> str:
    """sh for the journal: remove the suite's route to ``dst`` via ``gateway`` (only one
    carrying ``proto``), and fail if one is still there. Idempotent: no such route is the
    wanted state."""
    net = ipaddress.ip_network(dst, strict=False)
    fam = "-4" if net.version == 4 else "-6"
    q = shlex.quote
    return (_IP
            + f'"$ip" {fam} route del {q(str(net))} via {q(gateway)} proto {int(proto)} 2>/dev/null\n'
            + f'if [ -n "$("$ip" {fam} route show table main exact {q(str(net))} proto {int(proto)})" ]; then\n'
            + f'  echo "the route to {net} (proto {int(proto)}) is still there" >&2; exit 1\nfi\n')


def remove_empty_journal(host: Any, timeout: float = 30) -> None:
    """Remove the bench's journal directory if it is empty (a run's end, holding the
    bench's lease): virtual labs come and go, each with its own directory on this machine."""
    d = bench_journal_dir(host)
    try:
        host.run(f"rmdir {shlex.quote(d)} 2>/dev/null; true\n", timeout=timeout)
    except LabError as exc:
        log.info("%s: bench journal %s not removed: %s", getattr(host, "name", "bench"), d, exc)


class BenchRoutes:
    """``routes = BenchRoutes(bench, run_id)``; ``routes.add(dst, gateway)`` ...;
    ``routes.remove_all()`` (or ``with BenchRoutes(...) as routes:``).

    ``bench`` is a :class:`ipsec_hil.lab.traffic.bench.BenchHost` (its ``probe`` adds and
    removes, its ``host`` holds the journal). Call it while the run holds the bench's lease.
    """

    def __init__(self, bench: Any, run_id: str, *, timeout: float = 60) -> None:
        self.bench = bench
        self.host = bench.host
        self.run_id = run_id
        self.timeout = timeout
        self.journal_dir = bench_journal_dir(self.host)
        self.added: list[tuple[str, files.UndoEntry]] = []

    def add(self, dst: str, gateway: str) -> dict:
        """Journal the undo, then add the route (the probe's answer). A route that was there
        already is reported ``existed`` and is not ours: its entry is dropped at once."""
        net = ipaddress.ip_network(dst, strict=False)
        script = route_undo_script(dst, gateway)
        entry = files.journal_undo(self.host, f"{self.bench.name}: route {net} via {gateway} (proto {SUITE_PROTO})",
                                   script, self.journal_dir, self.run_id, self.timeout)
        try:
            res = self.bench.probe("route", action="add", dst=dst, gateway=gateway, proto=SUITE_PROTO)
        except BaseException:
            # the route may be there (its answer lost): undone now; if that fails too, the
            # entry stays for the next run's recovery
            try:
                self.host.run(script, timeout=self.timeout).check(f"undo {entry.what}")
                files.forget_undo(self.host, entry, self.timeout)
            except Exception as exc:  # noqa: BLE001 -- the original error is the one to report
                log.warning("%s: route %s left for the next run's recovery: %s", self.bench.name, net, exc)
            raise
        if res.get("existed"):
            files.forget_undo(self.host, entry, self.timeout)
        else:
            self.added.append((dst, entry))
        return res

    def remove_all(self) -> None:
        """Remove every route this object added, newest first, and drop its entry; each step
        finishes through an interrupt or a lost connection (done once more, the interrupt
        re-raised at the end). A route that cannot be removed keeps its entry (the next
        run's recovery) and is named in the LabError raised at the end. On a bench this run
        lost to another (fenced) nothing is sent: the route is left to the new holder's
        recovery, and said (sharing.holds)."""
        added, self.added = self.added, []
        if added and fence.fenced(self.host.name):
            for dst, _ in added:
                HOLDS.leave(f"the bench route to {dst} (in the bench's journal)")
            return
        failed: list[str] = []
        interrupted: BaseException | None = None
        for dst, entry in reversed(added):
            last: BaseException | None = None
            for _attempt in range(2):
                try:
                    self.bench.probe("route", action="del", dst=dst, proto=SUITE_PROTO)
                    files.forget_undo(self.host, entry, self.timeout)
                    last = None
                    break
                except KeyboardInterrupt as exc:
                    interrupted, last = interrupted or exc, exc
                except LabError as exc:
                    last = exc
            if last is not None:
                failed.append(f"{dst}: {type(last).__name__}: {last}")
                log.error("%s: route %s not removed (its journal entry stays for the next run's recovery): %s",
                          self.bench.name, dst, last)
        if interrupted is not None:
            raise interrupted
        if failed:
            raise LabError(f"{self.bench.name}: route(s) not removed, left to the next run's recovery: "
                           + "; ".join(failed))

    def __enter__(self) -> BenchRoutes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove_all()

