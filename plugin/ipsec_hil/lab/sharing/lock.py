"""One lease per appliance (and one on the bench), kept ON that host.

Why on the host and not a local file lock: two engineers (or two CI machines) driving the
same XGS would corrupt each other's swanctl.conf and counters; only the appliance itself
is shared by all of them. Creation is atomic with sh's noclobber (`set -C`, O_EXCL on
FreeBSD sh and dash); the file holds JSON naming the holder so a refusal can say who has it.

Why a lease: the record carries an expiry (``expires``, seconds since the epoch BY THE
HOST'S OWN CLOCK, so the machines' clocks never have to agree) that a renewal thread
(:class:`~ipsec_hil.lab.sharing.lease.LeaseKeeper`) pushes forward while the run lives. A holder on
ANY machine whose lease expired is dead and is taken over (logged on the host in
``<lock>.log``); a holder on THIS machine whose pid is gone is taken over at once (logged
by the taker only: an ordinary run and its recovery leave no file beside the lock). A run
whose record was replaced (broken by hand, or taken after its renewals failed for longer
than the lease) learns it at its next renewal and stops: :meth:`ApplianceLock.check`.

Breaking by hand (``python -m ipsec_hil.lab.sharing break``) records who and why, in the log and
in ``<lock>.broken``, which the next acquirer reads, logs and removes.

A record without ``expires`` (written before leases) never expires: it is still refused,
naming its holder, and ``break_if_older_than`` is the explicit opt-in to break it.

Library code: no pytest import.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ipsec_hil.lab.errors import LabError, TransportError
from ipsec_hil.lab.sharing.lease import DEFAULT_LEASE_S, LeaseKeeper, LeaseLost, Patience
from ipsec_hil.lab.remote import Host, fence

log = logging.getLogger(__name__)

#: Beside the backup journal: /var/db survives a crashed run (a stale lock is then seen and
#: named, never silently dropped), and in the virtual lab it is each appliance's own
#: directory, where /var/run is the machine's and would be shared by every appliance.
DEFAULT_LOCK_PATH = "/var/db/ipsec-hil/run.lock"
#: The bench is a Linux PC: /var/lib survives its reboots as /var/db does on FreeBSD.
BENCH_LOCK_PATH = "/var/lib/ipsec-hil/bench.lock"

#: Seconds of a lease when the caller names none: a test that must see a loss within
#: seconds sets it low for a whole run (its subprocesses included).
LEASE_ENV = "HIL_LEASE_SECONDS"

__all__ = ["ApplianceLock", "LockHeld", "LockInfo", "LeaseLost", "LeaseStatus",
           "DEFAULT_LOCK_PATH", "BENCH_LOCK_PATH", "LEASE_ENV", "bench_lock_path", "lease_seconds"]


def lease_seconds() -> float:
    """The default lease: ``$HIL_LEASE_SECONDS`` when set (at least 3: a lease is renewed
    three times per period), else :data:`DEFAULT_LEASE_S`."""
    raw = os.environ.get(LEASE_ENV, "").strip()
    if not raw:
        return DEFAULT_LEASE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1
    if not 3 <= value <= 86400:
        raise LabError(f"environment {LEASE_ENV}={raw!r}: expected seconds between 3 and 86400")
    return value


def bench_lock_path(host: Host, base: str = BENCH_LOCK_PATH) -> str:
    """The bench's lease file as ``host`` reaches it.

    Why not always :data:`BENCH_LOCK_PATH`: a virtual lab's bench is a network namespace
    of this machine sharing its file system, and several virtual labs run side by side
    (the fault matrix's parts, developers' labs): one file would make them wait for each
    other. A bench inside a namespace gets a file of its own (``bench.NETNS.lock``); a
    bench that is a whole machine (this one, or one over SSH) has the one file."""
    netns = getattr(host, "netns", None)
    if not netns:
        return base
    d, name = os.path.split(base)
    stem, dot, ext = name.rpartition(".")
    return os.path.join(d, f"{stem}.{netns}.{ext}" if dot else f"{name}.{netns}")


class LockHeld(LabError):
    """Another run holds the appliance lock."""

    def __init__(self, message: str, holder: "LockInfo | None") -> None:
        super().__init__(message)
        self.holder = holder


def _fmt(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


@dataclass(frozen=True)
class LockInfo:
    """What the lock file says: who, from which machine, which process, since when (``time``),
    which run, the lease length and its current expiry (host clock; 0 = no lease)."""

    holder: str
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    time: float = field(default_factory=time.time)
    run_id: str = ""
    nonce: str = field(default_factory=lambda: os.urandom(8).hex())
    lease: float = 0
    expires: float = 0

    @property
    def start(self) -> float:
        return self.time

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def record_prefix(self) -> str:
        """The JSON record without ``expires`` and its closing brace: the host appends both
        (``, "expires": N}``) from its own clock when it writes the file."""
        d = asdict(self)
        d.pop("expires")
        return json.dumps(d, sort_keys=True)[:-1]

    @classmethod
    def parse(cls, text: str) -> "LockInfo | None":
        """None when the content is not (yet) a complete lock record."""
        try:
            d = json.loads(text)
            return cls(holder=str(d["holder"]), host=str(d["host"]), pid=int(d["pid"]),
                       time=float(d["time"]), run_id=str(d.get("run_id", "")),
                       nonce=str(d.get("nonce", "")), lease=float(d.get("lease", 0)),
                       expires=float(d.get("expires", 0)))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def expired(self, now: float) -> bool:
        """True once the lease's expiry (host clock) is past; never for a record without one."""
        return self.expires > 0 and now > self.expires

    def describe(self, now: float | None = None) -> str:
        out = f"{self.holder} on {self.host} (pid {self.pid}, run {self.run_id or '-'}) since {_fmt(self.time)}"
        if self.expires > 0:
            out += f", lease until {_fmt(self.expires)}"
            if now is not None:
                out += " (EXPIRED)" if self.expired(now) else f" ({self.expires - now:.0f}s left)"
        return out


@dataclass(frozen=True)
class LeaseStatus:
    """One lock file as seen now: where, who holds it (None = free), the host's clock."""

    host: str
    path: str
    holder: LockInfo | None
    now: float
    raw: str = ""
    broken_note: str = ""

    @property
    def expired(self) -> bool:
        return self.holder is not None and self.holder.expired(self.now)

    def describe(self) -> str:
        if self.holder is None:
            what = f"unreadable record {self.raw[:200]!r}" if self.raw.strip() else "free"
        else:
            what = "held by " + self.holder.describe(self.now)
        note = f"; last broken: {self.broken_note}" if self.broken_note else ""
        return f"{self.host}:{self.path}: {what}{note}"


# sh: print the lock's age in seconds from its mtime by the host's own clock. GNU
# `stat -c %Y` first: GNU `stat -f` means "file system status" and succeeds with junk;
# FreeBSD's stat rejects -c and then `stat -f %m` is the mtime.
_AGE = ('m=$(stat -c %Y "$l" 2>/dev/null || stat -f %m "$l" 2>/dev/null)\n'
        'case "$m" in ""|*[!0-9]*) ;; *) echo "age=$(( $(date +%s) - m ))";; esac\n')
# sh: append one line (in $msg) to the lock's log beside it, stamped by the host's clock.
_LOG = 'printf "%s %s\\n" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$msg" >> "$l.log" 2>/dev/null\n'
# sh: "is $cur our record?" -- the nonce is unique per run, the rest may change on renewal.
_OURS = 'case "$cur" in *"\\"nonce\\": \\"$n\\""*) ours=1;; *) ours=0;; esac\n'


def _breaker(note: str) -> str:
    """`` by WHO: REASON`` from a ``<lock>.broken`` note ("" when there is none or it is
    unreadable): a broken run's message names who took its host even before anyone holds it."""
    try:
        d = json.loads(note)
        return f" by {d['by']}: {d['reason']}"
    except (ValueError, KeyError, TypeError):
        return ""


def _provably_dead(info: LockInfo) -> bool:
    """True only when the holder ran on this machine and its pid no longer exists. A holder
    on another machine, or a live pid (even a recycled one), is never taken for dead here:
    those are taken over when their lease expires."""
    if info.host != socket.gethostname() or info.pid <= 0 or info.pid == os.getpid():
        return False
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _fields(stdout: str) -> dict[str, str]:
    """``key=value`` lines of a lock script's output (first of each key wins)."""
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isidentifier() and key not in out:
            out[key] = value
    return out


def _num(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def _holds():
    """The process's record of leases (imported late: holds imports this module's peers)."""
    from ipsec_hil.lab.sharing.holds import HOLDS

    return HOLDS


class ApplianceLock:
    """`with ApplianceLock(host, "alice: pytest -m xgs136", run_id=...):` -- acquire, or
    wait up to `wait` seconds (polling every `poll`), then raise LockHeld naming the holder.

    While held, a daemon thread renews the lease every `renew_every` s (default `lease`/3);
    `check()` raises :class:`LeaseLost` once it was taken. Release removes the file only if
    it still holds our record (our nonce).
    """

    def __init__(self, host: Host, holder_info: LockInfo | str, path: str = DEFAULT_LOCK_PATH,
                 wait: float = 0, poll: float = 1.0, break_if_older_than: float | None = None,
                 run_id: str = "", timeout: float = 30, *, lease: float | None = None,
                 renew_every: float | None = None,
                 on_lost: Callable[[LeaseLost], None] | None = None) -> None:
        self.host = host
        self.lease = float(math.ceil(lease_seconds() if lease is None else lease))
        base = holder_info if isinstance(holder_info, LockInfo) else LockInfo(holder=holder_info, run_id=run_id)
        self.info = LockInfo(holder=base.holder, host=base.host, pid=base.pid, time=base.time,
                             run_id=base.run_id, nonce=base.nonce, lease=self.lease)
        self.path = path
        self.patience = Patience(wait, poll)
        self.break_if_older_than = break_if_older_than
        self.timeout = timeout
        self.held = False
        self.expires: float = 0
        self.broken_note = ""  # who broke the previous holder's lease and why, if someone did
        #: the dead holder this acquire took the lock over from (its record as the lock held
        #: it), None when the lock was free: whose state the recovery that follows undoes
        self.took_over: LockInfo | None = None
        self._on_lost = on_lost
        self.keeper = LeaseKeeper(f"{host.name}:{path}", self._renew, every=renew_every, lease=self.lease,
                                  on_lost=self._lost)

    @property
    def where(self) -> str:
        return f"{self.host.name}:{self.path}"

    def _lost(self, exc: LeaseLost) -> None:
        """From the renewal thread, once: fence the host (no command of this process
        reaches it any more), record the loss for the run (ipsec_hil.lab.sharing.holds: its
        listeners stop the run), then the caller's ``on_lost``."""
        _holds().lost(self.where, (self.host.name,), exc)
        if self._on_lost is not None:
            self._on_lost(exc)

    # ------------------------------------------------------------------ shell pieces

    def _head(self) -> str:
        """sh prologue: $l the lock, $n our nonce, $now the host's clock, $rec our record."""
        return (f"l={shlex.quote(self.path)}; n={shlex.quote(self.info.nonce)}\n"
                + "now=$(date +%s)\n"
                + f"rec={shlex.quote(self.info.record_prefix())}', \"expires\": '$((now + {int(self.lease)}))'}}'\n")

    def _run(self, body: str, what: str) -> dict[str, str]:
        r = self.host.run(self._head() + body, timeout=self.timeout)
        r.check(f"{what} {self.where}")
        return _fields(r.stdout)

    # ------------------------------------------------------------------ acquire

    def _try(self) -> tuple[bool, str, int | None, float | None]:
        """One atomic attempt. Returns (acquired, current content, age in s, host clock)."""
        f = self._run(
            'mkdir -p "$(dirname "$l")" 2>/dev/null\n'
            + "echo now=$now\n"
            + 'if (set -C; printf "%s\\n" "$rec" > "$l") 2>/dev/null; then\n'
            + '  echo acquired=1; echo "expires=$((now + ' + str(int(self.lease)) + '))"\n'
            # a renewal killed between its write and its rename leaves a temp file: ours now
            + '  rm -f "$l".renew.* 2>/dev/null\n'
            + '  if [ -e "$l.broken" ]; then printf "broken="; head -c 2048 "$l.broken" | tr "\\n" " "; echo;'
            + ' rm -f "$l.broken"; fi\n'
            + "  exit 0\nfi\n"
            + '[ -e "$l" ] || { echo "cannot create $l" >&2; exit 3; }\n'
            + "echo acquired=0\n" + _AGE
            # the holder may release between the attempt and this read: an empty content
            # then means "try again", not an error
            + 'printf "content="; head -c 4096 "$l" 2>/dev/null; true\n',
            "lock")
        now = _num(f.get("now"))
        if f.get("acquired") == "1":
            self.expires = _num(f.get("expires")) or 0
            self.broken_note = f.get("broken", "").strip()
            return True, "", 0, now
        age = _num(f.get("age"))
        return False, f.get("content", ""), None if age is None else int(age), now

    def acquire(self) -> "ApplianceLock":
        self.patience.start()
        vanished = 0
        while True:
            try:
                ok, content, age, now = self._try()
            except BaseException:
                # Interrupted (Ctrl-C, a connection cut while the command ran) with our
                # record perhaps written and its answer lost: left, it would hold the host
                # for a run that never knew it had it -- every next run on this machine
                # waits out the lease while this process lives, from another machine always
                # (found by tests/safety/test_every_step.py, Ctrl-C at the bench's lease).
                self._drop_if_ours()
                raise
            if ok:
                self.held = True
                log.info("%s: lease %s acquired by %s", self.host.name, self.path, self.info.describe())
                if self.broken_note:
                    log.warning("%s: the previous lease on %s was broken: %s", self.host.name, self.path,
                                self.broken_note)
                self.keeper.start()
                _holds().hold(self)
                return self
            if not content.strip() and vanished < 5:  # released between our attempt and the read
                vanished += 1
                continue
            other = LockInfo.parse(content)
            if other is not None and now is not None and other.expired(now):
                # Its holder stopped renewing more than a lease ago, on whatever machine:
                # it is dead; its journal is recovered by whoever takes the lock next.
                log.warning("%s: lease %s expired %.0fs ago (%s); taking it over", self.host.name,
                            self.path, now - other.expires, other.describe(now))
                if self._remove_if(content, f"taken over by {self.info.describe()}: expired lease of "
                                   f"{other.describe(now)}"):
                    self.took_over = other
                continue
            if other is not None and _provably_dead(other):
                # Killed (SIGKILL, power) on THIS machine: its pid is gone, so the lock is
                # stale for certain without waiting for its lease to expire.
                log.warning("%s: lock %s belongs to a run that no longer exists on this machine "
                            "(%s); taking it over", self.host.name, self.path, other.describe())
                if self._remove_if(content, ""):
                    self.took_over = other
                continue
            if self.break_if_older_than is not None and age is not None and age > self.break_if_older_than:
                log.warning("%s: breaking lock %s, %ds old (> %gs): %s", self.host.name, self.path, age,
                            self.break_if_older_than, other.describe() if other else content[:200])
                if self._remove_if(content, f"broken by {self.info.describe()}: older than "
                                   f"{self.break_if_older_than:g}s"):
                    self.took_over = other
                continue
            if self.patience.over():
                who = other.describe(now) if other else f"unreadable record {content[:200]!r}"
                raise LockHeld(
                    f"{self.host.name}: appliance lock {self.path} is held by {who}"
                    + (f", {age}s since its last write" if age is not None else "")
                    + f"; waited {self.patience.wait:g}s. A holder that stops renewing is taken over when its "
                    f"lease expires; to take it now: python -m ipsec_hil.lab.sharing break TOPOLOGY "
                    f"{self.host.name} --reason TEXT (or by hand on the appliance: rm {self.path})",
                    other,
                )
            self.patience.pause()

    def _remove_if(self, content: str, why: str) -> bool:
        """Remove the lock file only if its content is exactly `content` (+ newline); a
        non-empty `why` is logged in ``<lock>.log`` (takeovers and breaks of someone else's
        lease leave a trace on the host; a dead pid on this machine is logged here only:
        a normal run, or its recovery, leaves no file beside the lock)."""
        log_it = ('[ -z "$msg" ] || ' + _LOG.strip()) if why else "true"
        f = self._run(
            f"want={shlex.quote(content.rstrip(chr(10)))}; msg={shlex.quote(why)}\n"
            + '[ -e "$l" ] || { echo result=gone; exit 0; }\n'
            + 'if [ "$(cat "$l")" = "$want" ]; then rm -f "$l" && echo result=removed && ' + log_it + "\n"
            + "else echo result=other; fi\n",
            "remove lock")
        return f.get("result") in ("removed", "gone")

    # ------------------------------------------------------------------ while held

    def _renew(self) -> None:
        """Push our expiry forward, only if the record is still ours; else LeaseLost."""
        f = self._run(
            'cur=$(head -c 4096 "$l" 2>/dev/null)\n' + _OURS
            + 'if [ "$ours" != 1 ]; then echo lost=1; printf "content=%s\\n" "$cur"\n'
            + '  if [ -e "$l.broken" ]; then printf "broken="; head -c 2048 "$l.broken" | tr "\\n" " "; echo; fi\n'
            + "  exit 0; fi\n"
            + 't="$l.renew.$$"\n'
            + 'printf "%s\\n" "$rec" > "$t" && mv -f "$t" "$l" && echo "expires=$((now + '
            + str(int(self.lease)) + '))"\n',
            "renew lease")
        if f.get("lost") == "1":
            other = LockInfo.parse(f.get("content", ""))
            note = f.get("broken", "").strip()
            by = other.describe() if other else (f"nobody yet (the file was removed{_breaker(note)})"
                                                  if not f.get("content") else
                                                  f"an unreadable record {f.get('content', '')[:200]!r}")
            raise LeaseLost(f"{self.where}: this run's lease was taken: the lock now names {by}"
                            + (f"; broken: {note}" if note else "")
                            + ". This run stops before changing anything else on the appliance.")
        self.expires = _num(f.get("expires")) or self.expires

    def renew(self) -> None:
        """Renew now in the caller's thread (renew-on-use); raises LeaseLost if it was taken."""
        self.keeper.renew_now()

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the renewal thread found the lease taken: call it
        between tests and before every remote change."""
        if self.held:
            self.keeper.check()

    @property
    def lost(self) -> LeaseLost | None:
        return self.keeper.lost

    # ------------------------------------------------------------------ release / status

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        self.keeper.stop()
        _holds().unhold(self)
        why = self.keeper.lost or fence.fenced(self.host.name)
        if why:
            # another run holds the host (this lease, or another of this run's on it, was
            # lost): not even a look at its lock file; the new holder's takes its place
            log.warning("%s: not released: the host is lost to this run (%s); nothing sent", self.where, why)
            return
        try:
            result = self._remove_ours()
        except TransportError:
            # the connection was lost around the removal (it may have run, its answer lost):
            # once more on a new connection -- idempotent; left, the lease would hold the host
            # until it expires (found by tests/safety/test_every_step_cut.py at the bench's release)
            result = self._remove_ours()
            result = "removed" if result == "gone" else result  # most likely our first removal
        if result == "removed":
            log.info("%s: lease %s released", self.host.name, self.path)
        else:
            log.warning("%s: lock %s was no longer ours (broken or taken over by another run); left alone",
                        self.host.name, self.path)

    def _remove_ours(self) -> str:
        """Remove the lock file if it holds our record (our nonce): removed | gone | other."""
        f = self._run(
            'cur=$(cat "$l" 2>/dev/null) || { echo result=gone; exit 0; }\n' + _OURS
            + 'if [ "$ours" = 1 ]; then rm -f "$l" && echo result=removed; else echo result=other; fi\n',
            "release lock")
        return f.get("result", "")

    def _drop_if_ours(self) -> None:
        """After an interrupted acquire: our record, if it got written, removed (best effort:
        a failure is logged, and the lease then expires on its own)."""
        try:
            if self._remove_ours() == "removed":
                log.warning("%s: an interrupted acquire had written our record; removed", self.where)
        except Exception as exc:  # noqa: BLE001 -- the interrupt is the error to report
            log.warning("%s: after an interrupted acquire, our record could not be checked: %s", self.where, exc)

    def current(self) -> LockInfo | None:
        """Who holds the lock now (None if free or unreadable)."""
        return self.status().holder

    def status(self) -> LeaseStatus:
        """Who holds the lock now, by the host's clock (expired or not), and the last break note."""
        r = self.host.run(
            f"l={shlex.quote(self.path)}\necho now=$(date +%s)\n"
            + 'if [ -e "$l.broken" ]; then printf "broken="; head -c 2048 "$l.broken" | tr "\\n" " "; echo; fi\n'
            + 'printf "content="; head -c 4096 "$l" 2>/dev/null; true\n',
            timeout=self.timeout,
        ).check(f"read lock {self.where}")
        f = _fields(r.stdout)
        raw = f.get("content", "")
        return LeaseStatus(self.host.name, self.path, LockInfo.parse(raw) if raw else None,
                           _num(f.get("now")) or time.time(), raw, f.get("broken", "").strip())

    def break_(self, reason: str, by: str) -> LeaseStatus:
        """Break whatever lease the file holds, recording who broke it and why (in
        ``<lock>.log`` and ``<lock>.broken``, which the next acquirer reports). Returns the
        status before the break. The broken holder stops at its next renewal."""
        if not reason.strip():
            raise LabError(f"{self.where}: breaking a lease needs a reason (--reason TEXT)")
        before = self.status()
        if before.holder is None and not before.raw.strip():
            raise LabError(f"{self.where}: no lease to break (the file does not exist)")
        was = before.holder.describe(before.now) if before.holder else f"unreadable {before.raw[:200]!r}"
        note = json.dumps({"by": by, "reason": reason, "time": before.now, "holder": was}, sort_keys=True)
        self._run(
            f"note={shlex.quote(note)}; msg={shlex.quote(f'broken by {by}: {reason}; holder was {was}')}\n"
            + 'printf "%s\\n" "$note" > "$l.broken" && rm -f "$l" || exit 4\n' + _LOG,
            "break lock")
        log.warning("%s: lease broken by %s (%s); holder was %s", self.where, by, reason, was)
        return before

    def __enter__(self) -> "ApplianceLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
