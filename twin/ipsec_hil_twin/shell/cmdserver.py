"""An appliance's command server: its FreeBSD commands forked from a warm interpreter.

`python -S -m ipsec_hil_twin.shell.cmdserver --socket PATH [--exec PROGRAM]` -- started by ipsec_hil_twin.shell.sshd through
ipsec_hil_twin.machinery.nsexec, so it lives in the appliance's network namespace and private mounts as a
command would; the SSH server's shells start here too (an EXEC request: a vfork, see spawn_program).

Why: each emulated command (ipsec_hil_twin.fbsd.COMMANDS) started as a fresh `python -S -m MODULE`
paid 45-65 ms of CPU for the interpreter and its imports; a whole own-test run spent 42 %
of its busy CPU in such short-lived Python. This server imports every command module once
(and freezes them out of the garbage collector's sight: a fork's collections then leave their
pages shared -- 8.6 -> 5.6 ms of CPU per forked ``sysctl``, measured 12-06); per request
(ipsec_hil_twin.shell.cmdclient, the protocol's home) a warm worker forked from it
(ipsec_hil_twin.shell.cmdworker: an idle one, else a new one) becomes what
`python -S -m MODULE ARGS` would have been: the client's stdin/stdout/stderr as fds 0-2,
its environment, working directory and argv, a session of its own, the module run fresh
as `__main__` (runpy, as -m does), Python's exit handling (SystemExit codes, tracebacks,
non-daemon threads joined, atexit, flushes). The command's exit status or fatal signal
goes back to the client, which exits with it. The worker then waits for the next request
instead of exiting, unless the command left something behind (cmdworker says what).

Kill semantics: a client that goes away before its command ends (its SSH session was cut
and the shell's process group killed) closes the connection; the server then sends the
command's process group SIGHUP and, KILL_GRACE later, SIGKILL -- what ipsec_hil_twin.shell.sshd_exec
does to the shell.

The appliance's init: the server is a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so
what a command leaves running in the background (`nohup tcpdump ... &`) is reparented to it
when its shell exits, and reaped the moment it exits, as FreeBSD's init reaps an orphan.
Without it the orphan went to this machine's PID 1, whose reaping lagged by 1-2 s; a
`kill -0` loop waiting for tcpdump to stop saw the zombie as running (issue 15: 1.5 s per
wire capture, measured).

Single-threaded (fork from a threaded process is unsafe): one selector over the listening
socket, the clients' connections, a pidfd per running program and per worker, the workers'
sockets and SIGCHLD's wakeup fd.
"""
from __future__ import annotations

import argparse
import errno
import gc
import importlib
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback

from ipsec_hil_twin.shell import cmdclient as proto
from ipsec_hil_twin.shell import cmdworker
from ipsec_hil_twin.fbsd import COMMANDS
from ipsec_hil_twin.machinery.labprocs import become_subreaper, name_process, pidfd_getfd

KILL_GRACE = 0.5
"""Seconds between SIGHUP and SIGKILL for a command whose client went away."""
READ_TIMEOUT = 5.0
"""How long a connected client may take to send its whole request."""
MODULES = frozenset(c.module for c in COMMANDS.values() if c.wrapper == "stdlib")
"""What the server runs: the commands whose wrappers run them without site-packages, as
this server runs (a `full` command needs the caller's environment at start-up)."""


def take_peer_fds(conn: socket.socket) -> tuple[int, list[int], list[int]]:
    """(the connecting process's pid, which of its fds 0-2 are open, duplicates of them)
    -- what a PEER_FDS request (twin/ipsec_hil_twin/shell/cmdclient.pl) hands over without sending descriptors.
    The peer is blocked waiting for its answer, so its pid is still its own."""
    pid, _uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    pidfd = os.pidfd_open(pid)
    fds: list[int] = []
    received: list[int] = []
    try:
        for fd in proto.STD_FDS:
            try:
                received.append(pidfd_getfd(pidfd, fd))
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
                continue  # closed in the client: closed in the command
            fds.append(fd)
    except BaseException:
        for fd in received:
            os.close(fd)
        raise
    finally:
        os.close(pidfd)
    return pid, fds, received


class _Running:
    """A request being served: the process running it (a program, or a worker), the
    client's connection (None once the client went away), the program's pidfd (a worker's
    is its _Worker's)."""

    __slots__ = ("pid", "conn", "pidfd", "kill_at", "program")

    def __init__(self, pid: int, conn: socket.socket, pidfd: int | None, program: subprocess.Popen | None = None) -> None:
        self.pid, self.conn, self.pidfd, self.program = pid, conn, pidfd, program
        self.kill_at: float | None = None


class _Worker:
    """A warm worker (ipsec_hil_twin.shell.cmdworker): its pid, the server's end of its
    socket pair (None once retired: closing it tells the worker to exit) and its pidfd."""

    __slots__ = ("pid", "sock", "pidfd")

    def __init__(self, pid: int, sock: socket.socket, pidfd: int) -> None:
        self.pid, self.sock, self.pidfd = pid, sock, pidfd


def preload() -> None:
    """Import every command module (not run: their `__main__` guards stay shut)."""
    for module in sorted(MODULES):
        importlib.import_module(module)


def _child(req: proto.Request, fds: list[int], received: list[int]) -> None:
    """In the forked child of an EXEC request that spawn_program could not start: become
    the program (a std fd the client closed closed here too). Never returns."""
    try:
        signal.set_wakeup_fd(-1)  # the server's SIGCHLD wakeup is not the program's
        # default in a program (as Popen does), and SIGHUP as in a session sshd starts
        for name in ("SIGTERM", "SIGCHLD", "SIGPIPE", "SIGXFSZ", "SIGHUP"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        os.setsid()
        for target, fd in zip(fds, received):
            os.dup2(fd, target)
        for target in proto.STD_FDS:
            if target not in fds:
                os.close(target)  # closed in the client: closed in the program
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        try:
            os.chdir(req.cwd)
        except OSError:
            os.chdir("/")
        os.execve(req.target, [os.fsdecode(a) for a in req.args],
                  {os.fsdecode(k): os.fsdecode(v) for k, v in req.env.items()})
    except OSError as exc:
        sys.stderr.write(f"ipsec_hil_twin.shell.cmdserver: exec {req.target}: {exc.strerror}\n")
        sys.stderr.flush()
        os._exit(127)
    except BaseException:  # noqa: BLE001 -- whatever happens, the child never returns to the server loop
        try:
            traceback.print_exc()
        finally:
            os._exit(1)
    os._exit(127)


def spawn_program(req: proto.Request, fds: list[int], received: list[int]) -> subprocess.Popen | None:
    """Start an EXEC request's program by vfork and exec (subprocess): the running
    program, or None when this path cannot give what :func:`_child` gives -- a std fd
    closed in the client (only a forked child can close it in the program) or a failed
    exec (the fork path then reports it on the program's stderr, status 127, as before).

    Why not fork: forking this interpreter costs 1.9-2.0 ms of CPU per program against 0.8
    for a vfork (measured, 21 MB server, 12-04) -- the page tables and the copy-on-write
    faults of both processes -- and every SSH command of every run starts its shell here
    (issue 15). Why not os.posix_spawn: glibc's leaves its two internal signals (32, 33)
    ignored in the program; subprocess's child code does not. What the program gets is
    what :func:`_child` gives it: the client's fds as 0-2 and no other descriptor, a session
    of its own, this server's (empty) signal mask with SIGPIPE and SIGXFSZ back at their
    default, the request's environment and argv, and its working directory (``/`` when
    that is no directory). The server reaps it (:meth:`CommandServer._reap`), which sets
    ``returncode`` so subprocess never reaps it behind the server's back."""
    if list(fds) != list(proto.STD_FDS):
        return None
    cwd = req.cwd if os.path.isdir(req.cwd) else b"/"
    try:
        return subprocess.Popen([os.fsdecode(a) for a in req.args], executable=req.target, stdin=received[0],
                                stdout=received[1], stderr=received[2], cwd=cwd, env=req.env,
                                close_fds=True, restore_signals=True, start_new_session=True)
    except OSError:
        return None


def read_request(conn: socket.socket, programs: frozenset[str]) -> tuple[proto.Request, list[int], list[int]]:
    """(request, which std fds, the received descriptors); the descriptors are closed again
    when the request is malformed or not allowed (ValueError/OSError). PROGRAMS: what an
    EXEC request may start. A PEER_FDS request's descriptors are taken from the peer, and
    its empty cwd becomes the peer's (``/proc/PID/cwd``, resolved when the command chdirs:
    the peer waits meanwhile)."""
    header, received = proto.recv_header(conn)
    try:
        length, fds, from_peer = proto.decode_header(header)
        if len(fds) != len(received):
            raise ValueError(f"header names {len(fds)} descriptor(s), {len(received)} came")
        req = proto.decode_request(proto.recv_exact(conn, length))
        if req.kind == proto.RUN and req.target not in MODULES:
            raise ValueError(f"{req.target!r} is no command of this appliance (ipsec_hil_twin.fbsd.COMMANDS)")
        if req.kind == proto.EXEC and (req.target not in programs or not req.args):
            raise ValueError(f"exec {req.target!r} with {len(req.args)} argument(s): this server starts "
                             f"{', '.join(sorted(programs)) or 'no program'}, with argv[0] at least")
        if from_peer:
            pid, fds, received = take_peer_fds(conn)
            if not req.cwd:
                req.cwd = f"/proc/{pid}/cwd".encode()
        return req, fds, received
    except BaseException:
        for fd in received:
            os.close(fd)
        raise


class CommandServer:
    """Listens on one Unix socket; see the module docstring."""

    def __init__(self, path: str, programs: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.programs = programs
        self.sel = selectors.DefaultSelector()
        self.running: dict[int, _Running] = {}
        self.workers: dict[int, _Worker] = {}
        self.idle: list[int] = []  # workers waiting for a request, most recent last
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # bind under a temporary name, then rename: the socket appears when it is listening
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        self.listener.bind(tmp)
        self.listener.listen(64)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        self._inode = os.stat(path).st_ino
        self.sel.register(self.listener, selectors.EVENT_READ, ("accept", 0))
        self._wake_r, self._wake_w = socket.socketpair()
        for end in (self._wake_r, self._wake_w):
            end.setblocking(False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("sigchld", 0))
        become_subreaper()

    def serve_forever(self) -> None:
        while True:
            self.serve_once(1.0)

    def serve_once(self, timeout: float) -> None:
        due = [r.kill_at for r in self.running.values() if r.kill_at is not None]
        if due:
            timeout = max(0.0, min(timeout, min(due) - time.monotonic()))
        for key, _ in self.sel.select(timeout):
            what, pid = key.data
            if what == "accept":
                self._accept()
            elif what == "sigchld":
                self._sigchld()
            elif pid not in self.running and pid not in self.workers:
                continue  # reaped in this round already (its SIGCHLD came first)
            elif what == "exit":
                self._reap(pid)
            elif what == "done":
                self._worker_done(pid)
            elif what == "conn" and pid in self.running:
                self._client_event(pid)
        now = time.monotonic()
        for r in list(self.running.values()):
            if r.kill_at is not None and now >= r.kill_at:
                r.kill_at = None
                _killpg(r.pid, signal.SIGKILL)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(READ_TIMEOUT)
        try:
            req, fds, received = read_request(conn, self.programs)
        except (OSError, ValueError) as exc:
            _answer(conn, f"error bad request: {exc}")
            conn.close()
            return
        program = spawn_program(req, fds, received) if req.kind == proto.EXEC else None
        pidfd: int | None = None
        if program is not None:
            pid = program.pid
        elif req.kind == proto.RUN:
            pid = self._to_worker(req, fds, received)
        else:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()  # nothing of ours may reach the command's output
            pid = os.fork()
            if pid == 0:
                _child(req, fds, received)
        for fd in received:
            os.close(fd)
        if pid not in self.workers:
            pidfd = os.pidfd_open(pid)
        if req.kind == proto.EXEC:
            _answer(conn, f"pid {pid}")  # the SSH server kills the shell's group when its session is cut
        conn.setblocking(False)
        self.running[pid] = _Running(pid, conn, pidfd, program)
        self.sel.register(conn, selectors.EVENT_READ, ("conn", pid))
        if pidfd is not None:
            self.sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))

    def _to_worker(self, req: proto.Request, fds: list[int], received: list[int]) -> int:
        """The pid of the worker now running ``req``: an idle one, else one forked for it."""
        while self.idle:
            w = self.workers[self.idle.pop()]
            if cmdworker.hand(w.sock, req, fds, received):
                return w.pid
            self._retire(w)  # gone meanwhile: its exit is reaped as it comes
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # nothing of ours may reach the command's output
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            cmdworker.serve(theirs, req, fds, received)
        theirs.close()
        w = _Worker(pid, ours, os.pidfd_open(pid))
        self.workers[pid] = w
        self.sel.register(w.sock, selectors.EVENT_READ, ("done", pid))
        self.sel.register(w.pidfd, selectors.EVENT_READ, ("exit", pid))
        return pid

    def _worker_done(self, pid: int) -> None:
        """A worker answered ``exit N``: the client gets it; the worker waits for the next
        request, or is retired (its client went away, or enough are idle)."""
        w = self.workers[pid]
        try:
            line = w.sock.recv(64)
        except OSError:
            line = b""
        if not line:
            self._retire(w)  # it exited (or is exiting): its pidfd says how
            return
        r = self.running.pop(pid, None)
        if r is None or r.conn is None or proto.parse_status(line) is None or len(self.idle) >= cmdworker.IDLE_MAX:
            self._retire(w)
        else:
            self.idle.append(pid)
        if r is not None and r.conn is not None:
            self.sel.unregister(r.conn)
            r.conn.setblocking(True)
            r.conn.settimeout(READ_TIMEOUT)
            _answer(r.conn, line.decode(errors="replace").strip())
            r.conn.close()

    def _retire(self, w: _Worker) -> None:
        """Close the worker's socket: an idle worker exits on it, a busy one after its command."""
        if w.sock is not None:
            self.sel.unregister(w.sock)
            w.sock.close()
            w.sock = None
        if w.pid in self.idle:
            self.idle.remove(w.pid)

    def _client_event(self, pid: int) -> None:
        r = self.running[pid]
        try:
            data = r.conn.recv(64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            return  # the client says nothing after its request; ignore stray bytes
        # the client went away: its session was cut; so goes the command
        self.sel.unregister(r.conn)
        r.conn.close()
        r.conn = None  # type: ignore[assignment]
        _killpg(pid, signal.SIGHUP)
        r.kill_at = time.monotonic() + KILL_GRACE

    def _sigchld(self) -> None:
        """Reap every child that has exited: a command (answered as its pidfd would have
        it) or an orphan the server adopted as the appliance's init (just reaped)."""
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            if info.si_pid in self.running or info.si_pid in self.workers:
                self._reap(info.si_pid)
            else:
                try:
                    os.waitpid(info.si_pid, 0)
                except ChildProcessError:
                    pass

    def _reap(self, pid: int) -> None:
        w = self.workers.pop(pid, None)
        if w is not None:
            self._retire(w)
            self.sel.unregister(w.pidfd)
            os.close(w.pidfd)
        r = self.running.pop(pid, None)
        if r is not None and r.pidfd is not None:
            self.sel.unregister(r.pidfd)
            os.close(r.pidfd)
        _, status = os.waitpid(pid, 0)
        if r is None:
            return  # an idle or retired worker
        if r.program is not None:
            r.program.returncode = os.waitstatus_to_exitcode(status)
        if r.conn is not None:
            self.sel.unregister(r.conn)
            if os.WIFSIGNALED(status):
                line = f"signal {os.WTERMSIG(status)}"
            else:
                line = f"exit {os.waitstatus_to_exitcode(status)}"
            r.conn.setblocking(True)
            r.conn.settimeout(READ_TIMEOUT)
            _answer(r.conn, line)
            r.conn.close()

    def close(self) -> None:
        signal.set_wakeup_fd(-1)
        self.sel.close()
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()
        try:
            if os.stat(self.path).st_ino == self._inode:  # not a newer server's socket
                os.unlink(self.path)
        except FileNotFoundError:
            pass


def _answer(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall(line.encode(errors="replace") + b"\n")
    except OSError:
        pass  # the client left; nothing waits for the answer


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -S -m ipsec_hil_twin.shell.cmdserver", description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True, help="the Unix socket to listen on (DIR/cmd.sock)")
    ap.add_argument("--exec", action="append", default=[], metavar="PROGRAM",
                    help="a program an exec request may start (ipsec_hil_twin.shell.sshd: the appliance's shell)")
    a = ap.parse_args(argv)
    name_process("twin-cmdserver")
    preload()
    gc.freeze()  # the preloaded objects never collected: a worker's collections skip them (cmdworker)
    server = CommandServer(a.socket, frozenset(a.exec))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
