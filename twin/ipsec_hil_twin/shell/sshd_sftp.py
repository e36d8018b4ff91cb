"""SFTP on the emulated appliance: every path maps into DIR/root, nothing escapes it.

Why apart from the server: the shell (through ipsec_hil_twin.machinery.nsexec's bind mounts) and SFTP must
show the same files; this maps SFTP's absolute paths onto DIR/root, refuses `..` above
/ and symlinks that lead outside, and answers errors with SFTP status codes.
"""
from __future__ import annotations

import errno
import os
import stat as stat_mod
from pathlib import Path

import paramiko

from ipsec_hil_twin.machinery.runtime import HostDir


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

    def remove(self, path):
        return self._on_links(os.remove, path)

    @_sftp_errors
    def rename(self, oldpath, newpath):
        old = self.paths.real(oldpath, follow=False)
        new = self.paths.real(newpath, follow=False)
        if os.path.lexists(new):
            return paramiko.SFTP_FAILURE  # SFTPv3: rename never overwrites
        os.rename(old, new)
        return paramiko.SFTP_OK

    def posix_rename(self, oldpath, newpath):
        return self._on_links(os.replace, oldpath, newpath)

    @_sftp_errors
    def _on_links(self, op, *paths):
        """`op` on the real paths, symlinks themselves (not their targets)."""
        op(*(self.paths.real(p, follow=False) for p in paths))
        return paramiko.SFTP_OK

    @_sftp_errors
    def mkdir(self, path, attr):
        real = self.paths.real(path, follow=False)
        mode = attr.st_mode if (attr is not None and attr._flags & attr.FLAG_PERMISSIONS) else 0o755
        os.mkdir(real, stat_mod.S_IMODE(mode))
        return paramiko.SFTP_OK

    def rmdir(self, path):
        return self._on_links(os.rmdir, path)

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
