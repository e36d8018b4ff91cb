"""Client of an appliance's command server: run one FreeBSD command there, as if exec'd.

`main([SOCKET, MODULE, ARG...])` -- what a DIR/bin wrapper (twin.fbsd.install) runs, under
`python -I -S -c`, while the appliance's command server (twin.cmdserver) listens on SOCKET.

Why: every emulated command is a Python program. Started fresh, each paid 45-65 ms of CPU
for the interpreter and its imports, on every command of every SSH request; a profile of a
whole own-test run found such short-lived Python to be 42 % of its busy CPU. The server has
the command modules imported and forks once per command; this client costs only a bare
interpreter and hands over what exec would have passed on: its stdin, stdout and stderr
(the descriptors themselves, SCM_RIGHTS, so output goes straight to the shell's pipes),
argv, environment and working directory. It then waits for the command's status and
exits with it; a command killed by a signal kills the client with that signal, so the
shell sees the same death. If the client itself dies (its SSH session was cut and the
shell's process group killed), the server sees the connection close and kills the command.

This file is also the protocol's one home (twin.cmdserver and twin.sshd_exec import it): a
9-byte header -- MAGIC, the payload's length (4 bytes, big-endian), a bit mask of which of
fds 0/1/2 ride along -- sent with the descriptors, then the payload: NUL-separated fields
(kind, target, cwd, argc, the arguments, the environment's NAME=VALUE entries). The answer
is one line: `exit N`, `signal N` or `error TEXT`; an EXEC request gets `pid N` first.

Imports: built-in modules only (`socket` and `signal` would pull in enum, ~15 ms a command;
`array`, a shared library, ~4 ms).
"""
import _signal
import _socket
import os
import sys

MAGIC = b"TWC1"
HEADER_SIZE = len(MAGIC) + 5
MAX_PAYLOAD = 4 << 20
"""Bigger than Linux's ARG_MAX for argv + environment (2 MiB): a longer request is refused."""
EXIT_NOT_RUN = 126
"""The client's exit status when the command could not be run (the shell's "cannot execute")."""
STD_FDS = (0, 1, 2)


RUN, EXEC = "run", "exec"
"""Request kinds: RUN a command module as `python -m` would (the wrappers); EXEC a program
the server allows (twin.sshd: the appliance's shell, so it starts in the appliance's
namespaces without a launcher of its own). An EXEC is answered `pid N` at once too."""


class Request:
    """One thing to run: its kind (RUN, EXEC), target (the module; the program's path),
    args (RUN: after the program name; EXEC: the whole argv), the working directory and the
    environment (bytes, as exec passes them)."""

    __slots__ = ("kind", "target", "args", "cwd", "env")

    def __init__(self, kind: str, target: str, args: "list[bytes]", cwd: bytes, env: "dict[bytes, bytes]") -> None:
        self.kind, self.target, self.args, self.cwd, self.env = kind, target, args, cwd, env


def encode_request(req: Request) -> bytes:
    fields = [req.kind.encode(), os.fsencode(req.target), req.cwd, str(len(req.args)).encode(), *req.args,
              *(k + b"=" + v for k, v in req.env.items())]
    for f in fields:
        if b"\0" in f:
            raise ValueError("an argument or environment entry holds a NUL byte")
    return b"\0".join(fields)


def decode_request(payload: bytes) -> Request:
    """The payload's fields; ValueError naming what is malformed."""
    fields = payload.split(b"\0")
    if len(fields) < 4:
        raise ValueError(f"request of {len(fields)} field(s), expected kind, target, cwd and argc at least")
    kind, target, cwd, argc = fields[0].decode("ascii", "replace"), os.fsdecode(fields[1]), fields[2], fields[3]
    if kind not in (RUN, EXEC):
        raise ValueError(f"kind {kind[:20]!r}, expected {RUN!r} or {EXEC!r}")
    if not argc.isdigit() or 4 + int(argc) > len(fields):
        raise ValueError(f"argc {argc[:20]!r} does not match the {len(fields) - 4} field(s) after it")
    n = int(argc)
    args = fields[4:4 + n]
    env = {}
    for entry in fields[4 + n:]:
        name, eq, value = entry.partition(b"=")
        if not eq or not name:
            raise ValueError(f"environment entry {entry[:40]!r} is not NAME=VALUE")
        env[name] = value
    return Request(kind, target, args, cwd, env)


def send_request(sock, req: Request, fds: "list[int]", send_as: "list[int]") -> None:
    """Header and payload on a connected socket; the descriptors FDS become the
    command's SEND_AS (a subset of 0, 1, 2, in order)."""
    payload = encode_request(req)
    sock.sendmsg([encode_header(len(payload), send_as)],
                 [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))])
    sock.sendall(payload)


def parse_status(line: bytes) -> "tuple[str, int] | None":
    """("exit", N) or ("signal", N) from an answer line; None for anything else."""
    kind, _, value = line.strip().decode(errors="replace").partition(" ")
    if kind in ("exit", "signal") and value.isdigit():
        return kind, int(value)
    return None


def encode_header(length: int, fds: "list[int]") -> bytes:
    return MAGIC + length.to_bytes(4, "big") + bytes([sum(1 << fd for fd in fds)])


def decode_header(header: bytes) -> "tuple[int, list[int]]":
    """(payload length, which of 0/1/2 were sent, in order); ValueError when malformed."""
    if len(header) != HEADER_SIZE or not header.startswith(MAGIC):
        raise ValueError(f"header {header[:HEADER_SIZE]!r} is not {MAGIC!r} + length + fd mask")
    length = int.from_bytes(header[len(MAGIC):len(MAGIC) + 4], "big")
    if length > MAX_PAYLOAD:
        raise ValueError(f"payload of {length} bytes, more than {MAX_PAYLOAD}")
    mask = header[-1]
    return length, [fd for fd in STD_FDS if mask & (1 << fd)]


def _open_std_fds() -> "list[int]":
    out = []
    for fd in STD_FDS:
        try:
            os.fstat(fd)
        except OSError:
            continue
        out.append(fd)
    return out


def _fail(sock_path: str, what: str) -> int:
    os.write(2, f"twin: command server {sock_path}: {what}\n".encode(errors="replace"))
    return EXIT_NOT_RUN


def run(sock_path: str, module: str, args: "list[str]") -> int:
    """Run MODULE on the server at SOCK_PATH with this process's fds; its exit status
    (a signal is re-raised here and does not return)."""
    # A C program dies of SIGINT; Python would raise KeyboardInterrupt and print it.
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
    except OSError as exc:
        return _fail(sock_path, f"not answering ({exc.strerror or exc}); the command did not run")
    fds = _open_std_fds()
    env = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}  # os.environb costs a mapping more
    req = Request(RUN, module, [os.fsencode(a) for a in args], os.getcwdb(), env)
    try:
        send_request(s, req, fds, fds)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    except ValueError as exc:
        return _fail(sock_path, str(exc))
    except OSError as exc:
        return _fail(sock_path, f"connection lost ({exc.strerror or exc})")
    status = parse_status(reply)
    if status is None:
        kind, _, text = reply.strip().decode(errors="replace").partition(" ")
        if kind == "error":
            return _fail(sock_path, text)
        return _fail(sock_path, f"closed the connection without the command's status (answer {reply[:60]!r})")
    kind, value = status
    if kind == "signal":
        _signal.signal(value, _signal.SIG_DFL)
        os.kill(os.getpid(), value)
        return 128 + value  # a signal that does not kill (SIGCHLD...): the shell's number
    return value


def main(argv: "list[str]") -> int:
    if len(argv) < 2:
        os.write(2, b"usage: twin.cmdclient SOCKET MODULE [ARG...]\n")
        return 2
    return run(argv[0], argv[1], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
