"""SSH exec requests on the emulated appliance: root's csh runs the command string.

Why apart from the server: this is what makes the suite's commands behave as on
OPNsense -- tcsh started as `csh -f -c "<command>"` (SHELL_FLAGS says why -f) inside the appliance's namespaces (by
its command server, ipsec_hil_twin.shell.cmdserver, which ipsec_hil_twin.machinery.nsexec put there), stdin/stdout/stderr
pumped to the channel, the exit status (a signal n as 128+n), and the whole process group
killed when the session is cut.
Command strings are never logged (they may carry secrets).
"""
from __future__ import annotations

import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Protocol

import paramiko

from ipsec_hil_twin.shell import cmdclient as proto
from ipsec_hil_twin.machinery import nsexec
from ipsec_hil_twin.errors import SshdError
from ipsec_hil_twin import python_path
from ipsec_hil_twin.machinery.labprocs import child_setup
from ipsec_hil_twin.machinery.runtime import HostDir, stop_process, wait_for_socket

log = logging.getLogger("ipsec_hil_twin.shell.sshd")

SHELL = "/usr/bin/tcsh"
SHELL_ARGV0 = "csh"  # OpenSSH execs the login shell as basename(shell) -c CMD; OPNsense's is csh
SHELL_FLAGS = ("-f",)
"""Before ``-c``: read no startup file. OpenSSH's ``csh -c`` would read /etc/csh.cshrc and
~/.cshrc -- here those would be the Debian host's (its /etc/csh.cshrc forks ``/bin/ls`` on
every start), never the appliance's, and the twin has no root .cshrc to emulate. The
command string is parsed by the same tcsh either way; skipping the host's file saves
1.5 ms of the 3 ms a tcsh start costs, on every command of every run (issue 15: the
own tests were CPU-bound at 93 % on two cores)."""
HOME = "/root"
SHELL_START_SECONDS = 10.0
"""How long the command server may take to fork the shell (and to answer its status once
the connection says it is there)."""
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PUMP_CHUNK = 32768
OUTPUT_DRAIN_SECONDS = 2.0
"""After the command exits, how long to wait for its pipes to reach EOF (a background
child may keep them open forever; OpenSSH would hang, we send the status instead)."""


def appliance_env(host_dir: HostDir) -> dict[str, str]:
    """The environment a root command sees on the emulated appliance."""
    return {
        "PATH": f"{host_dir.bin}:{BASE_PATH}",
        "HOME": HOME,
        "SHELL": "/bin/csh",
        "USER": "root",
        "LOGNAME": "root",
        "TWIN_HOST_DIR": str(host_dir.path),
        "LANG": "C.UTF-8",
    }


COMMAND_SERVER_READY_SECONDS = 15.0


def start_command_server(host_dir: HostDir, netns: str | None) -> subprocess.Popen:
    """The appliance's command server (ipsec_hil_twin.shell.cmdserver) in the appliance's namespaces, as a
    command would run there: the DIR/bin wrappers hand their commands to it while its
    socket exists. Started before any thread (PR_SET_PDEATHSIG: it dies with this
    process); returns once it listens, SshdError (with its log) when it does not."""
    sock = host_dir.cmd_sock
    sock.unlink(missing_ok=True)
    argv = nsexec.launcher_argv(host_dir.path, netns, [sys.executable, "-S", "-m", "ipsec_hil_twin.shell.cmdserver",
                                                       "--socket", str(sock), "--exec", SHELL])
    env = dict(appliance_env(host_dir), PYTHONPATH=python_path())
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


def stop_command_server(proc: subprocess.Popen) -> None:
    """SIGTERM, wait; the server removes its socket on the way out (a wrapper then runs its
    command itself). One SSH server per appliance: a second one's server takes the socket."""
    stop_process(proc)


def exit_status_of(returncode: int) -> int:
    """Popen returncode -> SSH exit status (a signal n is reported as 128+n, as csh does)."""
    return 128 + (-returncode) if returncode < 0 else returncode


def connect_unix(conn: socket.socket, path: Path, timeout: float) -> None:
    """Connect ``conn`` (AF_UNIX, stream) to ``path``, waiting up to ``timeout`` while the
    listener's accept queue is full.

    Why not ``settimeout`` and ``connect``: a socket with a timeout is non-blocking, and a
    non-blocking AF_UNIX connect to a listener whose queue is full fails at once with
    EAGAIN (Linux unix_stream_connect; TCP would say EINPROGRESS and wait). The command
    server is one thread that accepts between requests: 80 SSH commands at once beside
    two busy loops found its queue full, and those shells were refused ("cannot start
    shell: Resource temporarily unavailable", status 126; issue 52). A blocking connect
    sleeps until the server accepts, bounded by SO_SNDTIMEO (then EAGAIN, an OSError)."""
    conn.setblocking(True)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(timeout))
    try:
        conn.connect(str(path))
    finally:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(0.0))


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1e6))


class ServedShell:
    """The shell of one exec request, started by the appliance's command server.

    Why there: the server already lives in the appliance's network namespace and mounts
    (ipsec_hil_twin.machinery.nsexec entered them once); it forks and execs the shell (an EXEC request of
    ipsec_hil_twin.shell.cmdclient's protocol), which saves the launcher's interpreter, ~20 ms of CPU, on
    every SSH command. The three pipes are made here and their far ends handed over;
    the server answers the shell's pid at once (its process group is what a cut session
    kills) and its exit status or fatal signal when it ends -- on the connection, which
    wakes this side the moment the shell exits. Popen-like: pid, stdin/stdout/stderr,
    returncode (negative: the signal), poll(), plus exited(timeout). Its session thread
    and a server stopping (kill) may ask at once: one reads the connection at a time.
    """

    def __init__(self, sock: Path, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.returncode: int | None = None
        self.pid = 0
        self._rest = b""
        self._reading = threading.Lock()
        pipes = [os.pipe() for _ in range(3)]
        far = [pipes[0][0], pipes[1][1], pipes[2][1]]
        self.stdin = os.fdopen(pipes[0][1], "wb")
        self.stdout = os.fdopen(pipes[1][0], "rb")
        self.stderr = os.fdopen(pipes[2][0], "rb")
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connect_unix(self.conn, sock, SHELL_START_SECONDS)
            self.conn.settimeout(SHELL_START_SECONDS)
            req = proto.Request(proto.EXEC, SHELL, [os.fsencode(a) for a in argv], os.fsencode(cwd),
                                {os.fsencode(k): os.fsencode(v) for k, v in env.items()})
            proto.send_request(self.conn, req, far, list(proto.STD_FDS))
            line = self._line()
            if not line.startswith(b"pid ") or not line[4:].strip().isdigit():
                raise OSError(f"command server {sock}: {line.decode(errors='replace').strip() or 'no answer'}")
            self.pid = int(line[4:])
        except BaseException:
            for f in (self.stdin, self.stdout, self.stderr, self.conn):
                f.close()
            raise
        finally:
            for fd in far:
                os.close(fd)

    def _line(self) -> bytes:
        """The server's next answer line (b"" when it closed first); what came after the
        line stays for the next call -- a quick shell's status can ride with its pid."""
        while b"\n" not in self._rest:
            chunk = self.conn.recv(256)
            if not chunk:
                line, self._rest = self._rest, b""
                return line
            self._rest += chunk
        line, _, self._rest = self._rest.partition(b"\n")
        return line + b"\n"

    def exited(self, timeout: float) -> bool:
        """Wait up to TIMEOUT for the shell's end; True once its status is in returncode."""
        if self.returncode is not None:
            return True
        if not self._reading.acquire(timeout=timeout):
            return self.returncode is not None
        try:
            return self._read_status(timeout)
        finally:
            self._reading.release()

    def _read_status(self, timeout: float) -> bool:
        if self.returncode is not None:
            return True
        if b"\n" not in self._rest:
            ready, _, _ = select.select([self.conn], [], [], timeout)
            if not ready:
                return False
        self.conn.settimeout(SHELL_START_SECONDS)
        status = proto.parse_status(self._line())
        if status is None:  # the server went away mid-command: no status to report
            log.info("command server closed without the shell's status")
            self.returncode = -signal.SIGKILL
        else:
            self.returncode = -status[1] if status[0] == "signal" else status[1]
        self.conn.close()
        return True

    def poll(self) -> int | None:
        self.exited(0)
        return self.returncode


class Sessions(Protocol):
    """Where running exec sessions are kept, so a shutdown can end them
    (ipsec_hil_twin.shell.sshd.ApplianceSshServer)."""

    def register_session(self, s: ExecSession) -> None: ...

    def unregister_session(self, s: ExecSession) -> None: ...


class ExecSession:
    """One exec request: the process plus the threads pumping it to the channel.

    Given the appliance's host dir (its command socket and environment) and the registry
    of running sessions, not the SSH server itself: this module and ipsec_hil_twin.shell.sshd
    no longer import each other."""

    def __init__(self, host_dir: HostDir, sessions: Sessions, channel: paramiko.Channel, command: bytes):
        self.host_dir = host_dir
        self.sessions = sessions
        self.channel = channel
        self.command = command
        self.proc: ServedShell | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, name="twin-sshd-exec", daemon=True).start()

    def _run(self) -> None:
        chan = self.channel
        try:
            self.proc = ServedShell(self.host_dir.cmd_sock, [SHELL_ARGV0, *SHELL_FLAGS, "-c", os.fsdecode(self.command)],
                                    appliance_env(self.host_dir), HOME)
        except OSError as exc:
            try:
                chan.sendall_stderr(f"ipsec_hil_twin.shell.sshd: cannot start shell: {exc.strerror or exc}\n".encode())
                chan.send_exit_status(126)
            finally:
                chan.close()
            return
        self.sessions.register_session(self)
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        t_out = threading.Thread(target=self._pump_out, args=(proc.stdout, chan.sendall), daemon=True)
        t_err = threading.Thread(target=self._pump_out, args=(proc.stderr, chan.sendall_stderr), daemon=True)
        t_in = threading.Thread(target=self._pump_in, args=(proc.stdin,), daemon=True)
        for t in (t_out, t_err, t_in):
            t.start()
        try:
            while not proc.exited(0.2):
                transport = chan.get_transport()
                if chan.closed or transport is None or not transport.is_active():
                    self.kill()
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
            self.sessions.unregister_session(self)

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
            if proc.exited(0.5):
                return
