"""What dead runs left on the lab, undone by the next run, and said out loud (issue 55).

Why: every change the suite makes is journalled where it is made -- an appliance's files,
routes and SAs (the tunnel's journal), its driver under test (the driver's journal, under
the deployment's own lease), the bench's routes (the bench's journal) -- so a run killed
anywhere leaves the recipe for undoing it. Two holes were left: the driver's journal was
recovered only by a next run with ``--driver`` (a nightly of the installed driver measured
a dead run's candidate under its md5, unnoticed), and the bench's routes were not
journalled. And every recovery was silent: nobody could tell from a page that the lab had
been found in a dead run's state, whose, or what was undone.

So :func:`recover_at_start` runs at the start of every run (the pytest glue,
ipsec_hil.recovery_plugin: after the bench's lease is taken, before preflight reads the
appliances' driver builds), whatever the run's options:

1. the bench's journal, under the bench's lease (the caller holds it);
2. each appliance's tunnel journal, for the appliances whose lease is free or a dead run's
   (a live run's appliance is recovered when this run's tunnel takes its lease:
   ``Lab.recover_once`` records into the same :data:`FOUND`);
3. each appliance's driver journal, under the deployment's lease
   (ipsec_hil.lab.driver.DRIVER_LOCK_PATH: a live run's build under test is never undone,
   a dead run's always, once its lease is taken over) and the appliance's lease (the module
   is reloaded: no tunnel of another run runs over it) -- after the tunnels, so a dead
   run's SAs are ended before its module is unloaded.

Each recovery is recorded in :data:`FOUND` (one per process, as ``sharing.holds.HOLDS``): on
which host, from which journal, whose run it was (the dead holder's lease record when this
run took it over, and the journal's writers: run id, machine, pid, first change), the step
it died after (its last journalled change), what was undone and, for a driver, the module
now loaded. :class:`Found` says it as one line (the page's first screen, the terminal),
Allure environment values, and -- when a recovery could not finish -- the message the run
stops with, naming what is left; the page's section is rendered from it in reporting/
(ipsec_hil.lab.reporting.sections.dead_runs: the Markdown is spelled there only).

Library code: no pytest.
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from ipsec_hil.lab import files
from ipsec_hil.lab.driver import DRIVER_JOURNAL_DIR, DRIVER_LOCK_PATH, recover_driver
from ipsec_hil.lab.errors import LabError, TransportError
from ipsec_hil.lab.provision.recovery import recover_ends
from ipsec_hil.lab.sharing.lock import ApplianceLock, LockHeld, LockInfo, lease_seconds
from ipsec_hil.lab.traffic.bench_routes import bench_journal_dir

log = logging.getLogger(__name__)

__all__ = ["Undone", "Found", "FOUND", "recover_at_start", "recover_tunnel_journals", "recover_dead_driver",
           "recover_bench"]

#: which journal, in words
JOURNALS = {"driver": "driver under test", "tunnel": "tunnel", "bench": "bench"}


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


@dataclass(frozen=True)
class Undone:
    """One host's journal, found holding a dead run's state and undone."""

    host: str
    journal: str  # a key of JOURNALS
    lines: tuple[str, ...]  # what was undone, the recovery's own words
    #: the dead run, as one key: ``pid N on MACHINE`` (its lease record's, else its journal's)
    run: str = ""
    #: when it started, as far as its lease or journal knows (0: not known)
    since: float = 0.0
    dead: tuple[str, ...] = ()  # whose run, in words: the lease's record of it, the journal's writers
    died_after: str = ""  # its last journalled change ("": not known)
    now: str = ""  # the state after, where it matters (the driver: md5, size, loaded)
    md5: str = ""  # the driver's md5 after (the driver journal)

    def short(self) -> str:
        """``driver restored: md5 4e69f85b, loaded`` / ``3 tunnel changes`` / ``1 route``."""
        n = len(self.lines)
        if self.journal == "driver":
            return f"driver restored: md5 {self.md5[:8] or '?'}" + (", loaded" if self.now.endswith(", loaded")
                                                                        else ", NOT loaded" if self.now else "")
        if self.journal == "bench":
            return f"{n} route(s)" if all("route" in line for line in self.lines) else f"{n} change(s)"
        return f"{n} tunnel change(s)"

    def undone_lines(self) -> tuple[str, ...]:
        """What was undone, each line once without the recovery's own ``undone: `` prefix
        (the page says "undone:" itself: ipsec_hil.lab.reporting.sections.dead_runs)."""
        return tuple(_undone(line) for line in self.lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Undone:
        return cls(str(d["host"]), str(d["journal"]), tuple(d.get("lines", ())), str(d.get("run", "")),
                   float(d.get("since", 0.0)), tuple(d.get("dead", ())), str(d.get("died_after", "")),
                   str(d.get("now", "")), str(d.get("md5", "")))


def _undone(line: str) -> str:
    """A recovery's report line without its own ``undone: `` prefix (files.recover's undo lines)."""
    return line[len("undone: "):] if line.startswith("undone: ") else line


@dataclass
class Found:
    """What this run found of dead runs, and did about it (see the module's docstring)."""

    undone: list[Undone] = field(default_factory=list)
    #: recoveries that could not finish: "HOST, JOURNAL journal: why; left: ..."
    left: list[str] = field(default_factory=list)
    #: said, not undone: a host in use by a live run, a live run's build under test, a host
    #: not reachable (preflight then says why)
    notes: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, u: Undone) -> None:
        with self._lock:
            self.undone.append(u)
        log.warning("%s: a dead run's state undone (%s journal): %s", u.host, u.journal, "; ".join(u.lines))

    def fail(self, text: str) -> None:
        with self._lock:
            self.left.append(text)
        log.error("recovery incomplete: %s", text)

    def note(self, text: str) -> None:
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)

    def clear(self) -> None:
        with self._lock:
            self.undone, self.left, self.notes = [], [], []

    def __bool__(self) -> bool:
        return bool(self.undone or self.left or self.notes)

    # ------------------------------------------------------------ said

    def runs(self) -> dict[str, list[Undone]]:
        """The undone journals by dead run (its key, ``pid N on MACHINE``), in the order found."""
        out: dict[str, list[Undone]] = {}
        for u in self.undone:
            out.setdefault(u.run or "a run not recorded", []).append(u)
        return out

    def _run_line(self, run: str, undone: list[Undone]) -> str:
        since = min((u.since for u in undone if u.since), default=0.0)
        hosts: dict[str, list[str]] = {}
        for u in sorted(undone, key=lambda u: ORDER.index(u.journal)):
            hosts.setdefault(u.host, []).append(u.short())
        what = "; ".join(f"{h}: {', '.join(parts)}" for h, parts in hosts.items())
        return f"{run}" + (f", started {_when(since)}" if since else "") + f" -- {what}"

    def line(self) -> str | None:
        """The one line for the first screen and the terminal, or None when nothing was found."""
        if not self.undone and not self.left:
            return None
        out = []
        runs = self.runs()
        if runs:
            out.append(("Found a dead run's state and undid it before measuring" if len(runs) == 1 else
                        f"Found {len(runs)} dead runs' state and undid it before measuring")
                       + ": " + " | ".join(self._run_line(r, us) for r, us in runs.items())
                       + ". Details: \"Recovered from dead runs\" below.")
        if self.left:
            out.append(f"RECOVERY INCOMPLETE: {len(self.left)} journal(s) still hold a dead run's state "
                       f"({'; '.join(t.split(':', 1)[0] for t in self.left)}).")
        return " ".join(out)

    def terminal_lines(self) -> list[str]:
        out = [f"recovery: {u.host}, {JOURNALS[u.journal]} journal, of {u.run or 'a run not recorded'}: {u.short()}"
               + (f"; it died after: {u.died_after}" if u.died_after else "") for u in self.undone]
        out += [f"recovery INCOMPLETE: {t}" for t in self.left]
        out += [f"recovery: {t}" for t in self.notes]
        return out

    def environment(self) -> dict[str, str]:
        if not self:
            return {}
        env = {"recovery.found": f"{len(self.undone)} journal(s) of {len(self.runs())} dead run(s) undone"
               + (f", {len(self.left)} NOT" if self.left else "")}
        for u in self.undone:
            key = f"recovery.{u.host}.{u.journal}"
            env[key] = f"{len(u.lines)} change(s) undone; dead run {u.run or 'not recorded'}"
            if u.died_after:
                env[key + ".died_after"] = u.died_after
            if u.now:
                env[key + ".now"] = u.now
        for i, t in enumerate(self.left, 1):
            env[f"recovery.left.{i}"] = t
        return env

    def stop_message(self) -> str | None:
        """The message a run ends with when a recovery could not finish (what is left)."""
        if not self.left:
            return None
        return ("recovery of a dead run's state could not finish; what is left: " + " | ".join(self.left)
                + ". The journals keep it: fix the cause, then run again (the next run recovers it first).")

    # ------------------------------------------------------------ between processes (xdist)

    def to_list(self) -> dict[str, list]:
        return {"undone": [u.to_dict() for u in self.undone], "left": list(self.left), "notes": list(self.notes)}

    def merge(self, data: dict[str, list]) -> None:
        for d in data.get("undone", []):
            u = Undone.from_dict(d)
            if u not in self.undone:
                self.add(u)
        for t in data.get("left", []):
            if t not in self.left:
                self.fail(t)
        for t in data.get("notes", []):
            self.note(t)


#: the order a host's journals are said in
ORDER = ("driver", "tunnel", "bench")


#: the process's record (the controller's, or an xdist worker's, sent to the controller)
FOUND = Found()


# ------------------------------------------------------------------ describing a dead run


def pending_entries(host: Any, journal_dir: str, timeout: float = 60) -> list[files.JournalEntry]:
    """Every entry of a journal (files and undos), oldest first."""
    entries: list[files.JournalEntry] = [*files.pending(host, journal_dir, timeout),
                                         *files.pending_undos(host, journal_dir, timeout)]
    return sorted(entries, key=lambda e: (e.created, e.journal_path))


def whose(entries: Iterable[files.JournalEntry], took_over: LockInfo | None = None) -> tuple[str, float, tuple[str, ...]]:
    """Whose run the entries are: (its key ``pid N on MACHINE``, when it started as far as
    known, its descriptions). The dead holder's lease record comes first when this run took
    the lease over from it (holder, run id, since when it held it), then each writer the
    journal names (run id, machine, pid) with its first change's time."""
    keys: list[str] = []
    starts: list[float] = []
    words: list[str] = []
    if took_over is not None:
        keys.append(f"pid {took_over.pid} on {took_over.host}")
        starts.append(took_over.time)
        words.append(f"{took_over.holder} (run {took_over.run_id or '-'}), holding its lease since "
                     f"{_when(took_over.time)}")
    first: dict[str, files.JournalEntry] = {}
    for e in entries:
        first.setdefault(e.writer(), e)
    for w, e in first.items():
        if e.pid:
            keys.append(f"pid {e.pid} on {e.machine.rpartition('@')[2] or '?'}")
        if e.created:
            starts.append(e.created)
        words.append(f"its journal: {w}, first change {_when(e.created)}" if e.created else f"its journal: {w}")
    unique = list(dict.fromkeys(keys))
    return ("; ".join(unique) or "not recorded", min(starts, default=0.0), tuple(words))


def died_after(entries: list[files.JournalEntry]) -> str:
    """The last change a journal recorded: where the run was when it died (as far as its
    journal knows: a change is journalled before it is made)."""
    if not entries:
        return ""
    e = entries[-1]
    what = e.what if isinstance(e, files.UndoEntry) else f"backup of {getattr(e, 'path', '?')}"
    return f"{what} (journalled {_when(e.created)})" if e.created else what


def left_in(host: Any, journal_dir: str, timeout: float = 60) -> str:
    """What a journal still holds, in words (after a recovery that could not finish)."""
    try:
        entries = pending_entries(host, journal_dir, timeout)
    except LabError as exc:
        return f"unknown ({journal_dir} could not be read: {exc})"
    if not entries:
        return "nothing journalled (what failed is named above)"
    return "; ".join(e.describe() for e in entries)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ the three journals


def recover_tunnel_journals(apps: list[Any], *, took_over: dict[str, LockInfo | None] | None = None,
                            journal_dir: str = files.DEFAULT_JOURNAL_DIR, record: Found = FOUND,
                            timeout: float = 60) -> dict[str, list[str]]:
    """``provision.recovery.recover_ends`` on ``apps`` (call it holding each one's lease),
    each journal described first, each recovery recorded. An empty journal costs one round
    trip. A recovery that fails is recorded with what is left, and raised."""
    took_over = took_over or {}
    described: dict[str, list[files.JournalEntry]] = {}
    for app in apps:
        if files.journal_files(app.host, journal_dir, timeout):
            described[app.name] = pending_entries(app.host, journal_dir, timeout)
    todo = [a for a in apps if a.name in described]
    if not todo:
        return {a.name: [] for a in apps}
    try:
        done = recover_ends(todo, journal_dir, timeout)
    except LabError as exc:
        for app in todo:
            record.fail(f"{app.name}, tunnel journal: {exc}; left: {left_in(app.host, journal_dir, timeout)}")
        raise
    for app in todo:
        if done.get(app.name):
            entries = described[app.name]
            run, since, dead = whose(entries, took_over.get(app.name))
            record.add(Undone(app.name, "tunnel", tuple(done[app.name]), run, since, dead, died_after(entries)))
    return {a.name: done.get(a.name, []) for a in apps}


def _driver_traces(host: Any, timeout: float) -> bool:
    """Anything of a deployment on ``host``: its journal's files or its lease file (a run
    killed between taking the lease and its backup left only the lease; taking it over
    removes it). One round trip."""
    q = shlex.quote
    r = host.run(f"j={q(DRIVER_JOURNAL_DIR)}; l={q(DRIVER_LOCK_PATH)}\n"
                 + '[ -e "$l" ] && echo lease\n[ -d "$j" ] && ls -A "$j"\ntrue\n', timeout=timeout)
    r.check(f"look for a deployment's journal and lease ({DRIVER_JOURNAL_DIR})")
    return bool(r.stdout.strip())



def _taken(lock: ApplianceLock, record: Any, live: str) -> bool:
    """Acquire ``lock``; False when a live run holds it, noted on ``record`` as ``live``
    with ``{who}`` the holder's description."""
    try:
        lock.acquire()
    except LockHeld as exc:
        record.note(live.format(who=exc.holder.describe() if exc.holder else "an unreadable lease record"))
        return False
    return True

def recover_dead_driver(app: Any, *, holder: str, run_id: str = "", lease_wait: float | None = None,
                        lock_wait: float = 600, record: Found = FOUND, timeout: float = 120) -> None:
    """The driver journal of ``app``, if a dead run's: its module put back and reloaded.

    The deployment's lease decides whose the journal is: free or taken over from a dead
    holder (waiting up to ``lease_wait`` s, default one lease, so a run killed on another
    machine is dead by then) -- recovered, holding the appliance's lease too (wait
    ``lock_wait``: the reload must not run under another run's tunnel); held by a live run
    -- its build under test, said and left alone."""
    if not _driver_traces(app.host, timeout):
        return
    wait = lease_seconds() + 2 if lease_wait is None else lease_wait
    lease = ApplianceLock(app.host, f"{holder} (recovery of a dead run's driver)", path=DRIVER_LOCK_PATH,
                          run_id=run_id, wait=wait, poll=1)
    if not _taken(lease, record, f"{app.name}: its driver is the build under test of a live run ({{who}}), not a "
                                 "dead run's: left alone; this run measures that build (its md5 is on the page)"):
        return
    try:
        try:
            lock = ApplianceLock(app.host, holder, run_id=run_id, wait=lock_wait, poll=2)
            lock.acquire()
        except LockHeld as exc:
            record.fail(f"{app.name}, driver journal: a dead run's build under test is loaded, and the appliance "
                        f"stayed in use by another run for {lock_wait:g} s ({exc}); left: "
                        + left_in(app.host, DRIVER_JOURNAL_DIR, timeout))
            return
        try:
            entries = pending_entries(app.host, DRIVER_JOURNAL_DIR, timeout)
            try:
                lines = recover_driver(app, timeout=timeout)
            except LabError as exc:
                record.fail(f"{app.name}, driver journal: {exc}; left: {left_in(app.host, DRIVER_JOURNAL_DIR, timeout)}")
                return
            info = app.module_info()
            now = (f"{info.name} md5 {info.md5 or 'absent'}, "
                   + (f"{info.size:,} bytes, " if info.size is not None else "")
                   + ("loaded" if info.loaded else "NOT loaded"))
            if lines:
                run, since, dead = whose(entries, lease.took_over or lock.took_over)
                record.add(Undone(app.name, "driver", tuple(lines), run, since, dead, died_after(entries), now,
                                  info.md5 or ""))
        finally:
            lock.release()
    finally:
        lease.release()


def recover_bench(host: Any, *, took_over: LockInfo | None = None, record: Found = FOUND,
                  timeout: float = 60) -> None:
    """The bench's journal (its routes; call it holding the bench's lease)."""
    journal = bench_journal_dir(host)
    if not files.journal_files(host, journal, timeout):
        return
    entries = pending_entries(host, journal, timeout)
    try:
        lines = files.recover(host, journal, timeout)
    except LabError as exc:
        record.fail(f"{host.name}, bench journal: {exc}; left: {left_in(host, journal, timeout)}")
        return
    if lines:
        run, since, dead = whose(entries, took_over)
        record.add(Undone(host.name, "bench", tuple(lines), run, since, dead, died_after(entries)))


def recover_at_start(lab: Any, *, holder: str, run_id: str, bench_host: Any = None,
                     bench_took_over: LockInfo | None = None, record: Found = FOUND,
                     lease_wait: float | None = None) -> Found:
    """A run's first act on the lab (see the module's docstring): the bench's journal (the
    caller holds the bench's lease), the tunnel journals of the appliances whose lease is
    free or a dead run's, then every appliance's driver journal. ``lab`` is a
    :class:`ipsec_hil.lab.live_lab.Lab`. Returns ``record``; its ``left`` is not empty when
    a recovery could not finish (the caller stops the run)."""
    if bench_host is not None:
        try:
            recover_bench(bench_host, took_over=bench_took_over, record=record)
        except TransportError as exc:
            record.note(f"{bench_host.name}: its journal could not be read: {exc}")
        except LabError as exc:
            record.fail(f"{bench_host.name}, bench journal: {exc}")
    held: list[tuple[Any, ApplianceLock]] = []
    took: dict[str, LockInfo | None] = {}
    try:
        for app in lab.appliances.values():
            lk = ApplianceLock(app.host, holder, run_id=run_id, wait=0)
            try:
                if not _taken(lk, record, f"{app.name}: in use by a live run ({{who}}): its tunnel journal is "
                                          "recovered when this run's tunnel takes its lease"):
                    continue
            except TransportError as exc:
                record.note(f"{app.name}: not checked for a dead run's tunnel: {exc}")
                continue
            except LabError as exc:
                record.fail(f"{app.name}, tunnel journal: its lease could not be taken: {exc}")
                continue
            held.append((app, lk))
            took[app.name] = lk.took_over
        apps = [app for app, _ in held]
        if apps:
            try:
                lab.recover_once(*apps, took_over=took)
            except LabError as exc:  # the caller stops the run: recorded with what is left
                if not any(str(exc) in t for t in record.left):  # (not yet by recover_tunnel_journals)
                    record.fail(f"{', '.join(a.name for a in apps)}, tunnel journals: {exc}")
    finally:
        for _, lk in reversed(held):
            lk.release()
    # the drivers after the tunnels: a dead run's SAs are ended before its module is unloaded
    # (an offload driver may refuse to unload under SAs it holds)
    for app in lab.appliances.values():
        try:
            recover_dead_driver(app, holder=holder, run_id=run_id, lease_wait=lease_wait, record=record)
        except TransportError as exc:  # not reachable: preflight, next, says so and why
            record.note(f"{app.name}: not checked for a dead run's driver: {exc}")
        except LabError as exc:
            record.fail(f"{app.name}, driver journal: {exc}")
    return record
