"""The machine pytest runs on (the bench PC), optionally inside a named network namespace.

Same contract as :class:`~ipsec_hil.lab.remote.ssh.SshHost`: the script goes on stdin to
/bin/sh -s (through ``ip netns exec NS`` when a namespace is given), so a probe or a
command behaves the same on a real bench over SSH and on the virtual lab's bench.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from ipsec_hil.lab.command import IP_NETNS_EXEC
from ipsec_hil.lab.errors import CommandTimeout, TransportError
from ipsec_hil.lab.remote.fence import guarded
from ipsec_hil.lab.remote.shell import RunResult, decode_output, random_token, script_file_command, wrap_script
from ipsec_hil.lab.timeshare import SSH, spent

log = logging.getLogger(__name__)


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

    def _argv(self, *sh: str) -> list[str]:
        """``sh`` run here, inside the host's network namespace if it has one."""
        if not self.netns:
            return list(sh)
        if not os.path.exists(f"/run/netns/{self.netns}"):
            # else `ip netns exec` exits 255, indistinguishable from the script's own status
            raise TransportError(f"{self.name}: network namespace {self.netns!r} does not exist "
                                 f"(/run/netns/{self.netns} missing; is the lab up?)")
        return list(IP_NETNS_EXEC(self.netns, *sh).argv)

    @spent(SSH, within_phase=True)
    @guarded("run")
    def run(self, script: str, *, timeout: float | None = None, stdin: bytes | None = None) -> RunResult:
        """Run a POSIX sh script on this machine. Counted as "ssh" like SshHost's (the
        virtual lab's bench is local, a real one is not: the same command, the same row)."""
        return self._communicate(self._argv("/bin/sh", "-s"), wrap_script(script, stdin), timeout,
                                 f"sh script ({script.count(chr(10)) + 1} lines)")

    @spent(SSH, within_phase=True)
    @guarded("run_file")
    def run_file(self, path: str, *, stdin: bytes, timeout: float | None = None) -> RunResult:
        """SshHost.run_file here: ``/bin/sh PATH`` with ``stdin`` as its raw standard input
        (the same path rule, so a script that runs on the bench runs on an appliance)."""
        script_file_command(path)  # the path rule, checked the same way
        return self._communicate(self._argv("/bin/sh", path), stdin, timeout, f"{path} ({len(stdin)} bytes of stdin)")

    def _communicate(self, cmd: list[str], data: bytes, timeout: float | None, what: str) -> RunResult:
        timeout = self.command_timeout if timeout is None else timeout
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as e:
            raise TransportError(f"{self.name}: cannot start {cmd}: {e}") from e
        try:
            out, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # the group ended by itself meanwhile
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise CommandTimeout(f"{self.name}: command did not finish within {timeout:g}s "
                                 f"(process group killed)") from None
        dur = time.monotonic() - t0
        log.debug("%s: %s status=%d in %.3fs", self.name, what, proc.returncode, dur)
        return RunResult(decode_output(out), decode_output(err), proc.returncode, dur, self.name)

    @guarded("read_file")
    def read_file(self, path: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise TransportError(f"{self.name}: cannot read {path}: {e}") from e

    @guarded("write_file_atomic")
    def write_file_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        d, base = os.path.split(path)
        tmp = f"{d or '.'}/.{base}.tmp-{random_token()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o7777)
            os.fchmod(fd, mode & 0o7777)  # umask must not widen or narrow the requested mode
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):  # the write's own error is the one raised below
                os.unlink(tmp)
            raise TransportError(f"{self.name}: cannot write {path}: {e}") from e

    @guarded("exists")
    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    @guarded("remove")
    def remove(self, path: str, missing_ok: bool = True) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError as e:
            if not missing_ok:
                raise TransportError(f"{self.name}: {path}: no such file") from e
        except OSError as e:
            raise TransportError(f"{self.name}: cannot remove {path}: {e}") from e

    @guarded("rename")
    def rename(self, src: str, dst: str) -> None:
        try:
            os.replace(src, dst)
        except OSError as e:
            raise TransportError(f"{self.name}: cannot rename {src} -> {dst}: {e}") from e

    def close(self) -> None:
        """Nothing to release: every run is its own process."""

