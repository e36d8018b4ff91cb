"""The transport contract: POSIX sh scripts on stdin of ``/bin/sh -s``, and their results.

Why (see docs/DESIGN.md "Transport" and the 000/001 pages): OPNsense runs every SSH
command string through root's login shell, csh/tcsh, where `2>&1` writes a file named
`1`, `>/dev/null 2>&1` is "Ambiguous output redirect.", `!` is history even in single
quotes and `echo "a\\1b"` writes byte 0x01. So the ONLY command string ever sent to the
login shell is the fixed literal "/bin/sh -s"; the script itself travels on the channel's
stdin, wrapped here (:func:`wrap_script`), and is interpreted by sh. The one other
command string is ``/bin/sh PATH`` (:func:`script_file_command`) for a script file the
suite wrote there first, PATH made only of characters csh leaves alone: its stdin is then
the caller's raw bytes as they arrive (``run_file``: a program reads a stream while it is
still being sent, issue 15). Every transport
(:class:`~ipsec_hil.lab.remote.ssh.SshHost`, :class:`~ipsec_hil.lab.remote.local.LocalHost`)
offers the same :class:`Host` protocol.
"""

from __future__ import annotations

import base64
import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ipsec_hil.lab.command import argv
from ipsec_hil.lab.errors import TransportError

log = logging.getLogger(__name__)

#: The command string given to the remote login shell for every script.
SH_COMMAND = "/bin/sh -s"
#: A script file's path as ``run_file`` takes it: nothing csh expands, quotes or redirects.
SAFE_SCRIPT_PATH = re.compile(r"/[A-Za-z0-9_.][A-Za-z0-9_./-]*")


def script_file_command(path: str) -> str:
    """``/bin/sh PATH``: the command string of ``run_file``; ValueError for a path with
    anything csh could interpret (the only command string besides :data:`SH_COMMAND`)."""
    if not SAFE_SCRIPT_PATH.fullmatch(path) or "/../" in path:
        raise ValueError(f"run_file: {path!r} is not an absolute path of [A-Za-z0-9_./-]")
    return f"/bin/sh {path}"


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
    status: int  # sh's exit status (a transport that got none raises instead)
    duration: float  # seconds, from sending the script to its exit status
    host: str = ""  # the Host's name, for CommandFailed's message

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


def script(*lines: str) -> str:
    """Join sh lines into one script (each line is already valid sh)."""
    return "\n".join(lines) + "\n"


def decode_output(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


_STDIN_EOF = "__IPSEC_HIL_STDIN_EOF__"


def wrap_script(body: str, stdin: bytes | None = None, announce_pid: bool = False) -> bytes:
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

    `announce_pid`: the shell's first words, on stderr, are its pid (:data:`PID_MARK`;
    :func:`split_pid` takes the line off again), so that a timed-out command's process
    group can be killed from a second session: closing an SSH channel does not stop the
    remote processes (measured: `sleep` kept running under sshd). Said on stderr rather
    than written to a pid file: the file cost each command a subshell and an `rm` at its
    exit, about 1.3 ms of the machine's CPU of a bare command's 6 (issue 15).
    """
    if not body.endswith("\n"):
        body += "\n"
    head = f"echo \"{PID_MARK.decode()}$$\" >&2\n" if announce_pid else ""
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


#: The first line a wrapped script writes on stderr when asked to (``wrap_script``):
#: this prefix and the shell's pid.
PID_MARK = b"@@hil-pid "


def split_pid(stderr: bytes) -> tuple[int | None, bytes]:
    """``(pid, the rest)`` of a wrapped script's stderr: its first :data:`PID_MARK` line
    taken off (whatever the login shell wrote before it is kept); ``(None, stderr)``
    when it has not arrived (a command cut off before its shell started)."""
    at = stderr.find(PID_MARK)
    if at < 0 or (at and stderr[at - 1:at] != b"\n"):
        return None, stderr
    end = stderr.find(b"\n", at)
    digits = stderr[at + len(PID_MARK):end] if end >= 0 else b""
    if not digits.isdigit():
        return None, stderr
    return int(digits), stderr[:at] + stderr[end + 1:]


def kill_script(pid: int) -> str:
    """sh that kills the process group of the wrapped script's shell ``pid`` (sshd puts
    each session in its own session/process group: login shell, sh, and children), if
    that pid is still a shell: a command that ended meanwhile leaves nothing to kill, and
    its pid may be another process's by now."""
    return (
        f"p={int(pid)}\n"
        'case "$(ps -o comm= -p "$p" 2>/dev/null)" in *sh) ;; *) exit 0;; esac\n'
        'g=$(ps -o pgid= -p "$p" | tr -d " ")\n'
        'case "$g" in ""|0|1|*[!0-9]*) exit 0;; esac\n'
        '[ "$g" = "$(ps -o pgid= -p $$ | tr -d " ")" ] && exit 0\n'
        'kill -s KILL -- "-$g" 2>/dev/null\n'
        "exit 0\n"
    )



def close_quietly(obj: Any, what: str) -> None:
    """Close ``obj``; a failure is logged, not raised: closing must not mask the error
    being handled (a dead connection's close often fails too)."""
    try:
        obj.close()
    except Exception as e:  # noqa: BLE001 -- any failure of a close is only worth a line
        log.debug("closing %s failed: %s: %s", what, type(e).__name__, e)


def random_token(n: int = 6) -> str:
    return os.urandom(n).hex()

