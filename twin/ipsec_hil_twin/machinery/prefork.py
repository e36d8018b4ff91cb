"""The lab's components forked from the supervisor's warm interpreter instead of started.

Why: each of a lab's nine components (engine, IKE daemon and SSH server per appliance)
was ``ip netns exec NS python -m MODULE ...``: an interpreter and its imports per process,
0.29 CPU-s for an engine's control process, 0.16 for an SSH server, 0.12 for an IKE
daemon (measured 12-04 from /proc), about 1.7 CPU-s a lab, and an own-test run starts
dozens of labs (issue 15). Forked from a process that imported the modules once, a
component skips all of it.

How, and why this way: a fork is only clean before the supervisor holds anything a child
must not inherit -- a thread, a socket, a pyroute2 object whose descriptor a child would
close behind its back. So :func:`prefork` runs first in the build (after the topology is
read, before the network is built): it imports the components' modules and forks one
child per component. Each child closes every descriptor but 0-2 and its pipe, takes the
place a started component had (a session of its own, PR_SET_PDEATHSIG SIGTERM), and
blocks reading the pipe. Once the network is up the lab sends it its :class:`Launch`
(:meth:`Slot.launch`) and the child becomes what ``ip netns exec NS python -m MODULE
ARGS`` with ``PYTHONUNBUFFERED=1`` would have started:

- the namespace, a mount namespace with /sys remounted for it and /etc/netns/NS bound
  over /etc (ipsec_hil_twin.machinery.nsexec.ip_netns_exec_view) -- none of it for a component in the root
  namespace (the SSH server);
- /dev/null as stdin, the log file (opened for append) as stdout and stderr, both
  unbuffered;
- the environment given, an empty signal mask and a fresh interpreter's dispositions
  (SIGINT raises KeyboardInterrupt, SIGPIPE and SIGXFSZ ignored, the rest default);
- the module run as ``__main__`` with the interpreter's exit handling (ipsec_hil_twin.machinery.warmrun).

A child whose pipe closes without a launch (the build failed, or the lab had no use for
it) exits 0 at once; :meth:`Slot.cancel` reaps it. Later starts -- an appliance's reboot,
from a supervisor that by then holds sockets -- go through ``ip netns exec`` as before.
"""
from __future__ import annotations

import importlib
import io
import json
import os
import signal
import sys
import traceback
from dataclasses import asdict, dataclass

from ipsec_hil_twin.machinery.labprocs import child_setup


@dataclass(frozen=True)
class Launch:
    """What a pre-forked child is to become: ``python -m MODULE *ARGS`` with ``env`` in
    namespace ``netns`` (None: this one), stdout and stderr appended to ``log``."""

    module: str
    args: list[str]
    env: dict[str, str]
    log: str
    netns: str | None = None


class WarmProcess:
    """A launched child as the lab watches it: the part of Popen it uses (pid,
    returncode, poll)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (labprocs.kill_record): gone
                self.returncode = 0
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class Slot:
    """One pre-forked child waiting for its :class:`Launch`."""

    def __init__(self, pid: int, pipe_w: int) -> None:
        self.pid = pid
        self._w: int | None = pipe_w

    def launch(self, launch: Launch) -> WarmProcess:
        """Hand the child its launch; it runs from here on (the lab probes its readiness)."""
        if self._w is None:
            raise RuntimeError(f"pre-forked child {self.pid}: launched or cancelled already")
        data = json.dumps(asdict(launch)).encode()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._w, view):]
        finally:
            os.close(self._w)
            self._w = None
        return WarmProcess(self.pid)

    def cancel(self) -> None:
        """Close the pipe unused: the child exits; reap it. Idempotent."""
        if self._w is None:
            return
        os.close(self._w)
        self._w = None
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def prefork(count: int, modules: list[str]) -> list[Slot]:
    """Import ``modules`` here, then fork ``count`` children waiting for a launch. Call it
    only from a single-threaded process holding no socket yet (the module docstring)."""
    for module in modules:
        importlib.import_module(module)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # nothing buffered here may be written twice
    slots = []
    try:
        for _ in range(count):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(w)
                _wait_and_become(r)  # never returns
            os.close(r)
            slots.append(Slot(pid, w))
    except BaseException:
        for slot in slots:
            slot.cancel()
        raise
    return slots


def _wait_and_become(r: int) -> None:
    """In the child: wait for the launch, become it, exit with its status."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):  # the supervisor's build handlers are not ours:
            signal.signal(sig, signal.SIG_DFL)       # its death (PDEATHSIG) or a signal ends us
        child_setup()
        os.closerange(3, r)
        os.closerange(r + 1, os.sysconf("SC_OPEN_MAX"))
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.close(r)
        if not data:
            os._exit(0)
        code = _become(Launch(**json.loads(data)))
    except BaseException:  # noqa: BLE001 -- whatever happens, never return into the supervisor
        try:
            traceback.print_exc()
        finally:
            os._exit(code or 1)
    os._exit(code)


def _become(launch: Launch) -> int:
    from ipsec_hil_twin.machinery import nsexec
    from ipsec_hil_twin.machinery.warmrun import run_as_main

    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(launch.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for fd, target in ((null, 0), (log, 1), (log, 2)):
        os.dup2(fd, target)
    os.close(null)
    os.close(log)
    encoding = sys.stdout.encoding if sys.stdout is not None else "utf-8"
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=encoding)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=encoding, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=encoding,
                                  errors="backslashreplace", write_through=True)
    signal.set_wakeup_fd(-1)
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            if sig == signal.SIGINT:
                signal.signal(sig, signal.default_int_handler)
            elif sig in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_IGN)
            elif signal.getsignal(sig) not in (signal.SIG_DFL, None):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # not settable here (a real-time signal the C library reserves)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    os.environ.clear()
    os.environ.update(launch.env)
    if launch.netns:
        try:
            nsexec.ip_netns_exec_view(launch.netns)
        except nsexec.NsExecError as exc:
            print(f"ipsec_hil_twin.machinery.prefork: {launch.module} in {launch.netns}: {exc}", file=sys.stderr)
            return nsexec.EXIT_SETUP_FAILED
    import atexit
    atexit._clear()  # the supervisor's exit handlers are not the component's
    return run_as_main(launch.module, list(launch.args))
