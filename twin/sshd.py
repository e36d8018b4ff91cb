"""The emulated appliance's SSH server (paramiko), one process per appliance.

`python -m twin.sshd --host-dir DIR --authorized-key PUBFILE [--port 0] --port-file F
 [--netns NS] [--bind 127.0.0.1]`

Why it looks like this: on OPNsense every SSH command is run by root's login shell,
which is csh (tcsh), exactly as OpenSSH does it: `csh -c "<command string>"`. The suite
must survive csh's quirks (`2>&1` makes a file named `1`), so the twin runs the real
Debian tcsh on the command string, inside the appliance's network namespace and a
private mount namespace (twin.nsexec) where DIR/root provides /usr/local/etc, /boot,
/var/db and /var/log. SFTP maps every absolute path into DIR/root, so both views show
the same files. Only public-key auth for root with the lab's key is accepted; the
host key (ed25519) is generated once per host dir and kept across reboots.

Command strings are never logged (they may carry secrets).
"""
from __future__ import annotations

import argparse
import base64
import errno
import logging
import os
import signal
import socket
import stat as stat_mod
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from twin import nsexec
from twin.runtime import HostDir, read_json, write_bytes_atomic

log = logging.getLogger("twin.sshd")

SHELL = "/usr/bin/tcsh"
SHELL_ARGV0 = "csh"  # OpenSSH execs the login shell as basename(shell) -c CMD; OPNsense's is csh
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PUMP_CHUNK = 32768
OUTPUT_DRAIN_SECONDS = 2.0
"""After the command exits, how long to wait for its pipes to reach EOF (a background
child may keep them open forever; OpenSSH would hang, we send the status instead)."""


class SshdError(RuntimeError):
    """Bad configuration of the SSH server (message names the file)."""


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


# --------------------------------------------------------------------------- exec


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


def exit_status_of(returncode: int) -> int:
    """Popen returncode -> SSH exit status (a signal n is reported as 128+n, as csh does)."""
    return 128 + (-returncode) if returncode < 0 else returncode


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
        self.server._register(self)
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        t_out = threading.Thread(target=self._pump_out, args=(proc.stdout, chan.sendall), daemon=True)
        t_err = threading.Thread(target=self._pump_out, args=(proc.stderr, chan.sendall_stderr), daemon=True)
        t_in = threading.Thread(target=self._pump_in, args=(proc.stdin,), daemon=True)
        for t in (t_out, t_err, t_in):
            t.start()
        try:
            while True:
                try:
                    proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
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
                except (OSError, EOFError, paramiko.SSHException):
                    pass
                chan.close()
        finally:
            self.server._unregister(self)

    def _pump_out(self, pipe, send) -> None:
        fd = pipe.fileno()
        try:
            while True:
                data = os.read(fd, PUMP_CHUNK)
                if not data:
                    break
                send(data)
        except (OSError, EOFError, paramiko.SSHException):
            pass
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
        except (OSError, EOFError, ValueError, paramiko.SSHException):
            pass
        finally:
            try:
                pipe.close()
            except OSError:
                pass

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


# --------------------------------------------------------------------------- SFTP


class _RootedPaths:
    """Maps SFTP paths into DIR/root and refuses anything that would leave it."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.real_root = os.path.realpath(root)

    def virtual(self, path: str) -> str:
        """Normalise a client path to an absolute appliance path; refuse `..` above /."""
        if not path.startswith("/"):
            path = "/" + path
        parts: list[str] = []
        for comp in path.split("/"):
            if comp in ("", "."):
                continue
            if comp == "..":
                if not parts:
                    raise PermissionError(errno.EACCES, "path escapes the appliance root")
                parts.pop()
            else:
                parts.append(comp)
        return "/" + "/".join(parts)

    def _inside(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.real_root + os.sep)

    def real(self, path: str, follow: bool = True) -> str:
        v = self.virtual(path)
        host = os.path.join(self.real_root, v.lstrip("/")) if v != "/" else self.real_root
        if follow:
            resolved = os.path.realpath(host)
        else:
            resolved = os.path.join(os.path.realpath(os.path.dirname(host)), os.path.basename(host))
            if v == "/":
                resolved = self.real_root
        if not self._inside(resolved):
            raise PermissionError(errno.EACCES, "path escapes the appliance root")
        return resolved

    def to_virtual(self, real: str) -> str | None:
        real = os.path.realpath(real)
        if not self._inside(real):
            return None
        return "/" + os.path.relpath(real, self.real_root).replace(os.sep, "/").lstrip(".")


class _Handle(paramiko.SFTPHandle):
    def stat(self):
        try:
            return paramiko.SFTPAttributes.from_stat(os.fstat(self.readfile.fileno()))
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)

    def chattr(self, attr):
        try:
            _apply_attr(self.filename, attr)
            return paramiko.SFTP_OK
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)


def _apply_attr(real: str, attr: paramiko.SFTPAttributes) -> None:
    if attr._flags & attr.FLAG_PERMISSIONS:
        os.chmod(real, stat_mod.S_IMODE(attr.st_mode))
    if attr._flags & attr.FLAG_UIDGID:
        os.chown(real, attr.st_uid, attr.st_gid)
    if attr._flags & attr.FLAG_AMTIME:
        os.utime(real, (attr.st_atime, attr.st_mtime))
    if attr._flags & attr.FLAG_SIZE:
        with open(real, "r+b") as fh:
            fh.truncate(attr.st_size)


def _sftp_errors(fn):
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno or errno.EIO)
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class RootedSftp(paramiko.SFTPServerInterface):
    """SFTP over DIR/root: the appliance filesystem the shell also sees."""

    def __init__(self, server, *args, host_dir: HostDir | None = None, **kwargs):
        super().__init__(server, *args, **kwargs)
        hd = host_dir or server.server.host_dir
        self.paths = _RootedPaths(hd.root)

    def canonicalize(self, path):
        try:
            return self.paths.virtual(path)
        except PermissionError:
            return "/"

    @_sftp_errors
    def open(self, path, flags, attr):
        real = self.paths.real(path)
        mode = attr.st_mode if (attr is not None and attr._flags & attr.FLAG_PERMISSIONS) else 0o644
        fd = os.open(real, flags | getattr(os, "O_BINARY", 0) | os.O_CLOEXEC, stat_mod.S_IMODE(mode))
        if (flags & os.O_CREAT) and attr is not None:
            attr._flags &= ~attr.FLAG_PERMISSIONS
            _apply_attr(real, attr)
        if flags & os.O_WRONLY:
            fstr = "ab" if flags & os.O_APPEND else "wb"
        elif flags & os.O_RDWR:
            fstr = "a+b" if flags & os.O_APPEND else "r+b"
        else:
            fstr = "rb"
        f = os.fdopen(fd, fstr)
        handle = _Handle(flags)
        handle.filename = real
        handle.readfile = f
        handle.writefile = f
        return handle

    @_sftp_errors
    def list_folder(self, path):
        real = self.paths.real(path)
        out = []
        for name in os.listdir(real):
            attr = paramiko.SFTPAttributes.from_stat(os.lstat(os.path.join(real, name)))
            attr.filename = name
            out.append(attr)
        return out

    @_sftp_errors
    def stat(self, path):
        return paramiko.SFTPAttributes.from_stat(os.stat(self.paths.real(path)))

    @_sftp_errors
    def lstat(self, path):
        return paramiko.SFTPAttributes.from_stat(os.lstat(self.paths.real(path, follow=False)))

    @_sftp_errors
    def remove(self, path):
        os.remove(self.paths.real(path, follow=False))
        return paramiko.SFTP_OK

    @_sftp_errors
    def rename(self, oldpath, newpath):
        old = self.paths.real(oldpath, follow=False)
        new = self.paths.real(newpath, follow=False)
        if os.path.lexists(new):
            return paramiko.SFTP_FAILURE  # SFTPv3: rename never overwrites
        os.rename(old, new)
        return paramiko.SFTP_OK

    @_sftp_errors
    def posix_rename(self, oldpath, newpath):
        os.replace(self.paths.real(oldpath, follow=False), self.paths.real(newpath, follow=False))
        return paramiko.SFTP_OK

    @_sftp_errors
    def mkdir(self, path, attr):
        real = self.paths.real(path, follow=False)
        mode = attr.st_mode if (attr is not None and attr._flags & attr.FLAG_PERMISSIONS) else 0o755
        os.mkdir(real, stat_mod.S_IMODE(mode))
        return paramiko.SFTP_OK

    @_sftp_errors
    def rmdir(self, path):
        os.rmdir(self.paths.real(path, follow=False))
        return paramiko.SFTP_OK

    @_sftp_errors
    def chattr(self, path, attr):
        _apply_attr(self.paths.real(path), attr)
        return paramiko.SFTP_OK

    @_sftp_errors
    def readlink(self, path):
        target = os.readlink(self.paths.real(path, follow=False))
        if target.startswith("/"):
            v = self.paths.to_virtual(target)
            return v if v is not None else paramiko.SFTP_PERMISSION_DENIED
        return target

    def symlink(self, target_path, path):
        return paramiko.SFTP_OP_UNSUPPORTED


# --------------------------------------------------------------------------- server


class _Interface(paramiko.ServerInterface):
    def __init__(self, server: "ApplianceSshServer"):
        self.server = server

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
        if isinstance(command, str):
            command = command.encode("utf-8", "surrogateescape")
        ExecSession(self.server, channel, bytes(command)).start()
        return True

    def check_channel_shell_request(self, channel):
        return False  # interactive shells are not emulated

    def check_channel_pty_request(self, channel, term, width, height, pixelwidth, pixelheight, modes):
        return False

    def check_channel_env_request(self, channel, name, value):
        return False  # OpenSSH's default AcceptEnv accepts nothing for root commands either


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

    @property
    def port(self) -> int:
        assert self._sock is not None, "server not started"
        return self._sock.getsockname()[1]

    def start(self) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(self._bind)
        sock.listen(64)
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
            threading.Thread(target=self._handshake, args=(conn,), daemon=True).start()

    def _handshake(self, conn: socket.socket) -> None:
        try:
            t = paramiko.Transport(conn)
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
            try:
                conn.close()
            except OSError:
                pass

    def _register(self, s: ExecSession) -> None:
        with self._lock:
            self._sessions.add(s)

    def _unregister(self, s: ExecSession) -> None:
        with self._lock:
            self._sessions.discard(s)

    def stop(self) -> None:
        """Stop listening, close every connection, kill running commands."""
        self._stopping.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        with self._lock:
            transports = list(self._transports)
            sessions = list(self._sessions)
        for s in sessions:
            s.kill()
        for t in transports:
            try:
                t.close()
            except Exception:  # noqa: BLE001 -- closing must not stop the shutdown
                pass
        if self._thread is not None:
            self._thread.join(2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twin.sshd", description=__doc__.splitlines()[0])
    ap.add_argument("--host-dir", required=True)
    ap.add_argument("--authorized-key", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--netns", default=None, help="default: host.json 'netns'")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s twin.sshd %(message)s")
    host_dir = HostDir(args.host_dir)
    try:
        server = ApplianceSshServer(
            host_dir, load_authorized_keys(args.authorized_key),
            port=args.port, bind=args.bind, netns=args.netns,
        )
        port = server.start()
    except (SshdError, OSError, ValueError) as exc:
        print(f"twin.sshd: {exc}", file=sys.stderr)
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
