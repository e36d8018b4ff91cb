"""Files on an SSH host over SFTP: one session per thread, atomic writes by rename.

Why per thread: paramiko's SFTPClient is not thread-safe, and each session holds a
channel of the connection (the server allows only MaxSessions of them). Why a mixin of
:class:`~ipsec_hil.lab.remote.ssh.SshHost`: the file half of a host has its own rules
(atomic replace, modes set before data, the posix-rename extension) but shares the
host's connection. File contents are never logged: they carry pre-shared keys.
"""

from __future__ import annotations

import logging
import os
import threading

import paramiko

from ipsec_hil.lab.errors import TransportError
from ipsec_hil.lab.remote.fence import guarded
from ipsec_hil.lab.remote.shell import close_quietly, random_token
from ipsec_hil.lab.timeshare import SSH, spent

#: every file operation is SSH round trips: counted with the host's commands (ipsec_hil.lab.timeshare)
_timed = spent(SSH, within_phase=True)

log = logging.getLogger(__name__)


class SftpFiles:
    """The file operations of the :class:`Host` protocol, for :class:`SshHost`
    (over its ``transport()`` and ``_open_channel()``)."""

    name: str
    _lock: threading.RLock
    _sftps: dict[int, tuple[threading.Thread, int, paramiko.SFTPClient]]
    _generation: int

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
                    close_quietly(client, f"{self.name}'s SFTP session of a finished thread")
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
                close_quietly(old[2], f"{self.name}'s stale SFTP session")
            self._sftps[me.ident or 0] = (me, generation, client)
        return client

    @_timed
    @guarded("read_file")
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

    @_timed
    @guarded("write_file_atomic")
    def write_file_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write to `<dir>/.<name>.tmp-<random>` and posix-rename over `path`: readers see
        the old or the new file, never a half-written one."""
        d, base = os.path.split(path)
        tmp = f"{d or '.'}/.{base}.tmp-{random_token()}"
        try:
            self._put(tmp, data, mode)
            st = self.sftp().stat(tmp)
            if st.st_size != len(data):
                raise TransportError(f"{self.name}: {tmp}: wrote {len(data)} bytes, server has {st.st_size}")
            self.rename(tmp, path)
        except BaseException:
            try:
                self.remove(tmp)
            except TransportError as e:  # the original error is the one to raise
                log.warning("%s: temporary file %s left behind: %s", self.name, tmp, e)
            raise
        log.debug("%s: wrote %s atomically (%d bytes, mode %o)", self.name, path, len(data), mode)

    @_timed
    @guarded("exists")
    def exists(self, path: str) -> bool:
        try:
            self.sftp().stat(path)
            return True
        except FileNotFoundError:
            return False
        except (OSError, paramiko.SSHException) as e:
            raise TransportError(f"{self.name}: cannot stat {path}: {e}") from e

    @_timed
    @guarded("remove")
    def remove(self, path: str, missing_ok: bool = True) -> None:
        try:
            self.sftp().remove(path)
        except FileNotFoundError as e:
            if not missing_ok:
                raise TransportError(f"{self.name}: {path}: no such file") from e
        except (OSError, paramiko.SSHException) as e:
            raise TransportError(f"{self.name}: cannot remove {path}: {e}") from e

    @_timed
    @guarded("rename")
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

