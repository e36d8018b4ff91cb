"""File transactions on a Host: backup with sha256, journal on the host, verified restore.

Why on the host: a run can die anywhere (power, Ctrl-C, lost link). The backup copy and
a JSON journal entry live on the appliance itself (default /var/db/ipsec-hil/journal),
so the next run -- from any machine -- finds what a dead run changed and restores it
before touching anything (`recover`). Every step is a POSIX sh script through
Host.run (never csh), with every path quoted by shlex.quote; checksums are computed on
the host (`sha256 -q` on FreeBSD, `sha256sum` on Linux), never trusted from the client.

The journal directory is 0700: backups of swanctl.conf hold pre-shared keys. File
contents are never logged.

Library code: no pytest import.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import shlex
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, TypeVar

from ipsec_hil.lab.errors import LabError, ParseError, ProvisionError, TransportError
from ipsec_hil.lab.remote import Host

log = logging.getLogger(__name__)

DEFAULT_JOURNAL_DIR = "/var/db/ipsec-hil/journal"

#: sh function printing the sha256 (hex) of "$1": FreeBSD's sha256 -q, else sha256sum.
SHA256_FN = (
    "_sha256() {\n"
    "  if command -v sha256 >/dev/null 2>&1; then sha256 -q \"$1\"\n"
    "  elif command -v sha256sum >/dev/null 2>&1; then sha256sum < \"$1\" | cut -d ' ' -f 1\n"
    "  else echo 'neither sha256 nor sha256sum found' >&2; return 127; fi\n"
    "}\n"
)

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def whoami() -> str:
    """``user@machine`` of this process (who wrote a journal entry, who holds a lease)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 -- no user name (a container without one): the uid
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True, kw_only=True)
class JournalEntry:
    """Where an entry lies in the host's journal, which run wrote it, when and on which host
    (what every kind of entry has; a dead run's entries are recovered by the next run), and
    from which machine and process (``machine``: user@machine, ``pid``): the next run says
    whose state it undid (ipsec_hil.lab.dead_runs)."""

    journal_path: str
    run_id: str
    created: float = field(default_factory=time.time)
    host: str = ""
    machine: str = field(default_factory=whoami)
    pid: int = field(default_factory=os.getpid)

    def writer(self) -> str:
        """``run R of user@machine (pid N)`` as the entry records it (older entries: the run only)."""
        who = f" of {self.machine}" if self.machine else ""
        pid = f" (pid {self.pid})" if self.pid else ""
        return f"run {self.run_id}{who}{pid}"


@dataclass(frozen=True)
class Backup(JournalEntry):
    """One file saved before a change. `sha256`/`size` describe the original (None/0 if
    it did not exist); `backup_path` is the copy on the host; `journal_path` the entry."""

    path: str
    existed: bool
    sha256: str | None
    size: int
    backup_path: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> "Backup":
        d = _journal_object(text, where, "journal entry", {"path": str, "existed": bool, "size": int,
                                                           "backup_path": str, "journal_path": str, "run_id": str})
        if d["existed"] and not (isinstance(d.get("sha256"), str) and _HEX64.match(d["sha256"])):
            raise ParseError(where, 1, text, "journal entry field sha256: expected 64 hex digits")
        return cls(path=d["path"], existed=d["existed"], sha256=d.get("sha256"), size=d["size"],
                   backup_path=d["backup_path"], journal_path=d["journal_path"], run_id=d["run_id"],
                   **_stamp(d))

    def describe(self) -> str:
        state = f"{self.size} bytes, sha256 {self.sha256}" if self.existed else "absent before"
        return f"{self.path} ({state}; backed up {_when(self.created)} by run {self.run_id})"


def _journal_object(text: str, where: str, kind: str, want: dict[str, type]) -> dict[str, Any]:
    """A journal file's JSON object whose ``want`` fields have their types; a ParseError
    naming the file and the field otherwise (a damaged journal must not be half-applied)."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(where, 1, text, f"{kind} is not JSON ({e})") from e
    if not isinstance(d, dict):
        raise ParseError(where, 1, text, f"{kind}: expected an object, found {type(d).__name__}")
    for k, t in want.items():
        if not isinstance(d.get(k), t):
            raise ParseError(where, 1, text, f"{kind} field {k}: expected {t.__name__}, found {d.get(k)!r}")
    return d


def _stamp(d: dict[str, Any]) -> dict[str, Any]:
    """When, on which host, from which machine and process a journal entry was written
    (optional in older entries)."""
    try:
        pid = int(d.get("pid", 0) or 0)
    except (TypeError, ValueError):
        pid = 0
    return {"created": float(d.get("created", 0.0)), "host": str(d.get("host", "")),
            "machine": str(d.get("machine", "")), "pid": pid}


def _when(created: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(created))


def _q(s: str) -> str:
    return shlex.quote(s)


def _kv(stdout: str, host: str, what: str) -> dict[str, str]:
    """Parse `key=value` lines our own scripts print."""
    out: dict[str, str] = {}
    for n, line in enumerate(stdout.splitlines(), 1):
        if "=" not in line:
            raise ParseError(f"{host}: {what}", n, line, "expected key=value")
        k, v = line.split("=", 1)
        out[k] = v
    return out


def remote_sha256(host: Host, path: str, timeout: float = 60) -> str | None:
    """sha256 of a file on the host, or None if it does not exist."""
    r = host.run(SHA256_FN + f"p={_q(path)}\n[ -e \"$p\" ] || exit 3\n_sha256 \"$p\"\n", timeout=timeout)
    if r.status == 3:
        return None
    r.check(f"sha256 of {path}")
    digest = r.stdout.strip()
    if not _HEX64.match(digest):
        raise ParseError(f"{host.name}: sha256 of {path}", 1, digest, "expected 64 hex digits")
    return digest


def backup(host: Host, path: str, journal_dir: str = DEFAULT_JOURNAL_DIR, run_id: str = "manual",
           timeout: float = 60) -> Backup:
    """Copy `path` (cp -p) into the journal dir, checksum it, and record a journal entry.

    Returns only after the entry exists: from then on a dead run is recoverable.
    A missing file is recorded too (restore then removes whatever was created).
    """
    if not path.startswith("/"):
        raise ProvisionError(f"{host.name}: backup needs an absolute path, got {path!r}")
    stamp = f"{time.time_ns()}-{_SAFE.sub('_', run_id)[:40]}-{os.urandom(3).hex()}"
    stem = f"{journal_dir}/{stamp}-{_SAFE.sub('_', os.path.basename(path))[:60]}"
    bpath, jpath = stem + ".bak", stem + ".json"
    try:
        return _backup(host, path, journal_dir, run_id, timeout, bpath, jpath)
    except BaseException:
        # Interrupted (Ctrl-C, a cut connection) between the copy and the journal entry:
        # the file itself is not changed yet, so the half-made copy and entry are dropped
        # (an orphan copy would hold a PSK; an entry without its copy would fail recovery).
        try:
            host.run(argv_rm(bpath, jpath, jpath + ".tmp"), timeout=timeout)
        except Exception as e:  # noqa: BLE001 -- the original error is the one to report
            log.warning("%s: could not remove the unfinished backup %s: %s", host.name, bpath, e)
        raise


def _backup(host: Host, path: str, journal_dir: str, run_id: str, timeout: float, bpath: str,
            jpath: str) -> Backup:
    r = host.run(
        SHA256_FN
        + f"p={_q(path)}; j={_q(journal_dir)}; b={_q(bpath)}\n"
        + "umask 077\n"
        + 'mkdir -p "$j" && chmod 700 "$j" || exit 4\n'
        + 'if [ ! -e "$p" ] && [ ! -L "$p" ]; then echo existed=0; exit 0; fi\n'
        + '[ -f "$p" ] || { echo "$p: not a regular file" >&2; exit 5; }\n'
        + 'cp -p "$p" "$b" || exit 6\n'
        + 'a=$(_sha256 "$p") && c=$(_sha256 "$b") || exit 7\n'
        + '[ "$a" = "$c" ] || { echo "$p changed while being copied" >&2; rm -f "$b"; exit 8; }\n'
        + 'echo existed=1; echo sha256=$c; echo size=$(wc -c < "$b" | tr -d " ")\n',
        timeout=timeout,
    )
    r.check(f"backup of {path}")
    kv = _kv(r.stdout, host.name, f"backup of {path}")
    existed = kv.get("existed") == "1"
    digest = kv.get("sha256") if existed else None
    if existed and not (digest and _HEX64.match(digest) and kv.get("size", "").isdigit()):
        raise ParseError(f"{host.name}: backup of {path}", 1, r.stdout, "expected existed=1, sha256=HEX, size=N")
    b = Backup(path=path, existed=existed, sha256=digest, size=int(kv.get("size", "0")),
               backup_path=bpath if existed else "", journal_path=jpath, run_id=run_id,
               host=host.name)
    # The entry is written to a temp name and renamed: a half-written entry never exists.
    host.run(
        "umask 077\n"
        + f"printf '%s\\n' {_q(b.to_json())} > {_q(jpath + '.tmp')} && mv -f {_q(jpath + '.tmp')} {_q(jpath)}\n",
        timeout=timeout,
    ).check(f"journal entry for {path}")
    log.info("%s: backed up %s", host.name, b.describe())
    return b


def verify(host: Host, b: Backup, timeout: float = 60) -> bool:
    """True if the backup copy on the host still has the recorded sha256 (or, for a file
    that did not exist, there is nothing to verify)."""
    if not b.existed:
        return True
    return remote_sha256(host, b.backup_path, timeout) == b.sha256


def restore(host: Host, b: Backup, timeout: float = 60) -> None:
    """Put the original back atomically (copy next to it, then rename over it), or
    remove the file if it did not exist before. Checks the result's sha256 on the host.
    The journal entry is kept; `discard` removes it."""
    p = _q(b.path)
    if b.existed:
        tmp = _q(f"{os.path.dirname(b.path)}/.{os.path.basename(b.path)}.restore-{os.urandom(4).hex()}")
        r = host.run(
            SHA256_FN
            + f"p={p}; b={_q(b.backup_path)}; t={tmp}; want={_q(b.sha256 or '')}\n"
            # the copy gone and the file already the original: restored and discarded by
            # a step whose answer was lost (an interrupt), so restoring again is a no-op
            + '[ -f "$b" ] || { [ -f "$p" ] && [ "$(_sha256 "$p")" = "$want" ] && exit 0; '
            + 'echo "backup copy $b is missing" >&2; exit 3; }\n'
            + '[ "$(_sha256 "$b")" = "$want" ] || { echo "backup copy $b does not match its recorded sha256" >&2; exit 4; }\n'
            + 'cp -p "$b" "$t" && mv -f "$t" "$p" || { rm -f "$t"; exit 5; }\n'
            + 'got=$(_sha256 "$p")\n'
            + '[ "$got" = "$want" ] || { echo "restored $p has sha256 $got, expected $want" >&2; exit 6; }\n',
            timeout=timeout,
        )
    else:
        r = host.run(f"p={p}\nrm -f \"$p\"\n[ ! -e \"$p\" ] || {{ echo \"cannot remove $p\" >&2; exit 6; }}\n",
                     timeout=timeout)
    if r.status != 0:
        raise ProvisionError(f"{host.name}: restore of {b.path} failed (status {r.status}): "
                             f"{r.stderr.strip()[-500:]}; journal entry kept at {b.journal_path}")
    log.info("%s: restored %s", host.name, b.describe())


def discard(host: Host, b: Backup, timeout: float = 60) -> None:
    """Forget a backup: remove its journal entry and copy (after restore, or to keep the
    change deliberately)."""
    host.run(argv_rm(b.journal_path, b.backup_path), timeout=timeout).check(f"discard journal entry for {b.path}")


def argv_rm(*paths: str) -> str:
    return "rm -f " + " ".join(_q(p) for p in paths if p) + "\n"


def pending(host: Host, journal_dir: str = DEFAULT_JOURNAL_DIR, timeout: float = 60) -> list[Backup]:
    """Every journal entry on the host, oldest first."""
    return _read_journal(host, journal_dir, ".json", Backup.from_json, f"list journal {journal_dir}", timeout)


_Entry = TypeVar("_Entry", bound=JournalEntry)


def _read_journal(host: Host, journal_dir: str, suffix: str, parse: Callable[[str, str], _Entry], what: str,
                  timeout: float) -> list[_Entry]:
    """The first line of every ``*suffix`` file in the journal, parsed, oldest first."""
    r = host.run(
        f"j={_q(journal_dir)}\n"
        + '[ -d "$j" ] || exit 0\n'
        + f'for f in "$j"/*{suffix}; do [ -f "$f" ] || continue; printf "%s\\t" "$f"; head -n 1 "$f"; done\n',
        timeout=timeout,
    ).check(what)
    entries = []
    for line in r.stdout.splitlines():
        fname, _, text = line.partition("\t")
        entries.append(parse(text, f"{host.name}:{fname}"))
    entries.sort(key=lambda e: (e.created, e.journal_path))
    return entries


@dataclass(frozen=True)
class UndoEntry(JournalEntry):
    """A change that is not a file (a route, an interface flag, an address) and the sh
    script that reverts it, journalled on the host BEFORE the change is made: a run killed
    right after the change still leaves the recipe for the next run's `recover`. The
    script must be idempotent (reverting what is already reverted is not an error)."""

    what: str
    script: str

    @classmethod
    def from_json(cls, text: str, where: str) -> "UndoEntry":
        d = _journal_object(text, where, "undo entry", dict.fromkeys(("what", "script", "journal_path", "run_id"), str))
        return cls(what=d["what"], script=d["script"], journal_path=d["journal_path"], run_id=d["run_id"], **_stamp(d))

    def describe(self) -> str:
        return f"{self.what} (journalled {_when(self.created)} by run {self.run_id})"


UNDO_SUFFIX = ".undo"


def journal_undo(host: Host, what: str, script: str, journal_dir: str = DEFAULT_JOURNAL_DIR,
                 run_id: str = "manual", timeout: float = 60) -> UndoEntry:
    """Record how to revert a change about to be made (call it BEFORE the change)."""
    stamp = f"{time.time_ns()}-{_SAFE.sub('_', run_id)[:40]}-{os.urandom(3).hex()}"
    e = UndoEntry(what=what, script=script, journal_path=f"{journal_dir}/{stamp}{UNDO_SUFFIX}",
                  run_id=run_id, host=host.name)
    text = json.dumps(asdict(e), sort_keys=True)
    try:
        host.run(
            "umask 077\n"
            + f"j={_q(journal_dir)}\n"
            + 'mkdir -p "$j" && chmod 700 "$j" || exit 4\n'
            + f"printf '%s\\n' {_q(text)} > {_q(e.journal_path + '.tmp')} && mv -f {_q(e.journal_path + '.tmp')} {_q(e.journal_path)}\n",
            timeout=timeout,
        ).check(f"journal undo entry for {what}")
    except BaseException:
        # Interrupted (Ctrl-C, a cut connection) with the entry perhaps written and its
        # answer lost: the change is not made yet (the caller journals BEFORE it), so the
        # entry is dropped; left, it would outlive a run that restored everything else
        # (found by tests/safety/test_every_step.py). If the rm fails too, the entry stays
        # for the next recovery, whose script is idempotent.
        try:
            host.run(argv_rm(e.journal_path, e.journal_path + ".tmp"), timeout=timeout)
        except Exception as exc:  # noqa: BLE001 -- the original error is the one to report
            log.warning("%s: could not remove the unfinished undo entry %s: %s", host.name, e.journal_path, exc)
        raise
    return e


def forget_undo(host: Host, e: UndoEntry, timeout: float = 60) -> None:
    """The change was reverted (or never made): drop its entry."""
    host.run(argv_rm(e.journal_path), timeout=timeout).check(f"discard undo entry for {e.what}")


def pending_undos(host: Host, journal_dir: str = DEFAULT_JOURNAL_DIR, timeout: float = 60) -> list[UndoEntry]:
    """Every undo entry on the host, oldest first."""
    return _read_journal(host, journal_dir, UNDO_SUFFIX, UndoEntry.from_json, f"list undo journal {journal_dir}",
                         timeout)


def journal_files(host: Host, journal_dir: str = DEFAULT_JOURNAL_DIR, timeout: float = 60) -> list[str]:
    """The names of every file in the journal (entries, copies, unfinished ones); empty when
    there is none or no journal. One round trip, taking no lock: whether a dead run may have
    left something, before waiting for any lease to find out whose it is."""
    r = host.run(f"j={_q(journal_dir)}\n" + '[ -d "$j" ] || exit 0\nls -A "$j"\n', timeout=timeout).check(
        f"list journal {journal_dir}")
    return [line for line in r.stdout.splitlines() if line]


def recover(host: Host, journal_dir: str = DEFAULT_JOURNAL_DIR, timeout: float = 60) -> list[str]:
    """Undo everything dead runs left: first their journalled non-file changes (routes,
    interface flags; newest first), then their files, newest first (so the oldest backup
    of a file wins), and remove their entries. Returns one line per reverted change for
    the report. Call it while holding the appliance lock. If some step fails, the others
    are still done and a ProvisionError lists the failures (their entries are kept)."""
    done: list[str] = []
    failed: list[str] = []
    for u in reversed(pending_undos(host, journal_dir, timeout)):
        try:
            host.run(u.script, timeout=timeout).check(f"undo {u.what}")
            forget_undo(host, u, timeout)
            done.append(f"undone: {u.describe()}")
        except Exception as e:  # noqa: BLE001 -- collect, then report all
            failed.append(f"{u.what}: {e}")
    for b in reversed(pending(host, journal_dir, timeout)):
        try:
            restore(host, b, timeout)
            discard(host, b, timeout)
            done.append(b.describe())
        except Exception as e:  # noqa: BLE001 -- collect, then report all
            failed.append(f"{b.path}: {e}")
    try:
        done += [f"removed {p} (a backup or entry a killed run left unfinished; its file was not changed yet)"
                 for p in _remove_unfinished(host, journal_dir, timeout)]
    except Exception as e:  # noqa: BLE001 -- collect, then report all
        failed.append(f"unfinished journal files: {e}")
    if failed:
        raise ProvisionError(f"{host.name}: recovery incomplete; restored {len(done)}, failed:\n  "
                             + "\n  ".join(failed))
    if done:
        log.warning("%s: recovered %d change(s) a dead run left:\n  %s", host.name, len(done),
                    "\n  ".join(done))
    return done


def _remove_unfinished(host: Host, journal_dir: str, timeout: float) -> list[str]:
    """Remove what a run killed inside :func:`backup` or :func:`journal_undo` left: a copy
    ``X.bak`` without its entry ``X.json`` (SIGKILL between the copy and the entry) and any
    ``*.tmp`` entry never renamed into place. The original was not changed yet -- a caller
    changes a file only after ``backup`` returned, a route only after ``journal_undo`` did
    -- so there is nothing to restore, but the copy may hold a secret (a PSK) and no later
    recovery would ever read it (found by tests/safety/test_every_step.py: SIGKILL at every
    step). Call it holding the appliance lock, as :func:`recover` is."""
    r = host.run(
        f"j={_q(journal_dir)}\n"
        + '[ -d "$j" ] || exit 0\n'
        + 'for f in "$j"/*.bak "$j"/*.tmp; do\n'
        + '  [ -f "$f" ] || continue\n'
        + '  case "$f" in *.bak) [ -e "${f%.bak}.json" ] && continue ;; esac\n'
        + '  rm -f "$f" && echo "$f"\n'
        + 'done\n',
        timeout=timeout,
    ).check(f"remove unfinished journal files in {journal_dir}")
    return [line for line in r.stdout.splitlines() if line]


class Transaction:
    """`with Transaction(host, run_id) as tx: tx.backup(path); <change files>` -- on exit,
    normal or not (exceptions, KeyboardInterrupt), every backed-up file is restored
    (newest backup first) and the journal cleared. `keep=True` leaves the changes and the
    journal in place (logged loudly, so the next `recover` can still undo them)."""

    def __init__(self, host: Host, run_id: str, journal_dir: str = DEFAULT_JOURNAL_DIR,
                 keep: bool = False, timeout: float = 60) -> None:
        self.host = host
        self.run_id = run_id
        self.journal_dir = journal_dir
        self.keep = keep
        self.timeout = timeout
        self.backups: list[Backup] = []
        self.restored: list[str] = []

    def backup(self, path: str) -> Backup:
        for b in self.backups:
            if b.path == path:
                return b  # the first backup is the original state
        b = backup(self.host, path, self.journal_dir, self.run_id, self.timeout)
        self.backups.append(b)
        return b

    def __enter__(self) -> "Transaction":
        return self

    def rollback(self) -> list[str]:
        """Restore every backed-up file, newest first. What failed stays in ``backups``, so
        calling it again does the rest (restore and discard are idempotent); the error is a
        TransportError when a connection was lost (worth doing again on a new one), else a
        ProvisionError."""
        failed: list[str] = []
        left: list[Backup] = []
        lost = False
        for b in reversed(self.backups):
            try:
                restore(self.host, b, self.timeout)
                discard(self.host, b, self.timeout)
                self.restored.append(b.describe())
            except Exception as e:  # noqa: BLE001 -- try every file, then report
                failed.append(f"{b.path}: {e}")
                left.append(b)
                lost = lost or isinstance(e, TransportError)
        self.backups = left[::-1]
        if failed:
            error = TransportError if lost else ProvisionError
            raise error(f"{self.host.name}: rollback incomplete (journal kept for recover):\n  "
                        + "\n  ".join(failed))
        return self.restored

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self.keep:
            if self.backups:
                log.warning("%s: keep=True: NOT restoring %d file(s); journal left in %s for a later "
                            "recover:\n  %s", self.host.name, len(self.backups), self.journal_dir,
                            "\n  ".join(b.describe() for b in self.backups))
            return
        try:
            self.rollback()
        except LabError:
            if exc is None:
                raise
            log.error("%s: rollback failed while handling %s", self.host.name, type(exc).__name__,
                      exc_info=True)
            # the original exception propagates; the journal keeps what was not restored


def paths(backups: Iterable[Backup]) -> list[str]:
    return [b.path for b in backups]
