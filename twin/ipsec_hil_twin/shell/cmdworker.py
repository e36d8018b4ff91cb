"""A command server's warm worker: a forked process that runs one emulated command after another.

Why: a command forked fresh from the server (ipsec_hil_twin.shell.cmdserver) pays for its
fork in copy-on-write faults -- every object the run touches (a refcount written) copies
the page it lives on, and this kernel's faults cost ~8 us each. Measured 12-06 on an idle
lab, fork + run + exit per command: ``swanctl --list-sas`` 14.2 ms of CPU (1,300 page
faults) and ``sysctl -n kern.osreldate`` 8.6 ms (735), against 1.5 ms for a fork that only
exits; the same ``swanctl`` run again in a process that ran it before costs ~3 ms. The own
tests run ~25,000 such commands (issue 39: their 10 minutes are CPU). So a worker, once
forked for a request, stays: it answers the server ``exit N`` instead of exiting, and waits
on its socket pair for the next request, its pages already its own.

What a command sees is what the fork gave it (cmdserver's module docstring): the client's
fds 0-2, its environment, working directory and argv, a session of its own (the worker's:
it calls setsid once), the module run fresh as ``__main__`` with the interpreter's exit
handling, Python's std streams new on those fds with the server's encodings. What a
command may leave behind decides whether the worker runs another: a thread still alive, a
child process (an orphan must go to the server, the appliance's init, when the command
ends -- cmdserver's subreaper), a descriptor it did not close, or an exception out of the
run. Then the worker exits with the status, as a fresh child did. Signal handlers, the
signal mask, a pending alarm, the umask and sys.argv/sys.path are put back after every
command. A worker whose client went away is not reused (the server retires it), and one
killed by a signal is answered ``signal N`` by the server from its wait status.

Stdlib only (the server runs with ``-S``).
"""
from __future__ import annotations

import atexit
import io
import os
import signal
import socket
import sys
import traceback

from ipsec_hil_twin.shell import cmdclient as proto
from ipsec_hil_twin.machinery.labprocs import COMM_MAX, name_process
from ipsec_hil_twin.machinery.warmrun import run_as_main

IDLE_NAME = "twin-cmdworker"
"""An idle worker's process name (a busy one has its command's: sysctl, swanctl)."""
IDLE_MAX = 2
"""Idle workers a server keeps; more would only hold memory (a command that runs while
two others do is rare: the suite's scripts run their commands one after the other)."""


def _std_streams(model: tuple) -> None:
    """New sys.stdin/stdout/stderr on fds 0-2 with the encodings, errors and line
    buffering of the server's own (``model``): what a fresh fork inherited, without what a
    previous command left in the buffers (stdin's read-ahead above all). A closed fd gets
    no stream (None), as the interpreter does at start-up."""
    streams = []
    for fd, (mode, encoding, errors, line_buffering) in zip(proto.STD_FDS, model):
        try:
            os.fstat(fd)
        except OSError:
            streams.append(None)
            continue
        raw = io.open(fd, mode + "b", closefd=False)
        streams.append(io.TextIOWrapper(raw, encoding=encoding, errors=errors, line_buffering=line_buffering))
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams


def _stream_model() -> tuple:
    """(mode, encoding, errors, line buffering) of the server's std streams, as it started
    (one it started without: UTF-8, strict for stdin and stdout, backslashreplace for stderr,
    as the interpreter chooses for a pipe)."""
    fallback = (("utf-8", "strict", False), ("utf-8", "strict", False), ("utf-8", "backslashreplace", True))
    return tuple((mode, *((s.encoding, s.errors, s.line_buffering) if s is not None else fb))
                 for mode, s, fb in zip(("r", "w", "w"), (sys.__stdin__, sys.__stdout__, sys.__stderr__), fallback))


class _Baseline:
    """What the worker restores after each command, read once when it starts."""

    def __init__(self, sock_fd: int) -> None:
        self.sock_fd = sock_fd
        self.handlers = {s: signal.getsignal(s) for s in signal.valid_signals()
                         if s not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(s) is not None}
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.argv, self.path = list(sys.argv), list(sys.path)
        self.streams = _stream_model()

    def restore(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in self.handlers.items():
            if signal.getsignal(s) is not h:
                signal.signal(s, h)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        os.umask(self.umask)
        sys.argv, sys.path[:] = list(self.argv), self.path
        atexit._clear()


def left_behind(sock_fd: int) -> str:
    """What the command left that a next command must not meet ('' when nothing): a live
    thread, a child process (running or not yet reaped), an open descriptor past 0-2 and
    the worker's socket."""
    threading = sys.modules.get("threading")
    if threading is not None:
        if threading.active_count() > 1:
            return f"{threading.active_count() - 1} thread(s)"
        if not threading.main_thread().is_alive():
            return "threads joined at exit (threading shut down)"
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        pass
    else:
        return "a child process"
    # the listing's own descriptor is in it, and closed again by the time it is read
    extra = [fd for fd in sorted({int(n) for n in os.listdir("/proc/self/fd")} - {0, 1, 2, sock_fd}) if _is_open(fd)]
    return f"descriptor(s) {extra}" if extra else ""


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _take(fds: list[int], received: list[int]) -> None:
    """The client's descriptors as this command's 0-2 (a std fd the client had closed is
    closed here too); the received duplicates closed."""
    for target, fd in zip(fds, received):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    for target in proto.STD_FDS:
        if target not in fds:
            try:
                os.close(target)
            except OSError:
                pass


def _release_std() -> None:
    """fds 0-2 onto /dev/null: the client's pipes are the client's alone again, so its
    shell sees the command's output end when the client exits."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in proto.STD_FDS:
        os.dup2(null, fd)
    os.close(null)


def run_one(req: proto.Request, fds: list[int], received: list[int], streams: tuple) -> int:
    """Become the command for one run: its fds, cwd, environment, name and std streams, the
    module run as ``python -m`` would. Its exit status."""
    _take(fds, received)
    try:
        os.chdir(req.cwd)
    except OSError:
        os.chdir("/")
    os.environ.clear()
    os.environ.update({os.fsdecode(k): os.fsdecode(v) for k, v in req.env.items()})
    _std_streams(streams)
    name_process(req.target.rsplit(".", 1)[-1][:COMM_MAX])  # as FreeBSD's ps names it: sysctl, swanctl
    return run_as_main(req.target, [os.fsdecode(a) for a in req.args], stop_threads=False)


def serve(sock: socket.socket, req: proto.Request, fds: list[int], received: list[int]) -> None:
    """In the freshly forked worker: run ``req``, then each request the server sends on
    ``sock``, until the server closes it or a command leaves something behind. Never
    returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)  # the server's SIGCHLD wakeup is not the command's
        # nor are its handlers; and SIGHUP at its default, as in a session FreeBSD's sshd
        # starts, whatever the lab's starter ignored (nohup): a cut session hangs it up
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.setsid()
        keep = sock.fileno()
        for target, fd in zip(fds, received):
            os.dup2(fd, target)
        received = list(fds)
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        base = _Baseline(keep)
        while True:
            code = run_one(req, fds, received, base.streams)
            why = left_behind(keep)
            if why:
                os._exit(code)  # as a fresh child would have; its orphans go to the server
            base.restore()
            _release_std()
            name_process(IDLE_NAME)
            sock.sendall(f"exit {code}\n".encode())
            os.chdir("/")
            try:
                req, fds, received = receive(sock)
            except (EOFError, OSError, ValueError):
                os._exit(0)  # the server retired this worker, or is gone
    except BaseException:  # noqa: BLE001 -- whatever happens, the worker never returns to the server loop
        try:
            traceback.print_exc()
        finally:
            os._exit(code or 1)


def receive(sock: socket.socket) -> tuple[proto.Request, list[int], list[int]]:
    """The next request from the server: (request, which std fds, the descriptors);
    EOFError when the server closed the pair, ValueError mid-request."""
    header, received = proto.recv_header(sock)
    if not header:
        raise EOFError("the server closed the worker's socket")
    length, fds, _peer = proto.decode_header(header)
    return proto.decode_request(proto.recv_exact(sock, length)), fds, received


def hand(sock: socket.socket, req: proto.Request, fds: list[int], received: list[int]) -> bool:
    """Send an idle worker its next request (the descriptors ride along); False when the
    worker is gone (the server then forks a new one)."""
    try:
        proto.send_request(sock, req, received, fds)
    except OSError:
        return False
    return True
