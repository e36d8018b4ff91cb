"""One lock per appliance, kept ON the appliance.

Why on the appliance and not a local file lock: two engineers (or two CI machines)
driving the same XGS would corrupt each other's swanctl.conf and counters; only the
appliance itself is shared by all of them. Creation is atomic with sh's noclobber
(`set -C`, O_EXCL on FreeBSD sh and dash); the file holds JSON naming the holder so a
refusal can say who has it. A stale lock is never broken silently on hardware: the
error says how to remove it; `break_if_older_than` is the explicit opt-in.

Library code: no pytest import.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import socket
import time
from dataclasses import asdict, dataclass, field

from plugin.lab.errors import LabError
from plugin.lab.remote import Host

log = logging.getLogger(__name__)

#: Beside the backup journal: /var/db survives a crashed run (a stale lock is then seen and
#: named, never silently dropped), and in the virtual lab it is each appliance's own
#: directory, where /var/run is the machine's and would be shared by every appliance.
DEFAULT_LOCK_PATH = "/var/db/ipsec-hil/run.lock"


class LockHeld(LabError):
    """Another run holds the appliance lock."""

    def __init__(self, message: str, holder: "LockInfo | None") -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class LockInfo:
    """What the lock file says: who, from which machine, which process, when, which run."""

    holder: str
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    time: float = field(default_factory=time.time)
    run_id: str = ""
    nonce: str = field(default_factory=lambda: os.urandom(8).hex())

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> "LockInfo | None":
        """None when the content is not (yet) a complete lock record."""
        try:
            d = json.loads(text)
            return cls(holder=str(d["holder"]), host=str(d["host"]), pid=int(d["pid"]),
                       time=float(d["time"]), run_id=str(d.get("run_id", "")),
                       nonce=str(d.get("nonce", "")))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.time))
        return f"{self.holder} on {self.host} (pid {self.pid}, run {self.run_id or '-'}) since {when}"


# sh: print the lock's age in seconds from its mtime by the host's own clock. GNU
# `stat -c %Y` first: GNU `stat -f` means "file system status" and succeeds with junk;
# FreeBSD's stat rejects -c and then `stat -f %m` is the mtime.
_AGE = ('m=$(stat -c %Y "$l" 2>/dev/null || stat -f %m "$l" 2>/dev/null)\n'
        'case "$m" in ""|*[!0-9]*) ;; *) echo "age=$(( $(date +%s) - m ))";; esac\n')


def _provably_dead(info: LockInfo) -> bool:
    """True only when the holder ran on this machine and its pid no longer exists. A holder
    on another machine, or a live pid (even a recycled one), is never taken for dead."""
    if info.host != socket.gethostname() or info.pid <= 0 or info.pid == os.getpid():
        return False
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class ApplianceLock:
    """`with ApplianceLock(host, "alice: pytest -m xgs136", run_id=...) :` -- acquire, or
    wait up to `wait` seconds (polling every `poll`), then raise LockHeld naming the holder.
    Release removes the file only if it still holds our record."""

    def __init__(self, host: Host, holder_info: LockInfo | str, path: str = DEFAULT_LOCK_PATH,
                 wait: float = 0, poll: float = 1.0, break_if_older_than: float | None = None,
                 run_id: str = "", timeout: float = 30) -> None:
        self.host = host
        self.info = holder_info if isinstance(holder_info, LockInfo) else LockInfo(holder=holder_info, run_id=run_id)
        self.path = path
        self.wait = wait
        self.poll = poll
        self.break_if_older_than = break_if_older_than
        self.timeout = timeout
        self.held = False

    def _try(self) -> tuple[bool, str, int | None]:
        """One atomic attempt. Returns (acquired, current content, age in s)."""
        rec = self.info.to_json()
        r = self.host.run(
            f"l={shlex.quote(self.path)}\n"
            + 'mkdir -p "$(dirname "$l")" 2>/dev/null\n'
            + f"if (set -C; printf '%s\\n' {shlex.quote(rec)} > \"$l\") 2>/dev/null; then echo acquired=1; exit 0; fi\n"
            + '[ -e "$l" ] || { echo "cannot create $l" >&2; exit 3; }\n'
            + "echo acquired=0\n" + _AGE
            # the holder may release between the attempt and this read: an empty content
            # then means "try again", not an error
            + 'printf "content="; head -c 4096 "$l" 2>/dev/null; true\n',
            timeout=self.timeout,
        )
        r.check(f"lock {self.path}")
        if r.stdout.startswith("acquired=1"):
            return True, rec, 0
        age = None
        content = ""
        for line in r.stdout.splitlines():
            if line.startswith("age=") and line[4:].lstrip("-").isdigit():
                age = int(line[4:])
            elif line.startswith("content="):
                content = line[len("content="):]
        return False, content, age

    def acquire(self) -> "ApplianceLock":
        deadline = time.monotonic() + self.wait
        vanished = 0
        while True:
            ok, content, age = self._try()
            if ok:
                self.held = True
                log.info("%s: lock %s acquired by %s", self.host.name, self.path, self.info.describe())
                return self
            if not content.strip() and vanished < 5:  # released between our attempt and the read
                vanished += 1
                continue
            other = LockInfo.parse(content)
            if other is not None and _provably_dead(other):
                # Killed (SIGKILL, power) on THIS machine: its pid is gone, so the lock is
                # stale for certain; its journal is recovered by whoever takes the lock next.
                log.warning("%s: lock %s belongs to a run that no longer exists on this machine "
                            "(%s); taking it over", self.host.name, self.path, other.describe())
                self._remove_if(content)
                continue
            if self.break_if_older_than is not None and age is not None and age > self.break_if_older_than:
                log.warning("%s: breaking lock %s, %ds old (> %gs): %s", self.host.name, self.path, age,
                            self.break_if_older_than, other.describe() if other else content[:200])
                self._remove_if(content)
                continue
            if time.monotonic() >= deadline:
                who = other.describe() if other else f"unreadable record {content[:200]!r}"
                raise LockHeld(
                    f"{self.host.name}: appliance lock {self.path} is held by {who}"
                    + (f", {age}s old" if age is not None else "")
                    + f"; waited {self.wait:g}s. If that run is dead, remove the lock on the "
                    f"appliance (rm {self.path}) and let the next run recover its journal.",
                    other,
                )
            time.sleep(min(self.poll, max(0.0, deadline - time.monotonic())))

    def _remove_if(self, content: str) -> bool:
        """Remove the lock file only if its content is exactly `content` (+ newline)."""
        r = self.host.run(
            f"l={shlex.quote(self.path)}; want={shlex.quote(content.rstrip(chr(10)))}\n"
            + '[ -e "$l" ] || { echo gone; exit 0; }\n'
            + 'if [ "$(cat "$l")" = "$want" ]; then rm -f "$l" && echo removed; else echo other; fi\n',
            timeout=self.timeout,
        ).check(f"remove lock {self.path}")
        return r.stdout.strip() in ("removed", "gone")

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        r = self._remove_if(self.info.to_json())
        if r:
            log.info("%s: lock %s released", self.host.name, self.path)
        else:
            log.warning("%s: lock %s was no longer ours (broken by another run?); left alone",
                        self.host.name, self.path)

    def current(self) -> LockInfo | None:
        """Who holds the lock now (None if free or unreadable)."""
        r = self.host.run(f"cat {shlex.quote(self.path)} 2>/dev/null; true", timeout=self.timeout)
        return LockInfo.parse(r.stdout) if r.stdout else None

    def __enter__(self) -> "ApplianceLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
