"""Host transports: run POSIX sh scripts and move files on appliances and the bench.

Why this shape (see docs/DESIGN.md "Transport" and the 000/001 pages):
- OPNsense runs every SSH command string through root's login shell, csh/tcsh, where
  `2>&1` writes a file named `1`, `>/dev/null 2>&1` is "Ambiguous output redirect.",
  `!` is history even in single quotes and `echo "a\\1b"` writes byte 0x01. So the ONLY
  command string ever sent to the login shell is the fixed literal "/bin/sh -s"; the
  script itself travels on the channel's stdin and is interpreted by sh.
- stdout and stderr are kept apart and drained concurrently (paramiko #1778/#213:
  reading one stream after the other deadlocks when both exceed the window).
- Host keys are pinned per lab (known_hosts) with a rejecting policy; there is no
  trust-on-first-use switch on purpose.
- File contents and stdin data are never logged: they carry pre-shared keys.

Library code: no pytest import.
"""

from __future__ import annotations

import base64
import logging
import os
import select
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import paramiko

from plugin.lab.errors import CommandTimeout, HostKeyError, TransportError

log = logging.getLogger(__name__)

#: The one and only command string given to the remote login shell.
SH_COMMAND = "/bin/sh -s"

_CHUNK = 65536


class CommandFailed(TransportError):
    """A command ran but exited non-zero where the caller required success."""

    def __init__(self, host: str, what: str, status: int, stderr_tail: str) -> None:
        self.host = host
        self.what = what
        self.status = status
        self.stderr_tail = stderr_tail
        msg = f"{host}: {what} failed with status {status}"
        if stderr_tail:
            msg += f"; stderr (last lines):\n{stderr_tail}"
        super().__init__(msg)


@dataclass
class RunResult:
    """What a script produced. Text is UTF-8 decoded with surrogateescape, so
    `stdout.encode("utf-8", "surrogateescape")` gives back the exact bytes."""

    stdout: str
    stderr: str
    status: int
    duration: float
    host: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 0

    def check(self, what: str, tail_lines: int = 10) -> "RunResult":
        """Return self if status is 0, else raise CommandFailed naming `what`."""
        if self.status != 0:
            tail = "\n".join(self.stderr.rstrip("\n").splitlines()[-tail_lines:])
            raise CommandFailed(self.host, what, self.status, tail)
        return self


@runtime_checkable
class Host(Protocol):
    """What every transport offers (an appliance over SSH, the bench locally)."""

    name: str

    def run(self, script: str, *, timeout: float | None = None, stdin: bytes | None = None) -> RunResult: ...
    def read_file(self, path: str) -> bytes: ...
    def write_file_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None: ...
    def exists(self, path: str) -> bool: ...
    def remove(self, path: str, missing_ok: bool = True) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def close(self) -> None: ...


# --------------------------------------------------------------------------- helpers


def argv(*args: str | os.PathLike[str] | int) -> str:
    """One sh command line, every argument quoted with shlex.quote (safe for any bytes
    sh accepts: quotes, backslashes, `$`, `!`, backticks, `;`, newlines)."""
    if not args:
        raise ValueError("argv() needs at least the command name")
    return " ".join(shlex.quote(os.fspath(a) if not isinstance(a, int) else str(a)) for a in args)


def script(*lines: str) -> str:
    """Join sh lines into one script (each line is already valid sh)."""
    return "\n".join(lines) + "\n"


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


_STDIN_EOF = "__IPSEC_HIL_STDIN_EOF__"


def _wrap(body: str, stdin: bytes | None = None, pid_file: str | None = None) -> bytes:
    """Enclose the script in a `{ ...; }` group with its own stdin.

    Why: sh -s reads the script from stdin as it goes, so a command in the script that
    reads stdin (cat, read, ssh...) would swallow the rest of the script. A brace group
    is parsed completely before it runs, and its redirection gives the commands
    /dev/null (or the caller's data) instead. A syntax error anywhere means nothing
    runs at all (sh exits 2), which is what we want on an appliance.

    `stdin` data travels inside the script as a base64 here-document (csh never sees
    it), decoded on the host (`b64decode -r` on FreeBSD, `base64 -d` elsewhere) into a
    mktemp file that the group reads and removes first. Not via SFTP: one round trip
    instead of upload + remove, and no reliance on SFTP and the shell seeing the same
    /tmp (the virtual lab maps SFTP paths into DIR/root and binds only some directories
    for its shell).

    `pid_file`: the shell records its pid there (removed on exit) so that a timed-out
    command's process group can be killed from a second session: closing an SSH channel
    does not stop the remote processes (measured: `sleep` kept running under sshd).
    """
    if not body.endswith("\n"):
        body += "\n"
    head = ""
    if pid_file:
        q = shlex.quote(pid_file)
        head = f"trap 'rm -f {q}' EXIT\n(umask 077; echo $$ > {q}) 2>/dev/null\n"
    if stdin is None:
        return (head + "{\n" + body + "} < /dev/null\n").encode("utf-8", "surrogateescape")
    b64 = base64.encodebytes(stdin).decode("ascii")  # 76-column lines, newline-terminated
    return (
        head
        + "__hil_in=$(mktemp /tmp/.ipsec-hil-stdin-XXXXXXXX) || exit 125\n"
        + "if command -v b64decode >/dev/null 2>&1; then __hil_d='b64decode -r'; else __hil_d='base64 -d'; fi\n"
        + f"$__hil_d > \"$__hil_in\" <<'{_STDIN_EOF}' || {{ rm -f \"$__hil_in\"; echo 'cannot decode stdin data' >&2; exit 125; }}\n"
        + b64
        + f"{_STDIN_EOF}\n"
        + "{\nrm -f \"$__hil_in\"\nunset __hil_d\n"
        + body
        + "} < \"$__hil_in\"\n"
    ).encode("utf-8", "surrogateescape")


def _kill_script(pid_file: str) -> str:
    """sh that kills the process group of the shell whose pid is in pid_file (sshd puts
    each session in its own session/process group: login shell, sh, and children)."""
    q = shlex.quote(pid_file)
    return (
        f"p=$(cat {q} 2>/dev/null) || exit 0\n"
        f"rm -f {q}\n"
        'case "$p" in ""|*[!0-9]*) exit 0;; esac\n'
        'g=$(ps -o pgid= -p "$p" | tr -d " ")\n'
        'case "$g" in ""|0|1|*[!0-9]*) exit 0;; esac\n'
        '[ "$g" = "$(ps -o pgid= -p $$ | tr -d " ")" ] && exit 0\n'
        'kill -s KILL -- "-$g" 2>/dev/null\n'
        "exit 0\n"
    )


def _close_quietly(obj: Any) -> None:
    try:
        obj.close()
    except Exception:  # noqa: BLE001 -- closing must not mask the error being handled
        pass


def _random_token(n: int = 6) -> str:
    return os.urandom(n).hex()


# --------------------------------------------------------------------------- SSH


class _RejectWithHint(paramiko.RejectPolicy):
    """RejectPolicy whose error says which known_hosts to update and how."""

    def __init__(self, known_hosts: str, address: str, port: int, jump: str | None = None) -> None:
        self.known_hosts = known_hosts
        self.address = address
        self.port = port
        self.jump = jump

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        scan = f"ssh-keyscan -p {self.port} {self.address}"
        how = (f"{scan} >> {self.known_hosts}" if self.jump is None else
               f"ssh {self.jump} {scan} >> {self.known_hosts} (the host is reached through {self.jump})")
        raise HostKeyError(
            f"host key of {hostname} ({key.get_name()} {key.fingerprint}) is not in "
            f"{self.known_hosts}; no command was sent. If this host is really the lab's, "
            f"verify the fingerprint out of band and add it with: {how}"
        )


class SshHost:
    """An appliance (or an SSH-reached bench) over one reused paramiko connection."""

    def __init__(
        self,
        name: str,
        address: str,
        port: int,
        user: str,
        key_file: str | os.PathLike[str],
        known_hosts: str | os.PathLike[str],
        jump: "SshHost | None" = None,
        connect_timeout: float = 10,
        command_timeout: float = 60,
        keepalive: int = 15,
    ) -> None:
        self.name = name
        self.address = address
        self.port = int(port)
        self.user = user
        self.key_file = os.fspath(key_file)
        self.known_hosts = os.fspath(known_hosts)
        self.jump = jump
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.keepalive = keepalive
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.RLock()
        self._sftps: dict[int, tuple[threading.Thread, int, paramiko.SFTPClient]] = {}
        self._generation = 0  # bumped on every (re)connect; stale SFTP sessions are dropped

    def __repr__(self) -> str:
        via = f" via {self.jump.name}" if self.jump else ""
        return f"SshHost({self.name!r}, {self.user}@{self.address}:{self.port}{via})"

    # ---- connection

    def _connect(self) -> paramiko.SSHClient:
        if not Path(self.known_hosts).is_file():
            raise HostKeyError(
                f"{self.name}: known_hosts file {self.known_hosts} does not exist; create it "
                f"(after checking the fingerprint) with: "
                f"ssh-keyscan -p {self.port} {self.address} >> {self.known_hosts}"
            )
        client = paramiko.SSHClient()
        # Only the lab's file, never ~/.ssh/known_hosts (load_system_host_keys is not called).
        client.load_host_keys(self.known_hosts)
        client.set_missing_host_key_policy(_RejectWithHint(
            self.known_hosts, self.address, self.port,
            None if self.jump is None else f"{self.jump.user}@{self.jump.address} -p {self.jump.port}"))
        sock = None
        if self.jump is not None:
            try:
                sock = self.jump.transport().open_channel(
                    "direct-tcpip", (self.address, self.port), ("127.0.0.1", 0),
                    timeout=self.connect_timeout,
                )
            except (paramiko.SSHException, OSError, EOFError) as e:
                raise TransportError(
                    f"{self.name}: jump host {self.jump.name} could not open a channel to "
                    f"{self.address}:{self.port}: {e}"
                ) from e
        t0 = time.monotonic()
        try:
            client.connect(
                self.address, port=self.port, username=self.user,
                key_filename=self.key_file, allow_agent=False, look_for_keys=False,
                timeout=self.connect_timeout, banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout, channel_timeout=self.connect_timeout,
                sock=sock,
            )
        except HostKeyError:
            client.close()
            raise
        except paramiko.BadHostKeyException as e:
            client.close()
            raise HostKeyError(
                f"{self.name}: host key of [{self.address}]:{self.port} CHANGED: got "
                f"{e.key.get_name()} {e.key.fingerprint}, {self.known_hosts} pins "
                f"{e.expected_key.get_name()} {e.expected_key.fingerprint}; no command was "
                f"sent. If the appliance was reinstalled, verify the new fingerprint, remove "
                f"the old line (ssh-keygen -f {self.known_hosts} -R '[{self.address}]:{self.port}') "
                f"and add the new one (ssh-keyscan -p {self.port} {self.address} >> {self.known_hosts})"
            ) from e
        except paramiko.AuthenticationException as e:
            client.close()
            raise TransportError(
                f"{self.name}: key authentication as {self.user}@{self.address}:{self.port} "
                f"with {self.key_file} failed: {e}"
            ) from e
        except (paramiko.SSHException, OSError, EOFError) as e:
            client.close()
            raise TransportError(
                f"{self.name}: cannot connect to {self.user}@{self.address}:{self.port}: "
                f"{type(e).__name__}: {e}"
            ) from e
        transport = client.get_transport()
        assert transport is not None
        if self.keepalive:
            transport.set_keepalive(self.keepalive)
        log.debug("%s: connected in %.3fs", self.name, time.monotonic() - t0)
        return client

    def transport(self) -> paramiko.Transport:
        """The live transport, connecting (or reconnecting once) as needed."""
        with self._lock:
            if self._client is not None:
                t = self._client.get_transport()
                if t is not None and t.is_active():
                    return t
                log.debug("%s: transport died, reconnecting", self.name)
                self._drop()
            self._client = self._connect()
            self._generation += 1
            t = self._client.get_transport()
            assert t is not None
            return t

    def _drop(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001 -- closing a dead client must not mask the cause
                pass
            self._client = None

    def close(self) -> None:
        with self._lock:
            for _, _, client in self._sftps.values():
                _close_quietly(client)
            self._sftps.clear()
            self._drop()

    def __enter__(self) -> "SshHost":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- commands

    def _open_channel(self, opener: str) -> paramiko.Channel:
        """Open a session channel (for a command or SFTP).

        - Connection dead: reconnect once and retry. Nothing has been executed yet, so a
          retry cannot run a command twice.
        - Server refuses the channel (ChannelException: OpenSSH's MaxSessions, default
          10 per connection): the connection is fine and other threads' channels on it
          must survive, so wait and retry until connect_timeout, then say so.
        """
        deadline = time.monotonic() + self.connect_timeout
        reconnected = False
        delay = 0.02
        while True:
            t = self.transport()
            try:
                return t.open_session(timeout=self.connect_timeout)
            except (paramiko.SSHException, EOFError, OSError) as e:
                if t.is_active():
                    # Refused while the connection lives. (paramiko hands the
                    # ChannelException to whichever thread asks first; others get a
                    # plain "Unable to open channel.")
                    if time.monotonic() + delay > deadline:
                        raise TransportError(
                            f"{self.name}: server refused a new {opener} channel for "
                            f"{self.connect_timeout:g}s ({e}); too many at once for its "
                            f"MaxSessions?") from e
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    continue
                if reconnected:
                    raise TransportError(f"{self.name}: cannot open a {opener} channel: {e}") from e
                log.debug("%s: connection died (%s), reconnecting once", self.name, e)
                reconnected = True
                with self._lock:
                    if self._client is not None and self._client.get_transport() is t:
                        self._drop()

    def _open_session(self) -> paramiko.Channel:
        return self._open_channel("command")

    def run(self, script: str, *, timeout: float | None = None, stdin: bytes | None = None) -> RunResult:
        """Run a POSIX sh script: sent on stdin to the literal `/bin/sh -s`.

        `stdin` data (if any) becomes the script's stdin (see _wrap); it is never logged.
        """
        timeout = self.command_timeout if timeout is None else timeout
        pid_file = f"/tmp/.ipsec-hil-run-{_random_token()}"
        payload = _wrap(script, stdin, pid_file)
        t0 = time.monotonic()
        chan = self._open_session()
        try:
            chan.exec_command(SH_COMMAND)
            chan.sendall(payload)
            chan.shutdown_write()
            out, err, status = self._drain(chan, t0 + timeout, timeout)
        except CommandTimeout:
            chan.close()
            self._kill_remote(pid_file)
            raise
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise TransportError(f"{self.name}: command channel failed: {type(e).__name__}: {e}") from e
        finally:
            chan.close()
        dur = time.monotonic() - t0
        if status == -1:  # no exit-status: the connection dropped, or sh died by a signal
            raise TransportError(f"{self.name}: the command ended without an exit status after {dur:.1f}s "
                                 "(SSH connection lost, or the remote shell was killed by a signal)")
        log.debug("%s: sh script (%d lines) status=%d in %.3fs", self.name,
                  script.count("\n") + 1, status, dur)
        return RunResult(_decode(out), _decode(err), status, dur, self.name)

    def _kill_remote(self, pid_file: str) -> None:
        """Best effort: stop what a timed-out command left running on the host."""
        try:
            chan = self._open_session()
            try:
                chan.exec_command(SH_COMMAND)
                chan.sendall(_wrap(_kill_script(pid_file), None))
                chan.shutdown_write()
                self._drain(chan, time.monotonic() + 10, 10)
            finally:
                chan.close()
            log.debug("%s: killed the timed-out command's process group", self.name)
        except TransportError as e:
            log.warning("%s: could not stop a timed-out command: %s", self.name, e)

    def _drain(self, chan: paramiko.Channel, deadline: float, timeout: float) -> tuple[bytes, bytes, int]:
        """Read stdout and stderr together until EOF and the exit status have arrived.

        Not "until the exit status": OpenSSH sends exit-status when the child exits,
        while output may still sit in the pipes (session.c, session_exit_message), so
        stopping at the status loses the tail of the output (seen as a rare short read
        of 3 MiB). EOF comes only after both pipes are drained.
        """
        out: list[bytes] = []
        err: list[bytes] = []
        fd = chan.fileno()  # a pipe paramiko sets when either stream has data or at EOF
        while True:
            progressed = False
            while chan.recv_ready():
                out.append(chan.recv(_CHUNK))
                progressed = True
            while chan.recv_stderr_ready():
                err.append(chan.recv_stderr(_CHUNK))
                progressed = True
            ended = (chan.eof_received or chan.closed) and not (chan.recv_ready() or chan.recv_stderr_ready())
            if ended and chan.exit_status_ready():  # also true once closed
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                chan.close()
                log.debug("%s: command timed out after %.1fs", self.name, timeout)
                raise CommandTimeout(f"{self.name}: command did not finish within {timeout:g}s "
                                     f"(channel closed)")
            if ended:
                chan.status_event.wait(min(remaining, 0.2))  # EOF seen, status on its way
            elif not progressed:
                select.select([fd], [], [], min(remaining, 0.2))
        status = chan.exit_status if chan.status_event.is_set() else -1
        return b"".join(out), b"".join(err), status

    # ---- files (SFTP, one session per thread: SFTPClient is not thread-safe)

    def sftp(self) -> paramiko.SFTPClient:
        """This thread's SFTP session (paramiko's SFTPClient is not thread-safe).
        Sessions of threads that have ended are closed here: each holds a channel, and
        the server allows only MaxSessions of them per connection."""
        me = threading.current_thread()
        self.transport()
        with self._lock:
            for ident, (thread, _, client) in list(self._sftps.items()):
                if not thread.is_alive():
                    del self._sftps[ident]
                    _close_quietly(client)
            entry = self._sftps.get(me.ident or 0)
            if entry is not None and entry[1] == self._generation and entry[0] is me:
                return entry[2]
            generation = self._generation
        chan = self._open_channel("SFTP")
        try:
            chan.invoke_subsystem("sftp")
            client = paramiko.SFTPClient(chan)
        except (paramiko.SSHException, EOFError, OSError) as e:
            chan.close()
            raise TransportError(f"{self.name}: cannot start SFTP: {e}") from e
        with self._lock:
            old = self._sftps.get(me.ident or 0)
            if old is not None:
                _close_quietly(old[2])
            self._sftps[me.ident or 0] = (me, generation, client)
        return client

    def read_file(self, path: str) -> bytes:
        try:
            with self.sftp().open(path, "rb") as f:
                f.prefetch()
                data = f.read()
        except FileNotFoundError as e:
            raise TransportError(f"{self.name}: {path}: no such file") from e
        except (OSError, paramiko.SSHException) as e:
            raise TransportError(f"{self.name}: cannot read {path}: {e}") from e
        log.debug("%s: read %s (%d bytes)", self.name, path, len(data))
        return data

    def _put(self, path: str, data: bytes, mode: int) -> None:
        sftp = self.sftp()
        try:
            with sftp.open(path, "wb") as f:
                sftp.chmod(path, mode)  # before the data: a secret is never world-readable
                f.set_pipelined(True)
                f.write(data)
        except (OSError, paramiko.SSHException) as e:
            raise TransportError(f"{self.name}: cannot write {path}: {e}") from e

    def write_file_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write to `<dir>/.<name>.tmp-<random>` and posix-rename over `path`: readers see
        the old or the new file, never a half-written one."""
        d, base = os.path.split(path)
        tmp = f"{d or '.'}/.{base}.tmp-{_random_token()}"
        try:
            self._put(tmp, data, mode)
            st = self.sftp().stat(tmp)
            if st.st_size != len(data):
                raise TransportError(f"{self.name}: {tmp}: wrote {len(data)} bytes, server has {st.st_size}")
            self.rename(tmp, path)
        except BaseException:
            try:
                self.remove(tmp)
            except TransportError:
                pass
            raise
        log.debug("%s: wrote %s atomically (%d bytes, mode %o)", self.name, path, len(data), mode)

    def exists(self, path: str) -> bool:
        try:
            self.sftp().stat(path)
            return True
        except FileNotFoundError:
            return False
        except (OSError, paramiko.SSHException) as e:
            raise TransportError(f"{self.name}: cannot stat {path}: {e}") from e

    def remove(self, path: str, missing_ok: bool = True) -> None:
        try:
            self.sftp().remove(path)
        except FileNotFoundError as e:
            if not missing_ok:
                raise TransportError(f"{self.name}: {path}: no such file") from e
        except (OSError, paramiko.SSHException) as e:
            raise TransportError(f"{self.name}: cannot remove {path}: {e}") from e

    def rename(self, src: str, dst: str) -> None:
        """Rename replacing dst (posix-rename@openssh.com). Only if the server lacks that
        extension: remove dst then rename (not atomic; logged)."""
        sftp = self.sftp()
        try:
            sftp.posix_rename(src, dst)
            return
        except OSError as e:
            if e.errno is not None or "unsupported" not in str(e).lower():
                raise TransportError(f"{self.name}: cannot rename {src} -> {dst}: {e}") from e
        log.debug("%s: server lacks posix-rename; falling back to remove+rename for %s (not atomic)",
                  self.name, dst)
        try:
            try:
                sftp.remove(dst)
            except FileNotFoundError:
                pass
            sftp.rename(src, dst)
        except (OSError, paramiko.SSHException) as e:
            raise TransportError(f"{self.name}: cannot rename {src} -> {dst}: {e}") from e


# --------------------------------------------------------------------------- local


class LocalHost:
    """The machine pytest runs on (the bench PC), optionally inside a named netns.

    Same contract as SshHost: the script goes on stdin to /bin/sh -s (through
    `ip netns exec NS` when a namespace is given). Files are this machine's files (a
    netns shares the mount namespace).
    """

    def __init__(self, name: str = "local", netns: str | None = None, command_timeout: float = 60) -> None:
        self.name = name
        self.netns = netns
        self.command_timeout = command_timeout

    def __repr__(self) -> str:
        return f"LocalHost({self.name!r}, netns={self.netns!r})"

    def _cmd(self) -> list[str]:
        sh = ["/bin/sh", "-s"]
        return ["ip", "netns", "exec", self.netns, *sh] if self.netns else sh

    def run(self, script: str, *, timeout: float | None = None, stdin: bytes | None = None) -> RunResult:
        timeout = self.command_timeout if timeout is None else timeout
        if self.netns and not os.path.exists(f"/run/netns/{self.netns}"):
            # else `ip netns exec` exits 255, indistinguishable from the script's own status
            raise TransportError(f"{self.name}: network namespace {self.netns!r} does not exist "
                                 f"(/run/netns/{self.netns} missing; is the lab up?)")
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                self._cmd(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
            )
        except OSError as e:
            raise TransportError(f"{self.name}: cannot start {self._cmd()}: {e}") from e
        try:
            out, err = proc.communicate(_wrap(script, stdin), timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            raise CommandTimeout(f"{self.name}: command did not finish within {timeout:g}s "
                                 f"(process group killed)") from None
        dur = time.monotonic() - t0
        log.debug("%s: sh script (%d lines) status=%d in %.3fs", self.name,
                  script.count("\n") + 1, proc.returncode, dur)
        return RunResult(_decode(out), _decode(err), proc.returncode, dur, self.name)

    def read_file(self, path: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise TransportError(f"{self.name}: cannot read {path}: {e}") from e

    def write_file_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        d, base = os.path.split(path)
        tmp = f"{d or '.'}/.{base}.tmp-{_random_token()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o7777)
            os.fchmod(fd, mode & 0o7777)  # umask must not widen or narrow the requested mode
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise TransportError(f"{self.name}: cannot write {path}: {e}") from e

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def remove(self, path: str, missing_ok: bool = True) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError as e:
            if not missing_ok:
                raise TransportError(f"{self.name}: {path}: no such file") from e
        except OSError as e:
            raise TransportError(f"{self.name}: cannot remove {path}: {e}") from e

    def rename(self, src: str, dst: str) -> None:
        try:
            os.replace(src, dst)
        except OSError as e:
            raise TransportError(f"{self.name}: cannot rename {src} -> {dst}: {e}") from e

    def close(self) -> None:
        """Nothing to release: every run is its own process."""


# --------------------------------------------------------------------------- factory


def host_from_mgmt(name: str, mgmt: Any, known_hosts: str | os.PathLike[str] | None,
                   jump: "SshHost | None" = None) -> SshHost | LocalHost:
    """Build a Host from a topology `Mgmt`-like object (duck-typed: address, port, user,
    key_file, connect_timeout, command_timeout; or local/netns). `jump` is the already
    built SshHost for `mgmt.jump` (the caller resolves names to hosts)."""
    if getattr(mgmt, "local", False):
        return LocalHost(name, netns=getattr(mgmt, "netns", None),
                         command_timeout=getattr(mgmt, "command_timeout", None) or 60)
    missing = [a for a in ("address", "port", "user", "key_file") if getattr(mgmt, a, None) in (None, "")]
    if missing:
        raise TransportError(f"{name}: mgmt lacks {', '.join(missing)} (need local: true or ssh fields)")
    if known_hosts is None:
        raise HostKeyError(f"{name}: no known_hosts file configured for the lab (lab.known_hosts)")
    if getattr(mgmt, "jump", None) and jump is None:
        raise TransportError(f"{name}: mgmt.jump={mgmt.jump!r} but no jump host was passed")
    return SshHost(
        name, mgmt.address, mgmt.port, mgmt.user, mgmt.key_file, known_hosts, jump=jump,
        connect_timeout=getattr(mgmt, "connect_timeout", None) or 10,
        command_timeout=getattr(mgmt, "command_timeout", None) or 60,
    )
