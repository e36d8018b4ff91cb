"""SshHost / LocalHost against a real sshd whose user's login shell is tcsh."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import threading
import time

import paramiko
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipsec_hil.lab.errors import CommandTimeout, HostKeyError, TransportError
from ipsec_hil.lab.remote import CommandFailed, Host, LocalHost, RunResult, SshHost, argv, host_from_mgmt, script
from ipsec_hil.lab.topology import Mgmt
from tests.twin_ike.waiting import wait_until

NASTY = [
    "plain",
    "it's \"quoted\"",
    "back\\slash \\1 \\n \\\\",
    "$HOME ${PATH} $1 $status",
    "bang! !! !$ !-1",
    "`id` $(id) $((1+2))",
    "a;b && c || d | e > f < g & h",
    "line1\nline2\n\nline4\n",
    "tab\there\r\n",
    "glob * ? [a-z] ~ ~root",
    "unicode: ü € 日本",
    "%s %d %% \\x41",
    "-n",
    "",
    "'",
    "\"",
    "} < /dev/null\n{",
]


def _naive_client(sshd_server) -> paramiko.SSHClient:
    c = paramiko.SSHClient()
    c.load_host_keys(str(sshd_server.known_hosts))
    c.connect("127.0.0.1", port=sshd_server.port, username=sshd_server.user,
              key_filename=str(sshd_server.key_file), allow_agent=False, look_for_keys=False, timeout=10)
    return c


def _naive(c: paramiko.SSHClient, cmd: str) -> tuple[str, str, int]:
    _, out, err = c.exec_command(cmd, timeout=10)
    o, e = out.read().decode(), err.read().decode()
    return o, e, out.channel.recv_exit_status()


def test_login_shell_is_tcsh_and_naive_commands_break(sshd_server, ssh_host):
    """The 000 page's lost measurement: `2>&1` through csh. The same script through
    SshHost.run is interpreted by sh and works."""
    home = str(sshd_server.home)
    ssh_host.run(argv("rm", "-f", f"{home}/1", f"{home}/2"), timeout=10).check("cleanup")
    c = _naive_client(sshd_server)
    try:
        o, e, s = _naive(c, "echo $shell")
        assert o.strip().endswith("tcsh"), (o, e)
        # `2>&1` under csh: stdout+stderr go to a file named "1"; nothing comes back.
        o, e, s = _naive(c, "ls /nonexistent 2>&1")
        assert o == ""
        assert s != 0
        assert ssh_host.exists(f"{home}/1"), "csh should have created a file named 1"
        assert b"nonexistent" in ssh_host.read_file(f"{home}/1")
        o, e, s = _naive(c, "ls /nonexistent >/dev/null 2>&1")
        assert (o, e.strip(), s) == ("", "Ambiguous output redirect.", 1)
        # `!` is history even inside single quotes in csh
        o, e, s = _naive(c, "printf '%s' 'a!b'")
        assert o != "a!b"
    finally:
        c.close()
    ssh_host.remove(f"{home}/1")

    r = ssh_host.run("ls /nonexistent 2>&1", timeout=10)
    assert "nonexistent" in r.stdout and r.stderr == "" and r.status == 2
    assert not ssh_host.exists(f"{home}/1")
    r = ssh_host.run("ls /nonexistent >/dev/null 2>&1; echo rc=$?", timeout=10)
    assert (r.stdout, r.stderr, r.status) == ("rc=2\n", "", 0)
    r = ssh_host.run("echo out; ls /nonexistent", timeout=10)
    assert r.stdout == "out\n"
    assert "nonexistent" in r.stderr and "Ambiguous" not in r.stderr
    assert r.status == 2
    assert ssh_host.run("exit 7", timeout=10).status == 7
    assert ssh_host.run("nosuchcommand-xyz", timeout=10).status == 127  # sh, not csh's 1


@pytest.mark.parametrize("s", NASTY, ids=range(len(NASTY)))
def test_arguments_survive_byte_exactly(ssh_host, workdir, s):
    r = ssh_host.run(argv("printf", "%s", s), timeout=10).check("printf")
    assert r.stdout == s
    path = f"{workdir}/f"
    ssh_host.run(argv("printf", "%s", s) + " > " + shlex.quote(path), timeout=10).check("write")
    assert ssh_host.read_file(path) == s.encode()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=60))
def test_arguments_survive_any_text(ssh_host, s):
    assert ssh_host.run(argv("printf", "%s", s), timeout=10).check("printf").stdout == s


def test_argv_and_script_helpers():
    assert argv("echo", "a b", "$x") == "echo 'a b' '$x'"
    assert script("a", "b") == "a\nb\n"
    with pytest.raises(ValueError):
        argv()


def test_stdin_data_and_script_reading_stdin(ssh_host):
    data = b"line1\n\x00\x01\\1 $x `id`\n\xff__IPSEC_HIL_STDIN_EOF__\n" * 1000 + os.urandom(1 << 20)
    r = ssh_host.run("cat; echo after", timeout=10, stdin=data)
    assert r.stdout.encode("utf-8", "surrogateescape") == data + b"after\n"
    # a command that reads stdin must not swallow the rest of the script
    r = ssh_host.run("cat\necho after\n", timeout=10)
    assert r.stdout == "after\n"
    assert ssh_host.run("ls /tmp/.ipsec-hil-stdin-* 2>/dev/null | wc -l", timeout=10).stdout.strip() == "0"


def test_syntax_error_runs_nothing(ssh_host, workdir):
    r = ssh_host.run(f"touch {workdir}/m\nif then fi\n", timeout=10)
    assert r.status == 2
    assert not ssh_host.exists(f"{workdir}/m")


def test_check_raises_with_status_and_stderr_tail(ssh_host):
    r = ssh_host.run("echo first >&2; echo boom >&2; exit 4", timeout=10)
    with pytest.raises(CommandFailed) as ei:
        r.check("the thing")
    assert ei.value.status == 4 and "the thing" in str(ei.value) and "boom" in str(ei.value)
    assert isinstance(ei.value, TransportError)
    assert ssh_host.run("true", timeout=10).check("ok").status == 0


def test_large_output_on_both_streams_does_not_deadlock(ssh_host):
    n = 3 * 1024 * 1024
    r = ssh_host.run(f"head -c {n} /dev/zero | tr '\\0' e >&2; head -c {n} /dev/zero | tr '\\0' o",
                     timeout=60)
    assert r.status == 0
    assert len(r.stdout) == n and set(r.stdout) == {"o"}
    assert len(r.stderr) == n and set(r.stderr) == {"e"}


KILL_SETTLE_S = 3.0


def test_timeout_raises_quickly_kills_remote_and_host_stays_usable(sshd_server, ssh_host):
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout):
        ssh_host.run("sleep 31; echo never", timeout=1)
    assert time.monotonic() - t0 < 2.0
    # closing the channel alone leaves `sleep` running under sshd; the transport kills
    # the command's process group from a second session, by the pid its shell said first
    # on stderr. The signal is sent before run() raises, but a machine at load 5 (4 xdist
    # workers on 2 cores) can take a moment to run the dying process: it must be gone
    # within KILL_SETTLE_S, a sleep never killed lives its 31 s.
    wait_until(lambda: subprocess.run(["pgrep", "-u", sshd_server.user, "-f", "^sleep 31$"],
                                      capture_output=True, text=True).stdout == "",
               "the remote sleep gone after the timeout", timeout=KILL_SETTLE_S, every=0.1)
    assert ssh_host.run("echo ok", timeout=10).stdout == "ok\n"


def test_the_shells_pid_line_is_taken_off_stderr_and_only_it(ssh_host):
    """The pid line that lets a timeout kill the command is the transport's, not the
    command's: stderr comes back as the command wrote it, a line of its own that looks
    the same included."""
    r = ssh_host.run("echo one >&2; echo '@@hil-pid 7' >&2; echo out", timeout=10)
    assert (r.stdout, r.stderr) == ("out\n", "one\n@@hil-pid 7\n")
    assert ssh_host.run("true", timeout=10).stderr == ""


def test_unknown_host_key_refused_before_any_command(sshd_server, ssh_host, workdir, tmp_path):
    marker = f"{workdir}/marker"
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    h = sshd_server.host(known_hosts=empty)
    with pytest.raises(HostKeyError) as ei:
        h.run(f"touch {marker}", timeout=10)
    msg = str(ei.value)
    assert str(empty) in msg and f"ssh-keyscan -p {sshd_server.port} 127.0.0.1" in msg
    assert not ssh_host.exists(marker)
    missing = sshd_server.host(known_hosts=tmp_path / "nope")
    with pytest.raises(HostKeyError, match="does not exist"):
        missing.run(f"touch {marker}", timeout=10)
    assert not ssh_host.exists(marker)


def test_changed_host_key_refused_before_any_command(sshd_server, ssh_host, workdir, tmp_path):
    marker = f"{workdir}/marker"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    ktype, kdata = (tmp_path / "other.pub").read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd_server.port} {ktype} {kdata}\n")
    h = sshd_server.host(known_hosts=kh)
    with pytest.raises(HostKeyError) as ei:
        h.run(f"touch {marker}", timeout=10)
    assert "CHANGED" in str(ei.value) and str(kh) in str(ei.value)
    assert not ssh_host.exists(marker)


def test_wrong_client_key_is_transport_error(sshd_server, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    h = SshHost("x", "127.0.0.1", sshd_server.port, sshd_server.user, tmp_path / "k", sshd_server.known_hosts)
    with pytest.raises(TransportError, match="authentication"):
        h.run("true", timeout=5)


def test_reconnects_once_when_transport_died(ssh_host):
    ssh_host.run("true", timeout=10)
    ssh_host.transport().close()
    assert ssh_host.run("echo back", timeout=10).stdout == "back\n"
    ssh_host.transport().close()
    assert ssh_host.read_file("/etc/hostname")  # SFTP session is rebuilt too


def test_atomic_write_read_modes_and_no_temp_left(ssh_host, workdir):
    p = f"{workdir}/swanctl.conf"
    data = os.urandom(300_000)
    ssh_host.write_file_atomic(p, data, mode=0o600)
    assert ssh_host.read_file(p) == data
    r = ssh_host.run(argv("stat", "-c", "%a", p), timeout=10).check("stat")
    assert r.stdout.strip() == "600"
    ssh_host.write_file_atomic(p, b"new\n")  # replaces
    assert ssh_host.read_file(p) == b"new\n"
    assert ssh_host.run(argv("ls", "-A", workdir), timeout=10).stdout.split() == ["swanctl.conf"]
    assert ssh_host.exists(p) and not ssh_host.exists(p + ".x")
    ssh_host.rename(p, p + ".x")
    assert ssh_host.read_file(p + ".x") == b"new\n"
    ssh_host.remove(p + ".x")
    ssh_host.remove(p + ".x")  # missing_ok
    with pytest.raises(TransportError):
        ssh_host.remove(p + ".x", missing_ok=False)
    with pytest.raises(TransportError, match="no such file"):
        ssh_host.read_file(p)
    with pytest.raises(TransportError):
        ssh_host.write_file_atomic(f"{workdir}/nodir/x", b"x")
    assert ssh_host.run(argv("ls", "-A", workdir), timeout=10).stdout == ""


def test_threads_share_connection_with_own_sftp(ssh_host, workdir, in_threads):
    def work(i: int) -> None:
        for j in range(5):
            p = f"{workdir}/t{i}-{j}"
            ssh_host.write_file_atomic(p, f"{i}-{j}".encode() * 1000)
            assert ssh_host.read_file(p) == f"{i}-{j}".encode() * 1000
            assert ssh_host.run(argv("cat", p), timeout=10).stdout == f"{i}-{j}" * 1000

    errors = in_threads(work, 4)
    assert not errors, errors


def test_secrets_never_logged(ssh_host, workdir, caplog):
    secret = "PSK-" + os.urandom(8).hex()
    with caplog.at_level(logging.DEBUG):
        ssh_host.write_file_atomic(f"{workdir}/s", secret.encode(), mode=0o600)
        ssh_host.read_file(f"{workdir}/s")
        ssh_host.run("cat >/dev/null", timeout=10, stdin=secret.encode())
    assert "sh script" in caplog.text  # commands are logged ...
    assert secret not in caplog.text  # ... their data is not


def test_jump_host_direct_tcpip(sshd_server):
    """Jump through the same sshd to itself: the target's host key is still checked."""
    jump = sshd_server.host()
    target = SshHost("behind", "127.0.0.1", sshd_server.port, sshd_server.user, sshd_server.key_file,
                     sshd_server.known_hosts, jump=jump)
    try:
        assert target.run("echo via-jump", timeout=10).stdout == "via-jump\n"
        assert "via" in repr(target)
        # the target's connection really rides on a channel of the jump's transport
        assert target.transport().sock is not None and isinstance(target.transport().sock, paramiko.Channel)
    finally:
        target.close()
        jump.close()


def test_host_from_mgmt(sshd_server, tmp_path):
    m = Mgmt(address="127.0.0.1", port=sshd_server.port, user=sshd_server.user,
             key_file=str(sshd_server.key_file), jump=None, connect_timeout=5, command_timeout=7)
    h = host_from_mgmt("dut", m, sshd_server.known_hosts)
    assert isinstance(h, SshHost) and h.command_timeout == 7
    try:
        assert h.run("echo hi").stdout == "hi\n"
    finally:
        h.close()
    loc = host_from_mgmt("bench", Mgmt(local=True, netns=None), None)
    assert isinstance(loc, LocalHost) and isinstance(loc, Host)
    with pytest.raises(TransportError, match="lacks"):
        host_from_mgmt("x", Mgmt(address=None, port=22, user="root", key_file="k"), "kh")
    with pytest.raises(HostKeyError):
        host_from_mgmt("x", m, None)


# --------------------------------------------------------------------------- LocalHost


def test_localhost_runs_sh_with_separate_streams(tmp_path):
    h = LocalHost("bench")
    r = h.run("echo out; echo err >&2; exit 5", timeout=10)
    assert (r.stdout, r.stderr, r.status) == ("out\n", "err\n", 5)
    assert isinstance(r, RunResult) and r.duration > 0
    assert h.run("cat; echo x", timeout=10, stdin=b"\x00d").stdout == "\x00dx\n"
    p = str(tmp_path / "f")
    h.write_file_atomic(p, b"abc", mode=0o640)
    assert h.read_file(p) == b"abc" and oct(os.stat(p).st_mode & 0o777) == "0o640"
    assert os.listdir(tmp_path) == ["f"]
    for s in NASTY:
        assert h.run(argv("printf", "%s", s), timeout=10).stdout == s


def test_localhost_timeout_kills_process_group(tmp_path):
    h = LocalHost("bench")
    marker = tmp_path / "pid"
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout):
        h.run(f"sleep 30 & echo $! > {marker}; wait", timeout=1)
    assert time.monotonic() - t0 < 2.0
    pid = int(marker.read_text())
    time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]


@pytest.fixture
def netns(transport_prefix):
    if os.geteuid() != 0:
        pytest.skip("needs root to create a network namespace")
    name = f"{transport_prefix}-ns{os.urandom(2).hex()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_localhost_in_netns(netns):
    h = LocalHost("bench", netns=netns)
    r = h.run("ip -o link show | awk -F': ' '{print $2}'; exit 3", timeout=10)
    assert r.stdout.split() == ["lo"]  # a fresh namespace: only loopback
    assert r.status == 3
    assert "netns" in repr(h)
    with pytest.raises(CommandTimeout):
        h.run("sleep 30", timeout=0.5)


def test_more_concurrent_channels_than_maxsessions(ssh_host, workdir, in_threads):
    """sshd allows 10 sessions per connection (MaxSessions); 14 threads at once wait for a
    free slot instead of failing or tearing down the shared connection."""
    barrier = threading.Barrier(14)

    def work(i: int) -> None:
        barrier.wait(10)
        r = ssh_host.run(f"sleep 0.3; echo {i}", timeout=30)
        assert r.stdout == f"{i}\n"

    errors = in_threads(work, 14)
    assert not errors, errors


def test_sftp_sessions_of_finished_threads_are_closed(ssh_host, workdir):
    p = f"{workdir}/f"
    ssh_host.write_file_atomic(p, b"x")
    for _ in range(15):  # more threads than MaxSessions, one after another
        t = threading.Thread(target=ssh_host.read_file, args=(p,))
        t.start()
        t.join(30)
    assert len(ssh_host._sftps) <= 2
    assert ssh_host.run("echo ok", timeout=10).stdout == "ok\n"


def test_unknown_target_key_behind_jump_says_scan_from_the_jump(sshd_server, tmp_path):
    empty = tmp_path / "kh"
    empty.write_text("")
    jump = sshd_server.host()
    target = SshHost("behind", "127.0.0.1", sshd_server.port, sshd_server.user, sshd_server.key_file,
                     empty, jump=jump)
    try:
        with pytest.raises(HostKeyError, match=r"ssh \S+@127.0.0.1 -p \d+ ssh-keyscan"):
            target.run("true", timeout=10)
    finally:
        target.close()
        jump.close()


def test_localhost_missing_netns_is_a_transport_error(transport_prefix):
    with pytest.raises(TransportError, match="does not exist"):
        LocalHost("bench", netns=f"{transport_prefix}-absent").run("true", timeout=5)


@pytest.mark.parametrize("stderr, want", [
    (b"@@hil-pid 4242\nwarn\n", (4242, b"warn\n")),
    (b"csh: a word before\n@@hil-pid 17\n", (17, b"csh: a word before\n")),  # the login shell's own words kept
    (b"@@hil-pid 9\nx @@hil-pid 8\n@@hil-pid 7\n", (9, b"x @@hil-pid 8\n@@hil-pid 7\n")),  # only the first
    (b"@@hil-pid 12", (None, b"@@hil-pid 12")),  # cut before its newline: no pid yet
    (b"", (None, b"")),
    (b"text @@hil-pid 5\n", (None, b"text @@hil-pid 5\n")),  # not at a line's start: the command's
])
def test_split_pid(stderr, want):
    from ipsec_hil.lab.remote.shell import split_pid
    assert split_pid(stderr) == want


def test_kill_script_spares_a_pid_that_is_no_longer_a_shell(tmp_path):
    """A pid the command said, then gave up (it ended): killed only while it is a shell,
    never another process that got the pid (here: a sleep, its own process group)."""
    from ipsec_hil.lab.remote.shell import kill_script
    victim = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        subprocess.run(["/bin/sh", "-c", kill_script(victim.pid)], timeout=10, check=True)
        assert victim.poll() is None, "a sleep that took a finished shell's pid was killed"
        shell = subprocess.Popen(["/bin/sh", "-c", "sleep 30; true"], start_new_session=True)
        subprocess.run(["/bin/sh", "-c", kill_script(shell.pid)], timeout=10, check=True)
        assert shell.wait(timeout=5) == -9
    finally:
        victim.kill()
        victim.wait()
