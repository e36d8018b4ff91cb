"""The lab's processes: records that survive pid reuse, and stopping them for sure.

Why a record is (pid, start time): a lab outlives the shell that started it and pids are
recycled fast; killing by pid alone could hit a stranger.  Every component is started in
its own session with PR_SET_PDEATHSIG, so it dies with the process that owns the lab.

Also this module's other process calls through libc: the datapath workers a process forks
(fork_worker, stop_workers: the engine and its floor) and pidfd_getfd (the command server
takes a client's descriptors).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ipsec_hil_twin.machinery import netns as tn

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
COMM_MAX = 15
"""A process name (/proc/PID/comm) holds at most 15 bytes; the kernel cuts the rest."""
PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)
SYS_PIDFD_GETFD = 438
"""pidfd_getfd(2)'s number, the same on every Linux architecture (the unified syscall
table from 424 on); Python's os module has pidfd_open but not this."""


def proc_start(pid: int) -> int | None:
    """Kernel start time of a process (clock ticks), None if it does not exist.

    Stored beside each pid so a recycled pid is never mistaken for ours.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def pid_record(pid: int) -> dict[str, int | None]:
    return {"pid": pid, "start": proc_start(pid)}


def alive(rec: dict[str, Any] | None) -> bool:
    """True if the recorded process still exists (same pid AND same start time)."""
    if not rec or not rec.get("pid"):
        return False
    if rec.get("start") is None:
        return False  # it had exited when recorded: never guess (pids are recycled fast)
    return proc_start(int(rec["pid"])) == rec["start"]


def kill_record(rec: dict[str, Any] | None, timeout: float = 3.0) -> None:
    """SIGTERM the recorded process (and its group if it leads one), SIGKILL after timeout."""
    kill_records([rec], timeout)


def kill_records(recs: list[dict[str, Any] | None], timeout: float = 3.0) -> None:
    """Stop several recorded processes at once: SIGTERM all, wait, SIGKILL the rest."""
    live = [r for r in recs if alive(r)]
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
        for r in live:
            _signal_tree(int(r["pid"]), sig)  # type: ignore[index]
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline:
            for r in live:
                _reap(int(r["pid"]))  # type: ignore[index]
            live = [r for r in live if alive(r)]
            if live:
                time.sleep(0.02)
        if not live:
            return


def _signal_tree(pid: int, sig: int) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
            return
    except ProcessLookupError:
        return
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def name_process(name: str) -> None:
    """Set this process's name (/proc/PID/comm, what ps -e, top and process accounting
    show) to ``name``, at most :data:`COMM_MAX` bytes.

    Why: every lab component is a Python interpreter, so all of them were "python" -- a CPU
    profile of a run (tools/cpu-profile, issue 15) could not tell an engine from an SSH
    server or a command. Find a component by this name (``pgrep -x twin-ike``), not by its
    command line: one forked warm (ipsec_hil_twin.machinery.prefork) keeps the supervisor's."""
    raw = name.encode()
    if len(raw) > COMM_MAX:
        raise ValueError(f"process name {name!r}: {len(raw)} bytes, the kernel keeps {COMM_MAX}")
    _libc.prctl(PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0)


def child_setup() -> None:  # runs in the forked child before exec
    os.setsid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def fork_worker(target: Callable[[], object], name: str | None = None) -> int:
    """Fork a datapath worker running ``target``; it dies with its parent (PDEATHSIG
    SIGKILL), ignores SIGINT (the parent stops it) and exits 1 with its traceback on an
    error, so a parent polling ``waitpid`` sees a half datapath at once. ``name``: its
    process name (:func:`name_process`), else the parent's."""
    pid = os.fork()
    if pid:
        return pid
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if name:
            name_process(name)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        target()
    except BaseException as exc:  # noqa: BLE001 - report and die
        print(f"datapath worker {os.getpid()}: {exc!r}", file=sys.stderr)
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def stop_workers(pids: Iterable[int]) -> None:
    """SIGKILL and reap forked workers (:func:`fork_worker`); ones already gone are skipped."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def pidfd_getfd(pidfd: int, fd: int) -> int:
    """A duplicate of process ``pidfd``'s descriptor ``fd`` in this process (close-on-exec,
    as the kernel makes it): the same open file description, as SCM_RIGHTS would give.
    OSError (EBADF: not open there)."""
    got = _libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
    if got < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return got


def become_subreaper() -> None:
    """Make this process the init of its descendants: an orphan among them is reparented
    here, not to PID 1 (ipsec_hil_twin.shell.cmdserver, an appliance's init, reaps it at once)."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def kill_netns_processes(ns_names: list[str]) -> None:
    """Kill every process living in one of these namespaces (grandchildren included)."""
    inodes = set()
    for ns in ns_names:
        try:
            st = os.stat(tn.NETNS_RUN_DIR / ns)
            inodes.add((st.st_dev, st.st_ino))
        except FileNotFoundError:
            pass
    if not inodes:
        return
    me = os.getpid()
    victims = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
            if (st.st_dev, st.st_ino) in inodes:
                victims.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in victims:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(proc_start(p) is not None for p in victims):
            for p in victims:
                _reap(p)
            time.sleep(0.05)


IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x8, 0x80, 0x100, 0x200
IN_Q_OVERFLOW = 0x4000  # <sys/inotify.h>: events were lost, so any file may have changed
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC


class FileChanges:
    """A descriptor that becomes readable when ``name`` in ``directory`` is written, renamed
    into place, created or removed (inotify(7) on the directory: an atomic replace is a
    rename). Why: a process that looked at a file's mtime ten times a second to notice a
    change (the engine's faults.json) woke that often for its whole life; waiting on this
    it wakes when the file changes, and at once. Raises OSError where inotify is missing."""

    def __init__(self, directory: Path, name: str) -> None:
        self.name = name.encode()
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        if _libc.inotify_add_watch(fd, os.fsencode(directory), IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"inotify_add_watch {directory}: {os.strerror(err)}")
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def changed(self) -> bool:
        """Read the queued events; True if one names the file (or the queue overflowed)."""
        hit = False
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return hit
            i = 0
            while i + 16 <= len(buf):  # struct inotify_event: wd, mask, cookie, len, name[len]
                mask = int.from_bytes(buf[i + 4:i + 8], sys.byteorder)
                n = int.from_bytes(buf[i + 12:i + 16], sys.byteorder)
                hit = hit or mask & IN_Q_OVERFLOW != 0 or buf[i + 16:i + 16 + n].rstrip(b"\0") == self.name
                i += 16 + n

    def close(self) -> None:
        os.close(self.fd)
