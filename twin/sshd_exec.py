"""SSH exec requests on the emulated appliance: root's csh runs the command string.

Why apart from the server: this is what makes the suite's commands behave as on
OPNsense -- tcsh started as `csh -c "<command>"` by twin.nsexec inside the appliance's
namespaces, stdin/stdout/stderr pumped to the channel, the exit status (a signal n as
128+n), and the whole process group killed when the session is cut.
Command strings are never logged (they may carry secrets).
"""
from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import paramiko

from twin import nsexec
from twin.errors import SshdError
from twin.fbsd.install import REPO_ROOT
from twin.labprocs import child_setup
from twin.runtime import HostDir, stop_process, wait_for_socket

if TYPE_CHECKING:
    from twin.sshd import ApplianceSshServer

log = logging.getLogger("twin.sshd")

SHELL = "/usr/bin/tcsh"
SHELL_ARGV0 = "csh"  # OpenSSH execs the login shell as basename(shell) -c CMD; OPNsense's is csh
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PUMP_CHUNK = 32768
OUTPUT_DRAIN_SECONDS = 2.0
"""After the command exits, how long to wait for its pipes to reach EOF (a background
child may keep them open forever; OpenSSH would hang, we send the status instead)."""


def appliance_env(host_dir: HostDir) -> dict[str, str]:
    """The environment a root command sees on the emulated appliance."""
    return {
        "PATH": f"{host_dir.bin}:{BASE_PATH}",
        "HOME": "/root",
        "SHELL": "/bin/csh",
        "USER": "root",
        "LOGNAME": "root",
        "TWIN_HOST_DIR": str(host_dir.path),
        "LANG": "C.UTF-8",
    }


COMMAND_SERVER_READY_SECONDS = 15.0


def start_command_server(host_dir: HostDir, netns: str | None) -> subprocess.Popen:
    """The appliance's command server (twin.cmdserver) in the appliance's namespaces, as a
    command would run there: the DIR/bin wrappers hand their commands to it while its
    socket exists. Started before any thread (PR_SET_PDEATHSIG: it dies with this
    process); returns once it listens, SshdError (with its log) when it does not."""
    sock = host_dir.cmd_sock
    sock.unlink(missing_ok=True)
    argv = nsexec.launcher_argv(host_dir.path, netns,
                                [sys.executable, "-S", "-m", "twin.cmdserver", "--socket", str(sock)])
    env = dict(appliance_env(host_dir), PYTHONPATH=str(REPO_ROOT))
    host_dir.log_dir.mkdir(parents=True, exist_ok=True)
    log_path = host_dir.log_dir / "cmdserver.log"
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, env=env,
                                preexec_fn=child_setup, close_fds=True)
    try:
        wait_for_socket(sock, proc, "the command server", log_path, timeout=COMMAND_SERVER_READY_SECONDS)
    except RuntimeError as exc:
        stop_process(proc)
        raise SshdError(f"{exc} (log {log_path})") from None
    return proc


def stop_command_server(proc: subprocess.Popen, host_dir: HostDir) -> None:
    """SIGTERM, wait; the socket goes with it (a wrapper then runs its command itself)."""
    stop_process(proc)
    host_dir.cmd_sock.unlink(missing_ok=True)


def exit_status_of(returncode: int) -> int:
    """Popen returncode -> SSH exit status (a signal n is reported as 128+n, as csh does)."""
    return 128 + (-returncode) if returncode < 0 else returncode


class _ExitWaiter:
    """``exited(timeout) -> bool``: wait up to ``timeout`` for the process to exit.

    Why not ``proc.wait(timeout)``: with a timeout it polls with sleeps growing to 50 ms,
    so a command of 30 ms was answered ~30 ms late -- on every SSH command. A pidfd
    (Linux 5.3) becomes readable the moment the process exits; without one, the polling
    wait is the fallback.
    """

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        try:
            self.fd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.fd = None

    def exited(self, timeout: float) -> bool:
        if self.fd is None:
            try:
                self.proc.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        if self.proc.poll() is None:
            select.select([self.fd], [], [], timeout)
            if self.proc.poll() is None:
                return False
        self.close()
        return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class ExecSession:
    """One exec request: the process plus the threads pumping it to the channel."""

    def __init__(self, server: "ApplianceSshServer", channel: paramiko.Channel, command: bytes):
        self.server = server
        self.channel = channel
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, name="twin-sshd-exec", daemon=True).start()

    def _run(self) -> None:
        chan = self.channel
        argv = nsexec.launcher_argv(
            self.server.host_dir.path,
            self.server.netns,
            [SHELL, "-c", os.fsdecode(self.command)],
            argv0=SHELL_ARGV0,
        )
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=appliance_env(self.server.host_dir),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            try:
                chan.sendall_stderr(f"twin.sshd: cannot start shell: {exc.strerror}\n".encode())
                chan.send_exit_status(126)
            finally:
                chan.close()
            return
        self.server.register_session(self)
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        t_out = threading.Thread(target=self._pump_out, args=(proc.stdout, chan.sendall), daemon=True)
        t_err = threading.Thread(target=self._pump_out, args=(proc.stderr, chan.sendall_stderr), daemon=True)
        t_in = threading.Thread(target=self._pump_in, args=(proc.stdin,), daemon=True)
        for t in (t_out, t_err, t_in):
            t.start()
        try:
            waiter = _ExitWaiter(proc)
            try:
                while not waiter.exited(0.2):
                    transport = chan.get_transport()
                    if chan.closed or transport is None or not transport.is_active():
                        self.kill()
            finally:
                waiter.close()
            proc.wait()
            deadline = time.monotonic() + OUTPUT_DRAIN_SECONDS
            for t in (t_out, t_err):
                t.join(max(0.0, deadline - time.monotonic()))
            if not chan.closed:
                try:
                    chan.send_exit_status(exit_status_of(proc.returncode))
                    chan.shutdown_write()
                except (OSError, EOFError, paramiko.SSHException) as exc:
                    log.info("exit status not delivered, the client left: %r", exc)
                chan.close()
        finally:
            self.server.unregister_session(self)

    def _pump_out(self, pipe, send) -> None:
        fd = pipe.fileno()
        try:
            while True:
                data = os.read(fd, PUMP_CHUNK)
                if not data:
                    break
                send(data)
        except (OSError, EOFError, paramiko.SSHException) as exc:  # the client went away
            log.debug("output pump stopped: %r", exc)
        finally:
            pipe.close()

    def _pump_in(self, pipe) -> None:
        try:
            while True:
                data = self.channel.recv(PUMP_CHUNK)
                if not data:
                    break
                pipe.write(data)
                pipe.flush()
        except (OSError, EOFError, ValueError, paramiko.SSHException) as exc:  # command exited or client left
            log.debug("input pump stopped: %r", exc)
        finally:
            try:
                pipe.close()
            except OSError as exc:  # the command exited with unread input (EPIPE on flush)
                log.debug("closing the command's stdin: %r", exc)

    def kill(self) -> None:
        """Kill the command's whole process group (session cut or server stopping)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig in (signal.SIGHUP, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=0.5)
                return
            except subprocess.TimeoutExpired:
                continue
