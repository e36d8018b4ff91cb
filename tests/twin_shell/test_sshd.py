"""The emulated appliance's SSH server: csh semantics, streams, status, SFTP, sessions."""
from __future__ import annotations

import hashlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import paramiko
import pytest

from ipsec_hil_twin.shell.sshd import SshdError, load_authorized_keys
from ipsec_hil_twin.shell.sshd_exec import exit_status_of

from .conftest import build_host_dir, new_client_key

pytestmark = pytest.mark.needs_root


def test_csh_2_and_1_leaves_a_file_named_1(appliance):
    appliance.run("rm -f 1")
    r = appliance.run("ls /nonexistent 2>&1")
    assert (r.out, r.err, r.status) == ("", "", 2)  # both streams went into the file
    one = appliance.hd.root / "root" / "1"  # root's home is per appliance (DIR/root/root)
    text = one.read_text()
    assert "/nonexistent" in text and "'2'" in text  # `2` became an argument of ls
    r = appliance.run("ls /nonexistent >/dev/null 2>&1")
    assert (r.err, r.status) == ("Ambiguous output redirect.\n", 1)


def test_sh_script_on_stdin_has_separate_streams_and_status(appliance):
    r = appliance.sh('echo "to out"; echo "to err" >&2; printf "%s" "$TWIN_HOST_DIR"; exit 7\n')
    assert r.out == "to out\n" + str(appliance.hd.path)
    assert r.err == "to err\n"
    assert r.status == 7


def test_unknown_command_is_csh_command_not_found(appliance):
    r = appliance.run("nosuchcommand -x")
    assert (r.out, r.err, r.status) == ("", "nosuchcommand: Command not found.\n", 1)


def test_environment_and_appliance_paths(appliance):
    r = appliance.sh("echo $PATH; echo $HOME $SHELL $USER; pwd; command -v sysctl\n")
    lines = r.out.splitlines()
    assert lines[0].split(":")[0] == str(appliance.hd.bin)
    assert lines[1] == "/root /bin/csh root"
    assert lines[2] == "/root"
    assert lines[3] == str(appliance.hd.bin / "sysctl")


def test_signal_status_is_128_plus_n(appliance):
    assert exit_status_of(-9) == 137 and exit_status_of(3) == 3
    r = appliance.run("/bin/sh -c 'kill -TERM $$'")
    assert r.status == 128 + signal.SIGTERM


def test_commands_run_in_the_appliance_namespace(appliance):
    r = appliance.sh("ip -o link show | awk -F': ' '{print $2}' | sort\n")
    names = {n.split("@")[0] for n in r.out.split()}
    assert {"lan", "wan", "lo"} <= names


def test_sftp_put_posix_rename_get_and_shell_sees_same_bytes(appliance):
    data = b"connections {\n  lab { version = 2 }\n}\n\x01binary\xff\n"
    sftp = appliance.client.open_sftp()
    try:
        sftp.putfo(io.BytesIO(data), "/usr/local/etc/swanctl/.swanctl.conf.tmp")
        sftp.putfo(io.BytesIO(b"old"), "/usr/local/etc/swanctl/swanctl.conf")
        sftp.posix_rename("/usr/local/etc/swanctl/.swanctl.conf.tmp", "/usr/local/etc/swanctl/swanctl.conf")
        got = io.BytesIO()
        sftp.getfo("/usr/local/etc/swanctl/swanctl.conf", got)
        assert got.getvalue() == data
        assert ".swanctl.conf.tmp" not in sftp.listdir("/usr/local/etc/swanctl")
        sftp.chmod("/usr/local/etc/swanctl/swanctl.conf", 0o600)
        assert sftp.stat("/usr/local/etc/swanctl/swanctl.conf").st_mode & 0o777 == 0o600
        sftp.mkdir("/var/db/twtest")
        sftp.putfo(io.BytesIO(b"a"), "/var/db/twtest/a")
        sftp.putfo(io.BytesIO(b"b"), "/var/db/twtest/b")
        with pytest.raises(IOError):
            sftp.rename("/var/db/twtest/a", "/var/db/twtest/b")  # SFTPv3 rename never overwrites
        sftp.rename("/var/db/twtest/a", "/var/db/twtest/c")
        assert sorted(sftp.listdir("/var/db/twtest")) == ["b", "c"]
        for n in ("b", "c"):
            sftp.remove(f"/var/db/twtest/{n}")
        sftp.rmdir("/var/db/twtest")
    finally:
        sftp.close()
    r = appliance.sh("od -An -tx1 /usr/local/etc/swanctl/swanctl.conf | tr -d ' \\n'\n")
    assert r.out == data.hex()
    assert (appliance.hd.root / "usr/local/etc/swanctl/swanctl.conf").read_bytes() == data


def test_sftp_refuses_paths_escaping_the_root(appliance):
    link = appliance.hd.root / "var/db/escape"
    link.unlink(missing_ok=True)
    os.symlink("/etc", link)
    sftp = appliance.client.open_sftp()
    try:
        with pytest.raises(PermissionError):
            sftp.stat("/../../../etc/passwd")
        with pytest.raises(PermissionError):
            sftp.open("/var/db/escape/passwd").read()
        with pytest.raises(PermissionError):
            sftp.listdir("/var/db/escape")
        # the symlink itself may be inspected (lstat) but not followed
        assert sftp.lstat("/var/db/escape").st_mode & 0o170000 == 0o120000
    finally:
        sftp.close()
        link.unlink()


def test_wrong_key_and_wrong_user_are_refused(appliance):
    port = appliance.server.port
    other, _ = new_client_key()
    c = paramiko.SSHClient()
    c.load_host_keys(str(appliance.known_hosts))
    c.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.AuthenticationException):
        c.connect("127.0.0.1", port=port, username="root", pkey=other, allow_agent=False, look_for_keys=False)
    c.close()
    c = paramiko.SSHClient()
    c.load_host_keys(str(appliance.known_hosts))
    with pytest.raises(paramiko.AuthenticationException):
        c.connect("127.0.0.1", port=port, username="admin", pkey=appliance.pkey, allow_agent=False,
                  look_for_keys=False)
    c.close()


def test_host_key_is_pinned_with_reject_policy(appliance, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    c = paramiko.SSHClient()
    c.load_host_keys(str(kh))
    c.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        c.connect("127.0.0.1", port=appliance.server.port, username="root", pkey=appliance.pkey,
                  allow_agent=False, look_for_keys=False)
    c.close()


def test_interactive_shell_is_refused(appliance):
    chan = appliance.client.get_transport().open_session()
    with pytest.raises(paramiko.SSHException):
        chan.invoke_shell()
    chan.close()


def test_concurrent_sessions(appliance):
    results: dict[int, tuple[str, int]] = {}

    def one(i: int) -> None:
        r = appliance.sh(f"sleep 0.3; echo {i}; exit {i}\n")
        results[i] = (r.out, r.status)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {i: (f"{i}\n", i) for i in range(8)}
    assert time.monotonic() - t0 < 5  # they ran side by side, not one after another


def test_cut_session_kills_the_process_group(appliance):
    marker = f"twin-cut-{os.getpid()}-{time.monotonic_ns()}"
    c = paramiko.SSHClient()
    c.load_host_keys(str(appliance.known_hosts))
    c.set_missing_host_key_policy(paramiko.RejectPolicy())
    c.connect("127.0.0.1", port=appliance.server.port, username="root", pkey=appliance.pkey,
              allow_agent=False, look_for_keys=False)
    chan = c.get_transport().open_session()
    chan.exec_command(f"/bin/sh -c 'sleep 300 & exec sleep 301' {marker}")
    time.sleep(0.5)

    def running() -> list[str]:
        out = subprocess.run(["pgrep", "-f", "sleep 30[01]"], capture_output=True, text=True).stdout.split()
        mine = []
        for pid in out:
            try:
                env_pg = os.getpgid(int(pid))
                cmd = Path(f"/proc/{env_pg}/cmdline").read_bytes()
            except (OSError, ValueError):
                continue
            if marker.encode() in cmd or marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                mine.append(pid)
        return mine

    assert running(), "the command did not start"
    c.close()  # cut the connection mid-command
    deadline = time.monotonic() + 5
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running()


def test_authorized_key_file_errors_name_the_line(tmp_path):
    p = tmp_path / "keys.pub"
    p.write_text("# comment\nnot-a-key AAAA\n")
    with pytest.raises(SshdError, match=r"keys.pub:2: expected"):
        load_authorized_keys(p)


def test_sshd_cli_writes_port_file_and_stops_on_sigterm(appliance, tmp_path):
    """An appliance of its own (one SSH server per appliance: its command server owns the
    host dir's cmd.sock); its command server goes with it."""
    hd = build_host_dir(tmp_path / "dut", appliance.ns)
    pub = tmp_path / "id.pub"
    _, text = new_client_key()
    pub.write_text(text + "\n")
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "ipsec_hil_twin.shell.sshd", "--host-dir", str(hd.path),
                             "--authorized-key", str(pub), "--port", "0", "--port-file", str(port_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        port = int(port_file.read_text())
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            assert s.recv(64).startswith(b"SSH-2.0-")
        assert hd.cmd_sock.is_socket()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        assert not hd.cmd_sock.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_large_streams_both_ways(appliance):
    """3 MB on stdout and on stderr at once, 2 MB in on stdin: nothing stalls or is lost."""
    blob = os.urandom(2 * 1024 * 1024)
    chan = appliance.client.get_transport().open_session()
    chan.settimeout(60)
    chan.exec_command("/bin/sh -c 'md5sum; head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2'")
    chan.sendall(blob)
    chan.shutdown_write()
    out, err = bytearray(), bytearray()
    while not (chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready()):
        if chan.recv_ready():
            out += chan.recv(1 << 16)
        elif chan.recv_stderr_ready():
            err += chan.recv_stderr(1 << 16)
        else:
            time.sleep(0.002)
    status = chan.recv_exit_status()
    chan.close()
    digest = hashlib.md5(blob).hexdigest().encode()
    assert status == 0
    assert out.startswith(digest + b"  -\n") and len(out) == len(digest) + 4 + 3000000
    assert len(err) == 3000000


def test_a_pipeline_writer_dies_of_sigpipe_quietly(appliance):
    """OpenSSH starts the shell with SIGPIPE at its default, so `yes | head -1` ends with
    `yes` killed by the signal, which tcsh's pipeline status reports (128 + 13). Started
    from a Python launcher, the shell inherited an ignored SIGPIPE: `yes: standard output:
    Broken pipe` on stderr and status 1."""
    r = appliance.run("yes | head -1")
    assert (r.out, r.err, r.status) == ("y\n", "", 128 + signal.SIGPIPE)
