"""An appliance (or an SSH-reached bench) over one reused paramiko connection.

Why this shape (see :mod:`ipsec_hil.lab.remote.shell` for the sh contract):
- stdout and stderr are kept apart and drained concurrently (paramiko #1778/#213:
  reading one stream after the other deadlocks when both exceed the window).
- Host keys are pinned per lab (known_hosts) with a rejecting policy; there is no
  trust-on-first-use switch on purpose.
- Script stdin data is never logged: it carries pre-shared keys.
Files travel over SFTP (:class:`~ipsec_hil.lab.remote.sftp.SftpFiles`).
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from pathlib import Path

import paramiko

from ipsec_hil.lab.errors import CommandTimeout, HostKeyError, TransportError
from ipsec_hil.lab.timeshare import SSH, spent
from ipsec_hil.lab.remote import fence
from ipsec_hil.lab.remote.fence import guarded
from ipsec_hil.lab.remote.sftp import SftpFiles
from ipsec_hil.lab.remote.shell import (SH_COMMAND, RunResult, close_quietly, decode_output, kill_script,
                                     script_file_command, split_pid, wrap_script)

log = logging.getLogger(__name__)

_CHUNK = 65536


def no_delay(sock: object) -> None:
    """TCP_NODELAY on the connection's socket, when it is a TCP socket (a jump host's
    channel is not: its transport's socket carries it).

    Why: an SSH command is a handful of small messages each way (channel open, exec,
    data, EOF, exit status, close); with Nagle's algorithm one of them waits for the
    peer's delayed ACK -- measured on the virtual lab: 44 ms to open a channel, ~40 ms
    more per command. OpenSSH sets TCP_NODELAY on interactive sessions for this reason.
    """
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:  # a socket that refuses it works, only slower
            log.debug("TCP_NODELAY refused: %r", exc)


def send_all(chan: paramiko.Channel, data: bytes, chunk: int = 1 << 18) -> None:
    """``chan.sendall(data)`` in linear time.

    Why: paramiko's ``Channel.sendall`` loops ``s = s[sent:]``, copying the rest of the
    data after every packet (<= 32 KiB): quadratic. Measured on the virtual lab: 16 MiB
    of stdin in 1.2 s, 40 MiB (the XGS 136's jumbo every-size sweep, base64) in 22.4 s.
    Slicing at most ``chunk`` bytes at a time keeps each copy small.
    """
    for off in range(0, len(data), chunk):
        chan.sendall(data[off:off + chunk])


def drain(chan: paramiko.Channel, name: str, deadline: float, timeout: float,
          err: list[bytes] | None = None) -> tuple[bytes, bytes, int]:
    """Read a command channel's stdout and stderr together until EOF and the exit status
    have arrived (``name``: the host, for the timeout's message).
    ``err``: where stderr's chunks go as they come, so a caller still has them after a
    :class:`CommandTimeout` (the wrapped script's pid, :func:`shell.split_pid`).

    Not "until the exit status": OpenSSH sends exit-status when the child exits,
    while output may still sit in the pipes (session.c, session_exit_message), so
    stopping at the status loses the tail of the output (seen as a rare short read
    of 3 MiB). EOF comes only after both pipes are drained.
    """
    out: list[bytes] = []
    err = [] if err is None else err
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
            log.debug("%s: command timed out after %.1fs", name, timeout)
            raise CommandTimeout(f"{name}: command did not finish within {timeout:g}s "
                                 f"(channel closed)")
        if ended:
            chan.status_event.wait(min(remaining, 0.2))  # EOF seen, status on its way
        elif not progressed:
            select.select([fd], [], [], min(remaining, 0.2))
    status = chan.exit_status if chan.status_event.is_set() else -1
    return b"".join(out), b"".join(err), status


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


class SshHost(SftpFiles):
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
        no_delay(transport.sock)
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
            close_quietly(self._client, f"{self.name}'s SSH client")
            self._client = None

    def close(self) -> None:
        with self._lock:
            for _, _, client in self._sftps.values():
                close_quietly(client, f"{self.name}'s SFTP session")
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
        fence.check(self.name, opener)  # a fenced host gets no channel, whoever asks
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

    @spent(SSH, within_phase=True)
    @guarded("run")
    def run(self, script: str, *, timeout: float | None = None, stdin: bytes | None = None) -> RunResult:
        """Run a POSIX sh script: sent on stdin to the literal `/bin/sh -s`.

        `stdin` data (if any) becomes the script's stdin (see _wrap); it is never logged.
        Its time is the run's "ssh" share unless a phase is open (ipsec_hil.lab.timeshare).
        """
        timeout = self.command_timeout if timeout is None else timeout
        payload = wrap_script(script, stdin, announce_pid=True)
        t0 = time.monotonic()
        chan = self._open_session()
        err_so_far: list[bytes] = []
        try:
            chan.exec_command(SH_COMMAND)
            try:
                send_all(chan, payload)
            except OSError:
                if not (chan.closed or chan.exit_status_ready()):
                    raise
                # the shell ended before it read its script (it could not start: status
                # 126, say): its status and stderr say why, not "Socket is closed"
            if not chan.closed:
                chan.shutdown_write()
            out, err, status = drain(chan, self.name, t0 + timeout, timeout, err_so_far)
        except CommandTimeout:
            chan.close()
            self._kill_remote(split_pid(b"".join(err_so_far))[0])
            raise
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise TransportError(f"{self.name}: command channel failed: {type(e).__name__}: {e}") from e
        finally:
            chan.close()
        return self._result(out, split_pid(err)[1], status, t0, f"sh script ({script.count(chr(10)) + 1} lines)")

    @spent(SSH, within_phase=True)
    @guarded("run_file")
    def run_file(self, path: str, *, stdin: bytes, timeout: float | None = None) -> RunResult:
        """Run the sh script file ``path`` (already on the host) with ``stdin`` as its raw
        standard input, sent while it runs: a program that reads a stream (the wire
        sender's frames) starts on the first bytes instead of after a base64 here-document
        of all of them (:func:`~ipsec_hil.lab.remote.shell.wrap_script`: 40 MB took 1.9 s
        before the first frame left). The command string is ``/bin/sh PATH``
        (shell.script_file_command). On a timeout the channel is closed: the script's
        stdin ends, so what it runs must stop at EOF (nothing else kills it)."""
        timeout = self.command_timeout if timeout is None else timeout
        command = script_file_command(path)
        t0 = time.monotonic()
        chan = self._open_session()
        try:
            chan.exec_command(command)
            chan.settimeout(timeout)  # a script that stops reading must not block the send forever
            try:
                send_all(chan, stdin)
            except socket.timeout:
                raise CommandTimeout(f"{self.name}: {path} did not read its stdin within {timeout:g}s "
                                     f"(channel closed)") from None
            except OSError:
                if not (chan.closed or chan.exit_status_ready()):
                    raise
                # the script ended before it read all of its stdin: its status and stderr say why
            chan.settimeout(None)
            if not chan.closed:
                chan.shutdown_write()
            out, err, status = drain(chan, self.name, t0 + timeout, timeout)
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise TransportError(f"{self.name}: command channel failed: {type(e).__name__}: {e}") from e
        finally:
            chan.close()
        return self._result(out, err, status, t0, f"{path} ({len(stdin)} bytes of stdin)")

    def _result(self, out: bytes, err: bytes, status: int, t0: float, what: str) -> RunResult:
        """A command's RunResult; TransportError when it ended without an exit status (the
        connection dropped, or the shell died by a signal)."""
        dur = time.monotonic() - t0
        if status == -1:
            raise TransportError(f"{self.name}: {what} ended without an exit status after {dur:.1f}s "
                                 "(SSH connection lost, or the remote shell was killed by a signal)")
        log.debug("%s: %s status=%d in %.3fs", self.name, what, status, dur)
        return RunResult(decode_output(out), decode_output(err), status, dur, self.name)

    def _kill_remote(self, pid: int | None) -> None:
        """Best effort: stop what a timed-out command left running on the host (its shell's
        ``pid``, None when the command was cut off before its shell said it)."""
        if pid is None:
            log.warning("%s: a timed-out command never said its pid; nothing killed", self.name)
            return
        try:
            chan = self._open_session()
            try:
                chan.exec_command(SH_COMMAND)
                chan.sendall(wrap_script(kill_script(pid), None))
                chan.shutdown_write()
                drain(chan, self.name, time.monotonic() + 10, 10)
            finally:
                chan.close()
            log.debug("%s: killed the timed-out command's process group", self.name)
        except TransportError as e:
            log.warning("%s: could not stop a timed-out command: %s", self.name, e)

    # ---- files (SFTP, one session per thread: SFTPClient is not thread-safe)

