"""The emulated appliance's SSH server under load: a command's end never overtakes its start.

Issue 52's "Channel closed" race, reproduced on a running lab with 80 commands at once
beside two busy loops (26 of 800 failed "Channel closed.", 25 "Socket is closed"): the
command server's accept queue was full, the non-blocking connect of the session's shell
failed at once (EAGAIN, status 126), and the session closed the channel before paramiko
had answered the exec request. Each test below holds one of the two conditions open on
purpose, so it fails without its fix every time instead of once in a while.
"""
from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ipsec_hil.lab.remote.ssh import SshHost
from ipsec_hil_twin.shell import cmdserver, sshd
from ipsec_hil_twin.shell.sshd import AuthorizedKey
from ipsec_hil_twin.shell.sshd_exec import SHELL, ServedShell

pytestmark = pytest.mark.needs_root

REPLY_DELAY = 0.5
"""How long the transport's thread is held between the exec check and its reply: a
descheduled thread on a loaded machine, made certain."""


def test_a_quick_command_ends_after_its_exec_reply(appliance, monkeypatch):
    """The reply to the exec request comes late (the transport thread held after the
    check); a command that ends at once still reaches the client as its exit status,
    never as "Channel closed." (the session starts after the reply, sshd._Transport)."""
    checked = sshd._Interface.check_channel_exec_request

    def slow_check(self, channel, command):
        ok = checked(self, channel, command)
        time.sleep(REPLY_DELAY)
        return ok

    monkeypatch.setattr(sshd._Interface, "check_channel_exec_request", slow_check)
    for command, status in (("true", 0), ("exit 3", 3)):
        r = appliance.run(command)
        assert (r.out, r.err, r.status) == ("", "", status)


def test_a_shell_waits_for_a_full_accept_queue(tmp_path):
    """A command server whose accept queue is full (it is between requests) makes the
    shell wait, not fail: EAGAIN from a non-blocking AF_UNIX connect was the status 126."""
    path = tmp_path / "cmd.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    fillers: list[socket.socket] = []
    try:
        while True:  # fill the queue until a connect would be refused
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(str(path))
            except BlockingIOError:
                s.close()
                break
            fillers.append(s)
            assert len(fillers) < 100, "the accept queue never filled"
        served: list[bytes] = []

        def serve_late() -> None:
            time.sleep(0.3)
            for _ in fillers:
                listener.accept()[0].close()
            conn, _ = listener.accept()
            req, _fds, received = cmdserver.read_request(conn, frozenset([SHELL]))
            for fd in received:
                os.close(fd)
            served.append(req.target)
            conn.sendall(b"pid 4242\nexit 0\n")
            conn.close()

        t = threading.Thread(target=serve_late, daemon=True)
        t.start()
        t0 = time.monotonic()
        shell = ServedShell(path, ["csh", "-c", "true"], {"PATH": "/bin"}, "/")
        waited = time.monotonic() - t0
        t.join(5)
        for f in (shell.stdin, shell.stdout, shell.stderr):
            f.close()
        assert served == [SHELL] and shell.pid == 4242 and shell.exited(5) and shell.returncode == 0
        assert waited >= 0.2, f"connected after {waited:.2f}s: the queue was not full"
    finally:
        for s in fillers:
            s.close()
        listener.close()


def test_a_shell_that_cannot_start_is_a_status_for_the_suite(appliance, tmp_path, monkeypatch):
    """The command server gone (an appliance mid-reboot): the suite's SshHost.run gets the
    shell's status 126 and its reason on stderr -- not a TransportError "Channel closed." /
    "Socket is closed" that hides both."""
    priv = Ed25519PrivateKey.generate()
    key = tmp_path / "id_ed25519"
    key.write_bytes(priv.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    blob = priv.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    key_type, b64 = blob.decode().split()[:2]
    monkeypatch.setattr(appliance.server, "authorized", [*appliance.server.authorized, AuthorizedKey(key_type, b64)])
    host = SshHost("twin", "127.0.0.1", appliance.server.port, "root", key, appliance.known_hosts,
                   command_timeout=30)
    aside = appliance.hd.cmd_sock.with_name("cmd.sock.aside")
    os.rename(appliance.hd.cmd_sock, aside)
    try:
        for stdin in (None, bytes(8 << 20)):  # 8 MiB: still sending when the channel closes
            r = host.run("echo never\n", stdin=stdin)
            assert r.status == 126 and r.stdout == "", r
            assert "cannot start shell" in r.stderr, r
    finally:
        os.rename(aside, appliance.hd.cmd_sock)
        host.close()
    assert host.run("echo back\n").stdout == "back\n"
    host.close()
