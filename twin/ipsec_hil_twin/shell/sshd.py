"""The emulated appliance's SSH server (paramiko), one process per appliance.

`python -m ipsec_hil_twin.shell.sshd --host-dir DIR --authorized-key PUBFILE [--port 0] --port-file F
 [--netns NS] [--bind 127.0.0.1]`

Why it looks like this: on OPNsense every SSH command is run by root's login shell,
which is csh (tcsh), as OpenSSH does it: `csh -c "<command string>"` (with -f: ipsec_hil_twin.shell.sshd_exec.SHELL_FLAGS). The suite
must survive csh's quirks (`2>&1` makes a file named `1`), so the twin runs the real
Debian tcsh on the command string, inside the appliance's network namespace and a
private mount namespace (ipsec_hil_twin.machinery.nsexec) where DIR/root provides /usr/local/etc, /boot,
/var/db and /var/log. SFTP maps every absolute path into DIR/root, so both views show
the same files. Only public-key auth for root with the lab's key is accepted; the
host key (ed25519) is generated once per host dir and kept across reboots.

Command strings are never logged (they may carry secrets).

Modules: this one (keys, authentication, connections, `python -m ipsec_hil_twin.shell.sshd`),
ipsec_hil_twin.shell.sshd_exec (exec requests: the csh command and its pipes), ipsec_hil_twin.shell.sshd_sftp (SFTP
rooted in DIR/root).
"""
from __future__ import annotations

import argparse
import base64
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import paramiko
from paramiko.common import MSG_CHANNEL_REQUEST
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ipsec_hil_twin.errors import SshdError
from ipsec_hil_twin.machinery.labprocs import name_process
from ipsec_hil_twin.machinery.runtime import HostDir, read_json, write_bytes_atomic
from ipsec_hil_twin.shell.sshd_exec import ExecSession, start_command_server, stop_command_server
from ipsec_hil_twin.shell.sshd_sftp import RootedSftp

log = logging.getLogger("ipsec_hil_twin.shell.sshd")

# --------------------------------------------------------------------------- keys


def ensure_host_key(host_dir: HostDir) -> paramiko.Ed25519Key:
    """Load DIR/ssh_host_ed25519_key, generating it (and the .pub) on first use."""
    path = host_dir.ssh_host_key
    if not path.exists():
        priv = Ed25519PrivateKey.generate()
        pem = priv.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        pub = priv.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        write_bytes_atomic(path, pem, mode=0o600)
        write_bytes_atomic(Path(str(path) + ".pub"), pub + f" root@{host_dir.name}\n".encode())
    try:
        return paramiko.Ed25519Key(filename=str(path))
    except (paramiko.SSHException, OSError) as exc:
        raise SshdError(f"{path}: cannot load ed25519 host key: {exc}") from None


def known_hosts_line(host_dir: HostDir, port: int, address: str = "127.0.0.1") -> str:
    """The known_hosts entry for this appliance (`[127.0.0.1]:PORT ssh-ed25519 AAAA...`)."""
    key = ensure_host_key(host_dir)
    host = address if port == 22 else f"[{address}]:{port}"
    return f"{host} {key.get_name()} {key.get_base64()}"


@dataclass(frozen=True)
class AuthorizedKey:
    key_type: str
    blob_b64: str


def load_authorized_keys(path: str | os.PathLike[str]) -> list[AuthorizedKey]:
    """Parse an OpenSSH public key file (one `type base64 [comment]` per line)."""
    keys: list[AuthorizedKey] = []
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SshdError(f"{p}: cannot read authorized key: {exc.strerror}") from None
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-")):
            raise SshdError(f"{p}:{n}: expected 'ssh-TYPE BASE64 [comment]', found {line[:40]!r}")
        try:
            base64.b64decode(parts[1], validate=True)
        except ValueError:
            raise SshdError(f"{p}:{n}: key field is not base64") from None
        keys.append(AuthorizedKey(parts[0], parts[1]))
    if not keys:
        raise SshdError(f"{p}: no public key found")
    return keys


# --------------------------------------------------------------------------- server


class _Interface(paramiko.ServerInterface):
    def __init__(self, server: "ApplianceSshServer"):
        self.server = server
        self._accepted: dict[int, ExecSession] = {}
        self._lock = threading.Lock()

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_none(self, username):
        return paramiko.AUTH_FAILED

    def check_auth_password(self, username, password):
        return paramiko.AUTH_FAILED

    def check_auth_publickey(self, username, key):
        if username != "root":
            return paramiko.AUTH_FAILED
        for ak in self.server.authorized:
            if key.get_name() == ak.key_type and key.get_base64() == ak.blob_b64:
                return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        """Accept; the session starts once the reply is sent (_Transport: never here)."""
        if isinstance(command, str):
            command = command.encode("utf-8", "surrogateescape")
        with self._lock:
            self._accepted[channel.get_id()] = ExecSession(self.server.host_dir, self.server, channel, bytes(command))
        return True

    def start_accepted(self, channel: paramiko.Channel) -> None:
        """Start the exec session accepted on ``channel``, if any (called by _Transport
        after paramiko answered the request)."""
        with self._lock:
            session = self._accepted.pop(channel.get_id(), None)
        if session is not None:
            session.start()

    def check_channel_shell_request(self, channel):
        return False  # interactive shells are not emulated

    def check_channel_pty_request(self, channel, term, width, height, pixelwidth, pixelheight, modes):
        return False

    def check_channel_env_request(self, channel, name, value):
        return False  # OpenSSH's default AcceptEnv accepts nothing for root commands either


def _request_then_start(channel: paramiko.Channel, m: paramiko.Message) -> None:
    """A channel request as paramiko handles it (the server's check, then its reply), and
    only then the exec session it accepted.

    Why: paramiko sends an exec request's CHANNEL_SUCCESS after
    ``check_channel_exec_request`` returns, on the transport's thread. A session started
    inside the check runs on a thread of its own; a command that ends at once (a shell
    that could not start: status 126) sent its exit status and CHANNEL_CLOSE before that
    reply, and the client's ``exec_command``, still waiting for it, raised "Channel
    closed." -- the command's status and stderr lost (measured: 26 of 800 commands, 80 at
    once beside two busy loops, issue 52). OpenSSH cannot do this: its one loop sends the
    reply before it looks at the child again."""
    _HANDLE_REQUEST(channel, m)
    server = channel.transport.server_object if channel.transport is not None else None
    if isinstance(server, _Interface):
        server.start_accepted(channel)


_HANDLE_REQUEST = paramiko.Transport._channel_handler_table[MSG_CHANNEL_REQUEST]


class _Transport(paramiko.Transport):
    """paramiko's Transport whose channel requests go through :func:`_request_then_start`."""

    _channel_handler_table = {**paramiko.Transport._channel_handler_table, MSG_CHANNEL_REQUEST: _request_then_start}


class ApplianceSshServer:
    """Listens on 127.0.0.1; each connection gets a paramiko Transport."""

    def __init__(
        self,
        host_dir: str | os.PathLike[str] | HostDir,
        authorized: list[AuthorizedKey],
        *,
        port: int = 0,
        bind: str = "127.0.0.1",
        netns: str | None = None,
    ):
        self.host_dir = host_dir if isinstance(host_dir, HostDir) else HostDir(host_dir)
        self.authorized = authorized
        if netns is None:
            host = read_json(self.host_dir.host_json, default={})
            netns = host.get("netns") or None
        self.netns = netns
        self.host_key = ensure_host_key(self.host_dir)
        self._bind = (bind, port)
        self._sock: socket.socket | None = None
        self._transports: list[paramiko.Transport] = []
        self._sessions: set[ExecSession] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.commands: subprocess.Popen | None = None
        """The appliance's command server: its shells and FreeBSD commands start there."""

    @property
    def port(self) -> int:
        assert self._sock is not None, "server not started"
        return self._sock.getsockname()[1]

    def start(self) -> int:
        """Start the command server (from the calling thread: it dies with that thread,
        PR_SET_PDEATHSIG), then listen; returns the port."""
        self.commands = start_command_server(self.host_dir, self.netns)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(self._bind)
            sock.listen(64)
        except OSError:
            sock.close()
            stop_command_server(self.commands)
            raise
        self._sock = sock
        self._thread = threading.Thread(target=self._accept_loop, name="twin-sshd-accept", daemon=True)
        self._thread.start()
        return self.port

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                break
            # small SSH messages must not wait for delayed ACKs (Nagle): ~40 ms per command
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._handshake, args=(conn,), daemon=True).start()

    def _handshake(self, conn: socket.socket) -> None:
        try:
            t = _Transport(conn)
            t.add_server_key(self.host_key)
            t.set_subsystem_handler("sftp", paramiko.SFTPServer, RootedSftp)
            with self._lock:
                if self._stopping.is_set():
                    t.close()
                    return
                self._transports = [x for x in self._transports if x.is_active()] + [t]
            t.start_server(server=_Interface(self))
        except (paramiko.SSHException, EOFError, OSError) as exc:
            log.info("connection failed during handshake: %s", exc)
            conn.close()

    def register_session(self, s: ExecSession) -> None:
        with self._lock:
            self._sessions.add(s)

    def unregister_session(self, s: ExecSession) -> None:
        with self._lock:
            self._sessions.discard(s)

    def stop(self) -> None:
        """Stop listening, close every connection, kill running commands."""
        self._stopping.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError as exc:  # ENOTCONN: a listening socket has no peer to shut down
                log.debug("shutdown of the listening socket: %r", exc)
            self._sock.close()
        with self._lock:
            transports = list(self._transports)
            sessions = list(self._sessions)
        for s in sessions:
            s.kill()
        for t in transports:
            try:
                t.close()
            except Exception as exc:  # noqa: BLE001 -- closing must not stop the shutdown
                log.info("closing a connection at stop: %r", exc)
        if self._thread is not None:
            self._thread.join(2)
        if self.commands is not None:
            stop_command_server(self.commands)
            self.commands = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ipsec_hil_twin.shell.sshd", description=__doc__.splitlines()[0])
    ap.add_argument("--host-dir", required=True)
    ap.add_argument("--authorized-key", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--netns", default=None, help="default: host.json 'netns'")
    args = ap.parse_args(argv)
    name_process("twin-sshd")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ipsec_hil_twin.shell.sshd %(message)s")
    host_dir = HostDir(args.host_dir)
    try:
        server = ApplianceSshServer(
            host_dir, load_authorized_keys(args.authorized_key),
            port=args.port, bind=args.bind, netns=args.netns,
        )
        port = server.start()
    except (SshdError, OSError, ValueError) as exc:
        print(f"ipsec_hil_twin.shell.sshd: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def _on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    port_file = Path(args.port_file) if args.port_file else host_dir.ssh_port_file
    write_bytes_atomic(port_file, f"{port}\n".encode())
    log.info("listening on %s:%d for %s (netns %s)", args.bind, port, host_dir.name, server.netns)
    while not stop.wait(1.0):
        pass
    server.stop()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
