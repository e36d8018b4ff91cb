"""The appliance's command server (ipsec_hil_twin.shell.cmdserver, ipsec_hil_twin.shell.cmdclient, twin/ipsec_hil_twin/shell/cmdclient.pl): fewer
interpreters, the same commands.

Why these tests: the server changes how every emulated command starts (forked from a
warm interpreter instead of `python -S -m`), never what it does. So each command must
print the same bytes and exit with the same status both ways, see its own working
directory and environment, die of the same signals and die when its SSH session is cut;
and a wrapper whose server is gone must say so instead of hanging or running elsewhere.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipsec_hil_twin.shell.cmdclient import (
    EXEC, EXIT_NOT_RUN, HEADER_SIZE, MAGIC, PEER_FDS, RUN, Request, decode_header, decode_request, encode_header,
    encode_request, send_request,
)
from ipsec_hil_twin.fbsd import COMMANDS
from ipsec_hil_twin.shell.cmdworker import IDLE_MAX, IDLE_NAME
from ipsec_hil_twin.fbsd.install import CLIENT, NO_SERVER_ENV, PERL, install_bin
from ipsec_hil_twin.machinery.runtime import HostDir

from tests.twin_ike.waiting import wait_until

pytestmark = pytest.mark.needs_root

RTT = re.compile(r"time=\d+\.\d+ ms|= \d+\.\d+/\d+\.\d+/\d+\.\d+/\d+\.\d+ ms")
CASES: list[tuple[str, re.Pattern | None]] = [
    ("sysctl dev.npuep.0.ipsec", None),
    ("sysctl -n net.inet.ipsec.dfbit kern.ostype", None),
    ("sysctl nosuch.oid", None),
    ("netstat -s -p esp", None),
    ("netstat -s -p esp --libxo json", None),
    ("netstat -m", None),
    ("vmstat -z", None),
    ("vmstat -m", None),
    ("setkey -D", re.compile(r"current: \w+ +\d+ [\d:]+ \d+|diff: \d+|pid=\d+")),  # now, and the process
    ("setkey -DP", re.compile(r"pid=\d+")),
    ("kldstat", None),
    ("kldstat -h", None),
    ("uname -a", None),
    ("freebsd-version -kru", None),
    ("opnsense-version", None),
    ("ping -c 1 -p deadbeef 10.77.0.2", RTT),
    ("kldload /boot/modules/nosuch.ko", None),
    ("kldunload nosuch", None),
    ("md5 /boot/kernel/kernel", None),
    ("cd /boot/kernel; md5 kernel ipsec.ko", None),  # the client's working directory
    ("sha256 -q /boot/kernel/ipsec.ko", None),
    ("ping -c 1 10.77.0.2", RTT),
    ("ping6 -c 1 fd77::2", RTT),
    ("ping -c 1 -D -s 1400 10.77.0.2", RTT),
    ("ifconfig lan", None),
    ("route get 10.77.0.2", None),
    ("echo aGVsbG8K | b64decode -r", None),  # stdin: the shell's pipe, handed over
    ("dmesg", None),
    ("swanctl --list-sas", None),  # no IKE daemon here: swanctl's connect error and status
    ("nosuchcmd", None),
]
NOT_COMPARED = {"shutdown": "reboots through the supervisor; test_fbsd_formats' "
                            "test_shutdown_r_now_asks_the_supervisor runs it through the server"}


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def _session_members(sid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = p.joinpath("stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:
                out.append(int(p.name))
    return out


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:"):
            inodes.add(target)
    return inodes


def test_the_cases_cover_every_command():
    names = {line.split(";")[-1].split("|")[-1].split()[0] for line, _ in CASES}
    assert set(COMMANDS) - names == set(NOT_COMPARED)


def test_every_command_prints_the_same_through_the_server_as_run_by_itself(appliance):
    """Each line through the server, then with the wrappers told to run `python -S -m
    MODULE` themselves: stdout, stderr and status equal, round-trip times aside."""
    assert appliance.hd.cmd_sock.is_socket()
    served = [appliance.run(line) for line, _ in CASES]
    direct = [appliance.run(f"setenv {NO_SERVER_ENV} 1; {line}") for line, _ in CASES]
    silent = [line for (line, _), r in zip(CASES, served) if not (r.out or r.err)]
    assert silent == ["dmesg"], "every line but dmesg (an empty boot log here) prints something"
    for (line, mask), s, d in zip(CASES, served, direct):
        norm = (lambda t: mask.sub("<t>", t)) if mask else (lambda t: t)
        assert (norm(s.out), norm(s.err), s.status) == (norm(d.out), norm(d.err), d.status), line


def _start_ping(appliance) -> subprocess.Popen:
    env = dict(os.environ, TWIN_HOST_DIR=str(appliance.hd.path), PATH=f"{appliance.hd.bin}:/usr/bin:/bin")
    env.pop("PYTHONPATH", None)
    # -D: a stream with don't-fragment still runs iputils under the command (ipsec_hil_twin.fbsd.ping.own_loop),
    # the process these tests look for in the command's session
    # SIGHUP at its default, as in a session sshd starts: a disposition inherited from whoever
    # started pytest (nohup ignores SIGHUP, and exec keeps an ignored signal ignored) would
    # let the client outlive the hang-up this test sends it (a CI run under nohup: the
    # client still alive 5 s after SIGHUP)
    return subprocess.Popen(["env", "--default-signal=HUP", "nsenter", f"--net=/run/netns/{appliance.ns}",
                             str(appliance.hd.bin / "ping"), "-c", "300", "-i", "0.2", "-D", "10.77.0.2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _sid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return -1


def _served_command(appliance, name: str = "ping") -> int:
    """The server's worker running ``name``: a busy worker has its command's name and leads
    its session (an orphan the server adopted -- iputils ping of a worker killed alone --
    may have the name too)."""
    server = appliance.commands.pid
    (pid,) = wait_until(lambda: [p for p in _children(server) if _comm(p) == name and _sid(p) == p],
                        f"a worker runs {name}", 5.0)
    return pid


def test_a_command_killed_by_a_signal_kills_its_client_with_it(appliance):
    client = _start_ping(appliance)
    try:
        command = _served_command(appliance)
        iputils = wait_until(lambda: _session_members(command)[1:], "ping's first reply", 5.0)
        # what the command holds: its fds, none of the server's sockets
        assert not _socket_inodes(command) & _socket_inodes(appliance.commands.pid)
        # its environment is the wrapper's: TWIN_HOST_DIR, and not the client's PERL_BADLANG
        environ = Path(f"/proc/{iputils[0]}/environ").read_bytes().split(b"\0")
        assert f"TWIN_HOST_DIR={appliance.hd.path}".encode() in environ
        assert not [e for e in environ if e.startswith(b"PERL_BADLANG=")]
        os.kill(command, signal.SIGTERM)
        assert client.wait(timeout=5) == -signal.SIGTERM
    finally:
        client.kill()
        client.wait()


def test_a_cut_session_kills_the_command_and_what_it_started(appliance):
    """ipsec_hil_twin.shell.sshd_exec kills the shell's process group when a session is cut: the client
    dies, the server sees the connection close and kills the command's whole session
    (ping here runs the namespace's iputils ping)."""
    client = _start_ping(appliance)
    command = _served_command(appliance)
    members = wait_until(lambda: _session_members(command)[1:] and _session_members(command), "iputils ping under the command", 5.0)
    assert len(members) >= 2
    os.killpg(client.pid, signal.SIGHUP)
    assert client.wait(timeout=5) == -signal.SIGHUP
    wait_until(lambda: not _session_members(command), "the command's session gone", 5.0)
    assert command not in _children(appliance.commands.pid)


def _ppid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^PPid:\s+(\d+)", status, re.M).group(1))


def test_an_orphan_is_adopted_and_reaped_by_the_server(appliance):
    """What a command leaves in the background outlives its shell: the server adopts it as
    the appliance's init (a child subreaper) and reaps it when it exits, so a `kill -0`
    loop waiting for it to stop sees it gone (under this VM's PID 1 the zombie lingered
    1-2 s, and every wire capture waited for it)."""
    r = appliance.run("/bin/sh -c 'sleep 1 > /dev/null 2>&1 < /dev/null & echo $!'")
    assert r.status == 0, r.err
    orphan = int(r.out.split()[-1])
    assert _ppid(orphan) == appliance.commands.pid
    wait_until(lambda: not Path(f"/proc/{orphan}").exists(), "the orphan exited and reaped", 5.0)
    assert appliance.run("kldstat").status == 0  # and the server goes on serving


def _client(sock: str | Path, module: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PERL, str(CLIENT), str(sock), module, *args],
                          capture_output=True, text=True, timeout=30, **kw)


def test_an_unknown_module_is_refused_by_name(appliance):
    r = _client(appliance.hd.cmd_sock, "os", "-c", "print(1)")
    assert r.returncode == EXIT_NOT_RUN and r.stdout == ""
    assert "'os' is no command of this appliance" in r.stderr and str(appliance.hd.cmd_sock) in r.stderr


def test_a_malformed_request_is_answered_and_the_server_goes_on(appliance):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(appliance.hd.cmd_sock))
        s.sendall(b"HTTP/1.0\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        answer = s.recv(4096)
    assert answer.startswith(b"error bad request: header") and answer.endswith(b"\n")
    assert appliance.run("kldstat").status == 0


def test_exec_starts_only_the_shell(appliance):
    """The SSH server's shells start as EXEC requests; any other program is refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(appliance.hd.cmd_sock))
        send_request(s, Request(EXEC, "/bin/sh", [b"sh", b"-c", b"true"], b"/", {}), [], [])
        answer = s.recv(4096)
    assert answer == b"error bad request: exec '/bin/sh' with 3 argument(s): this server starts /usr/bin/tcsh, with argv[0] at least\n"


def test_a_dead_server_is_said_not_run_elsewhere(tmp_path):
    """A socket file nobody listens on (the server died): the wrapper goes to it, and
    says so -- exit 126 and the socket's name, never the command run somewhere else."""
    hd = HostDir(tmp_path)
    install_bin(hd)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(hd.cmd_sock))
    s.close()
    env = {"PATH": "/usr/bin:/bin", "TWIN_HOST_DIR": str(hd.path)}
    r = subprocess.run([str(hd.bin / "kldstat")], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == EXIT_NOT_RUN and r.stdout == ""
    assert r.stderr == f"twin: command server {hd.cmd_sock}: not answering (Connection refused); the command did not run\n"
    r = subprocess.run([str(hd.bin / "kldstat")], capture_output=True, text=True, timeout=30,
                       env=dict(env, **{NO_SERVER_ENV: "1"}))
    assert r.returncode == 0 and r.stdout.startswith("Id Refs Address"), r.stderr


def test_the_protocol_round_trips_and_names_what_is_malformed():
    req = Request(RUN, "ipsec_hil_twin.fbsd.sysctl", [b"-n", b"kern.ostype", b"\xff"], b"/root", {b"A": b"1=2", b"EMPTY": b""})
    back = decode_request(encode_request(req))
    assert (back.kind, back.target, back.args, back.cwd, back.env) == (RUN, req.target, req.args, req.cwd, req.env)
    assert decode_header(encode_header(123, [0, 2])) == (123, [0, 2], False)
    assert decode_header(encode_header(7, [], from_peer=True)) == (7, [], True)
    with pytest.raises(ValueError, match="descriptors sent and taken from the peer at once"):
        decode_header(MAGIC + (7).to_bytes(4, "big") + bytes([PEER_FDS | 1]))
    with pytest.raises(ValueError, match="unknown bits"):
        decode_header(MAGIC + (7).to_bytes(4, "big") + b"\x40")
    with pytest.raises(ValueError, match="NUL"):
        encode_request(Request(RUN, "m", [b"a\0b"], b"/", {}))
    with pytest.raises(ValueError, match="argc b'9' does not match the 1 field"):
        decode_request(b"run\0m\0/\x009\0a")
    with pytest.raises(ValueError, match="not NAME=VALUE"):
        decode_request(b"exec\0/bin/sh\0/\x000\0NOEQUALS")
    with pytest.raises(ValueError, match="kind 'spawn', expected 'run' or 'exec'"):
        decode_request(b"spawn\0m\0/\x000")
    with pytest.raises(ValueError, match="is not b'TWC1'"):
        decode_header(b"XXXX" + bytes(HEADER_SIZE - 4))
    with pytest.raises(ValueError, match="more than"):
        decode_header(MAGIC + (1 << 30).to_bytes(4, "big") + b"\x07")


def test_the_perl_client_loads_no_module_and_repeats_the_protocols_constants():
    """The client runs on every command: a module would be paid each time (`use Socket`
    alone is 8 ms). It cannot import the protocol's home, so its copies are checked here."""
    text = CLIENT.read_text()
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert [line for line in code if re.match(r"\s*(use|require)\b", line)] == ["use strict;"]
    assert f'"{MAGIC.decode()}"' in text
    assert re.search(rf"\$peer_flag = {PEER_FDS:#04x};", text)
    assert re.search(rf"exit {EXIT_NOT_RUN} }}", text)
    assert (socket.AF_UNIX, socket.SOCK_STREAM) == (1, 1) and "($AF_UNIX, $SOCK_STREAM) = (1, 1)" in text


def test_the_command_gets_the_clients_fds_cwd_and_environment_when_it_sends_none(appliance, tmp_path):
    """The Perl client sends no descriptors: the server takes them from it (pidfd_getfd).
    The command must read the client's stdin pipe and write into the same open file the
    client had (opened for append: what was there stays), and see the client's working
    directory and environment."""
    out = tmp_path / "out.txt"
    out.write_text("before\n")
    env = {"PATH": "/usr/bin:/bin", "TWIN_HOST_DIR": str(appliance.hd.path), "MARK": "m1", "PERL_BADLANG": "0"}
    with open(out, "a") as fh:
        r = subprocess.run([PERL, str(CLIENT), str(appliance.hd.cmd_sock), "ipsec_hil_twin.fbsd.b64decode", "-r"],
                           input="aGVsbG8K", stdout=fh, stderr=subprocess.PIPE, text=True, timeout=30,
                           cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "before\nhello\n"
    r = subprocess.run([PERL, str(CLIENT), str(appliance.hd.cmd_sock), "ipsec_hil_twin.fbsd.md5", "out.txt"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, cwd=tmp_path, env=env)
    assert (r.returncode, r.stderr) == (0, "") and r.stdout.startswith("MD5 (out.txt) = "), r.stderr
    # the environment: sysctl finds the appliance's values through TWIN_HOST_DIR
    r = subprocess.run([PERL, str(CLIENT), str(appliance.hd.cmd_sock), "ipsec_hil_twin.fbsd.sysctl", "-n", "kern.ostype"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, cwd=tmp_path, env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, "FreeBSD\n", "")


SHELL_VIEW = ("echo pid $$; echo stat `cut -d' ' -f6 /proc/$$/stat`; "
              "/bin/sh -c 'n=0; until grep -q sigsuspend /proc/$PPID/wchan || [ $n -ge 1000 ]; do n=$((n+1)); "
              "sleep 0.005; done; grep -E \"^Sig(Ign|Blk)\" /proc/$PPID/status; echo waiting `cat /proc/$PPID/wchan`'; "
              "ls -l /proc/$$/fd >! /tmp/.fds.$$; sed -n 's/.* \\([0-9]*\\) -> \\(.*\\)/fd \\1 \\2/p' /tmp/.fds.$$; "
              "rm -f /tmp/.fds.$$; echo cwd `pwd`")
"""tcsh reports what it is: its pid, session, ignored and blocked signals, descriptors and
working directory, from /proc ($$ is the shell's own pid). The descriptors are listed by
a command the shell waits for, into a file: listed from a pipeline (``ls | sed``) they
raced the shell's own pipe ends, open while it starts the pipeline (ci54: fds 6 and 7).
The signal masks are read by a child once the shell waits for it in sigsuspend (its
wchan; up to 5 s): read at once, they raced the shell too -- between its fork and its
wait tcsh has not yet blocked SIGINT, and a child that read /proc then saw SigBlk 0 where
the waiting shell shows 2 (issue 52: 1 of 60 served shells beside two busy loops, and 3
of 300 plain tcsh runs; 0 of 200 on an idle machine). Where the shell is when it is read
is the condition, never the masks the test compares."""


def _view(text: str) -> dict[str, str]:
    view: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.replace("\t", " ").partition(" ")
        if key == "fd":
            fd, _, target = value.partition(" ")
            view[f"fd{fd}"] = target
        else:
            view[key.rstrip(":")] = value.strip()
    return view


def test_the_shell_is_spawned_with_only_its_pipes_in_a_session_of_its_own(appliance):
    """EXEC by vfork (ipsec_hil_twin.shell.cmdserver.spawn_program): the shell must be what the forked
    child made it -- no descriptor of the server (its listener, connections, pidfds,
    selector), a session of its own, the signal state of a cleanly started tcsh (the same
    command run by Popen, which resets the mask and SIGPIPE: tcsh then blocks and ignores
    what it does itself), the user's home as working directory -- and the server's own
    directory unchanged after."""
    server_cwd = os.readlink(f"/proc/{appliance.commands.pid}/cwd")
    r = appliance.run(SHELL_VIEW)
    assert r.status == 0, r.err
    view = _view(r.out)
    ref = _view(subprocess.run(["/usr/bin/tcsh", "-f", "-c", SHELL_VIEW], capture_output=True, text=True,
                               timeout=30, start_new_session=True).stdout)
    assert view["stat"] == view["pid"], f"session {view['stat']}, shell {view['pid']}: not a session leader"
    assert "sigsuspend" in view["waiting"] and "sigsuspend" in ref["waiting"], (view, ref)
    assert (view["SigIgn"], view["SigBlk"]) == (ref["SigIgn"], ref["SigBlk"]), (view, ref)
    fds = {k: v for k, v in view.items() if k.startswith("fd")}
    assert {"fd0", "fd1", "fd2"} <= set(fds), fds
    foreign = {k: v for k, v in fds.items() if not v.startswith(("pipe:", "/dev/null"))}
    assert not foreign, f"the shell holds descriptors that are not its SSH session's pipes: {foreign}"
    ref_fds = sorted(k for k in ref if k.startswith("fd"))
    assert sorted(fds) == ref_fds, f"descriptors {sorted(fds)}, a cleanly started tcsh has {ref_fds}"
    assert view["cwd"] == "/root", view["cwd"]
    assert os.readlink(f"/proc/{appliance.commands.pid}/cwd") == server_cwd


def _workers(appliance) -> list[int]:
    return sorted(p for p in _children(appliance.commands.pid) if _comm(p) == IDLE_NAME)


def test_a_worker_runs_the_next_command_with_nothing_of_the_last(appliance, tmp_path):
    """ipsec_hil_twin.shell.cmdworker: a worker that ran a command runs the next one (the
    reuse that spares each command its copy-on-write faults), and the next command sees
    its own stdin, working directory and environment, not what the last one had."""
    env = {"PATH": "/usr/bin:/bin", "TWIN_HOST_DIR": str(appliance.hd.path), "PERL_BADLANG": "0"}
    for name, text in (("a", "one\n"), ("b", "two\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x").write_text(text)
    first = _client(appliance.hd.cmd_sock, "ipsec_hil_twin.fbsd.b64decode", "-r", input="b25lCg==\n", env=env)
    assert (first.returncode, first.stdout, first.stderr) == (0, "one\n", "")
    workers = _workers(appliance)
    assert workers, "no idle worker after a command"
    runs = [
        (_client(appliance.hd.cmd_sock, "ipsec_hil_twin.fbsd.b64decode", "-r", input="dHdvCg==\n", env=env), "two\n"),
        (_client(appliance.hd.cmd_sock, "ipsec_hil_twin.fbsd.md5", "-q", "x", cwd=tmp_path / "a", env=env),
         "5bbf5a52328e7439ae6e719dfe712200\n"),
        (_client(appliance.hd.cmd_sock, "ipsec_hil_twin.fbsd.md5", "-q", "x", cwd=tmp_path / "b", env=env),
         "c193497a1a06b2c72230e6146ff47080\n"),
        (_client(appliance.hd.cmd_sock, "ipsec_hil_twin.fbsd.sysctl", "dev.npuep.0.ipsec", env=env), None),
        (_client(appliance.hd.cmd_sock, "ipsec_hil_twin.fbsd.sysctl", "dev.npuep.0.ipsec",
                 env={**env, "TWIN_HOST_DIR": str(tmp_path)}), None),
    ]
    for r, want in runs[:3]:
        assert (r.returncode, r.stdout, r.stderr) == (0, want, ""), r
    (driver, _), (elsewhere, _) = runs[3:]
    assert driver.returncode == 0 and "dev.npuep.0.ipsec.tx_accel: " in driver.stdout, driver
    # another host dir in the environment (an empty one): not the appliance's driver
    assert (elsewhere.returncode, elsewhere.stdout) != (0, driver.stdout), elsewhere
    assert _workers(appliance) == workers, "the commands were not run by the idle workers"


def test_commands_at_once_get_workers_of_their_own_and_few_stay(appliance):
    """Commands that run at the same time each get a worker; once they are done, at most
    IDLE_MAX wait for more."""
    env = dict(os.environ, TWIN_HOST_DIR=str(appliance.hd.path), PATH=f"{appliance.hd.bin}:/usr/bin:/bin")
    env.pop("PYTHONPATH", None)
    pings = [subprocess.Popen(["nsenter", f"--net=/run/netns/{appliance.ns}", str(appliance.hd.bin / "ping"),
                               "-c", "3", "-i", "0.3", "10.77.0.2"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(IDLE_MAX + 2)]
    wait_until(lambda: len([p for p in _children(appliance.commands.pid) if _comm(p) == "ping" and _sid(p) == p])
               == len(pings), "every ping in a worker of its own", 5.0)
    for p in pings:
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0 and b"3 packets received" in out, err
    wait_until(lambda: len(_workers(appliance)) <= IDLE_MAX, f"at most {IDLE_MAX} idle workers", 5.0)
    assert 1 <= len(_workers(appliance)) <= IDLE_MAX


LEFT_BEHIND = """
import os, socket, subprocess, threading, time
from ipsec_hil_twin.shell.cmdworker import left_behind
a, b = socket.socketpair()
b.close()
print(repr(left_behind(a.fileno())))
p = subprocess.Popen(["sleep", "5"])
print(repr(left_behind(a.fileno())))
p.kill(); p.wait()
f = open(os.devnull)
print(repr(left_behind(a.fileno())))
f.close()
t = threading.Thread(target=time.sleep, args=(2,), daemon=True); t.start()
print(repr(left_behind(a.fileno())))
"""


def test_what_a_command_leaves_behind_ends_its_worker():
    """A worker runs no further command after one that left a child process, an open
    descriptor or a thread (cmdworker.left_behind: it exits instead, as a fresh child did)."""
    r = subprocess.run([sys.executable, "-S", "-c", LEFT_BEHIND], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "twin")))
    assert r.returncode == 0, r.stderr
    nothing, child, fd, thread = r.stdout.splitlines()
    assert nothing == "''"
    assert child == "'a child process'"
    assert fd.startswith("'descriptor(s) [") and fd != "'descriptor(s) []'", fd
    assert thread == "'1 thread(s)'"
