"""The protocol between an appliance's command server (ipsec_hil_twin.shell.cmdserver) and its clients.

Its clients: the DIR/bin wrappers (ipsec_hil_twin.fbsd.install), through twin/ipsec_hil_twin/shell/cmdclient.pl -- a
Perl client, because a Python one cost 21 ms of interpreter start-up and imports on every
emulated command (issue 15; Perl starts in 2 ms) -- and ipsec_hil_twin.shell.sshd_exec, which starts the
appliance's shell with an EXEC request.

Why a server at all: every emulated command is a Python program. Started fresh, each paid
45-65 ms of CPU for the interpreter and its imports, on every command of every SSH request;
a profile of a whole own-test run found such short-lived Python to be 42 % of its busy CPU.
The server has the command modules imported and forks once per command; the client hands
over what exec would have passed on: its stdin, stdout and stderr (the descriptors
themselves, so output goes straight to the shell's pipes), argv, environment and working
directory. It then waits for the command's status and exits with it; a command killed by
a signal kills the client with that signal, so the shell sees the same death. If the
client itself dies (its SSH session was cut and the shell's process group killed), the
server sees the connection close and kills the command.

This file is the protocol's one home (ipsec_hil_twin.shell.cmdserver, ipsec_hil_twin.shell.sshd_exec and the tests import
it; twin/ipsec_hil_twin/shell/cmdclient.pl writes the same bytes): a 9-byte header -- MAGIC, the payload's
length (4 bytes, big-endian), a flags byte -- then the payload: NUL-separated fields
(kind, target, cwd, argc, the arguments, the environment's NAME=VALUE entries). The flags
byte says where the command's fds 0/1/2 come from: either a bit per descriptor sent with
the header (SCM_RIGHTS, ipsec_hil_twin.shell.sshd_exec), or PEER_FDS -- the server takes the connecting
process's own 0/1/2 (pidfd_getfd, those open there) and, for an empty cwd field, its
working directory (the Perl client, which cannot send descriptors without a module). The
answer is one line: `exit N`, `signal N` or `error TEXT`; an EXEC request gets `pid N` first.

twin/ipsec_hil_twin/shell/cmdclient.pl cannot import this file: it repeats MAGIC, PEER_FDS and EXIT_NOT_RUN, and
tests/twin_shell/test_cmdserver.py checks that its copies equal these.
"""
import os
import socket
import sys

MAGIC = b"TWC1"
HEADER_SIZE = len(MAGIC) + 5
MAX_PAYLOAD = 4 << 20
"""Bigger than Linux's ARG_MAX for argv + environment (2 MiB): a longer request is refused."""
EXIT_NOT_RUN = 126
"""The client's exit status when the command could not be run (the shell's "cannot execute")."""
STD_FDS = (0, 1, 2)
PEER_FDS = 0x08
"""Flags bit: no descriptors ride along; the server takes the peer process's own fds 0-2
(and, when the cwd field is empty, its working directory)."""


RUN, EXEC = "run", "exec"
"""Request kinds: RUN a command module as `python -m` would (the wrappers); EXEC a program
the server allows (ipsec_hil_twin.shell.sshd: the appliance's shell, so it starts in the appliance's
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
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))])
    sock.sendall(payload)


def recv_exact(sock, n: int) -> bytes:
    """Exactly ``n`` bytes; ValueError when the sender closes first."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ValueError(f"the sender closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def recv_header(sock) -> "tuple[bytes, list[int]]":
    """What :func:`send_request` sent first: the header's bytes (all of them unless the
    sender closed) and the descriptors that came with them (SCM_RIGHTS)."""
    header, anc, _flags, _addr = sock.recvmsg(HEADER_SIZE, socket.CMSG_SPACE(len(STD_FDS) * 4))
    received: "list[int]" = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received += [int.from_bytes(data[i:i + 4], sys.byteorder) for i in range(0, len(data) - len(data) % 4, 4)]
    if header and len(header) < HEADER_SIZE:
        try:
            header += recv_exact(sock, HEADER_SIZE - len(header))
        except BaseException:
            for fd in received:
                os.close(fd)
            raise
    return header, received


def parse_status(line: bytes) -> "tuple[str, int] | None":
    """("exit", N) or ("signal", N) from an answer line; None for anything else."""
    kind, _, value = line.strip().decode(errors="replace").partition(" ")
    if kind in ("exit", "signal") and value.isdigit():
        return kind, int(value)
    return None


def encode_header(length: int, fds: "list[int]", from_peer: bool = False) -> bytes:
    return MAGIC + length.to_bytes(4, "big") + bytes([sum(1 << fd for fd in fds) | (PEER_FDS if from_peer else 0)])


def decode_header(header: bytes) -> "tuple[int, list[int], bool]":
    """(payload length, which of 0/1/2 were sent, in order, whether the server is to take
    the peer's own fds instead); ValueError when malformed."""
    if len(header) != HEADER_SIZE or not header.startswith(MAGIC):
        raise ValueError(f"header {header[:HEADER_SIZE]!r} is not {MAGIC!r} + length + flags")
    length = int.from_bytes(header[len(MAGIC):len(MAGIC) + 4], "big")
    if length > MAX_PAYLOAD:
        raise ValueError(f"payload of {length} bytes, more than {MAX_PAYLOAD}")
    flags = header[-1]
    if flags & ~(PEER_FDS | 0b111):
        raise ValueError(f"flags {flags:#04x}: unknown bits")
    fds = [fd for fd in STD_FDS if flags & (1 << fd)]
    from_peer = bool(flags & PEER_FDS)
    if from_peer and fds:
        raise ValueError(f"flags {flags:#04x}: descriptors sent and taken from the peer at once")
    return length, fds, from_peer
