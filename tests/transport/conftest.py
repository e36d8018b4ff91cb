"""A real OpenSSH server on 127.0.0.1 whose test user's login shell is the real tcsh.

Why real: the point of the transport is to survive csh as the login shell (OPNsense root
shell), so the tests run against OpenSSH's `shell -c "<string>"` behaviour and Debian's
tcsh, not against an emulation. Everything is named with a per-run prefix and removed at
teardown (user, home, sshd process).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ipsec_hil.lab.remote import SshHost

SSHD = "/usr/sbin/sshd"
TCSH = next((p for p in ("/usr/bin/tcsh", "/bin/tcsh") if os.path.exists(p)), None)


@dataclass(frozen=True)
class SshServer:
    port: int
    user: str
    home: Path
    key_file: Path
    known_hosts: Path
    host_key: Path
    tmp: Path

    def host(self, **kw: object) -> SshHost:
        kw.setdefault("known_hosts", self.known_hosts)
        return SshHost("sshd-test", "127.0.0.1", self.port, self.user, self.key_file, **kw)  # type: ignore[arg-type]


USER_RE = re.compile(r"^hil[0-9a-f]{6}t$")
OWNER_FILE = ".hil-owner"


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _remove_user(user: str, home: Path) -> None:
    for pid in subprocess.run(["pgrep", "-u", user], capture_output=True, text=True).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    r = subprocess.run(["userdel", "-r", "-f", user], capture_output=True, text=True)
    if r.returncode not in (0, 6, 12):  # 6: no such user; 12: home already gone
        print(f"userdel {user}: status {r.returncode}: {r.stderr.strip()}")
    shutil.rmtree(home, ignore_errors=True)


def _reap_dead_runs() -> None:
    """Remove users/sshds of earlier runs of these tests whose pytest is gone (killed by a
    timeout, say): the owner file holds the owner's pid, its start time and sshd's pid.
    A run of another process that is still alive is left alone."""
    for ent in pwd.getpwall():
        if not USER_RE.match(ent.pw_name) or ent.pw_dir != f"/tmp/{ent.pw_name}-home":
            continue
        home = Path(ent.pw_dir)
        try:
            owner_pid, owner_start, sshd_pid = (home / OWNER_FILE).read_text().split()
        except (OSError, ValueError):
            try:
                age = time.time() - home.stat().st_mtime
            except OSError:
                continue  # no home yet: being created right now by a live run
            if age < 600:
                continue  # owner file not written yet (or a run of older code)
            owner_pid = owner_start = sshd_pid = "0"
        if owner_pid != "0" and _start_time(int(owner_pid)) == owner_start:
            continue  # its pytest is alive
        if sshd_pid != "0":
            try:
                if b"sshd" in Path(f"/proc/{sshd_pid}/cmdline").read_bytes():
                    os.kill(int(sshd_pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        _remove_user(ent.pw_name, home)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _require_env() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a user and runs sshd")
    if not os.path.exists(SSHD):
        pytest.skip(f"{SSHD} missing (Debian package openssh-server)")
    if TCSH is None:
        pytest.skip("tcsh missing (Debian package tcsh)")
    if not shutil.which("ssh-keygen"):
        pytest.skip("ssh-keygen missing (openssh-client)")


@pytest.fixture(scope="session")
def transport_prefix() -> str:
    return "hil" + os.urandom(3).hex()


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory, transport_prefix: str):
    _require_env()
    _reap_dead_runs()
    tmp = tmp_path_factory.mktemp("sshd")
    os.chmod(tmp, 0o755)
    user = f"{transport_prefix}t"
    home = Path(f"/tmp/{user}-home")
    subprocess.run(["useradd", "-M", "-d", str(home), "-s", TCSH, user], check=True, capture_output=True)
    proc = None
    try:
        # A locked password ("!") makes sshd refuse the account when UsePAM is off.
        subprocess.run(["usermod", "-p", "*", user], check=True, capture_output=True)
        pw = pwd.getpwnam(user)
        (home / ".ssh").mkdir(parents=True)
        me = os.getpid()
        (home / OWNER_FILE).write_text(f"{me} {_start_time(me)} 0\n")
        key = tmp / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", user, "-f", str(key)], check=True)
        (home / ".ssh" / "authorized_keys").write_text((tmp / "id_ed25519.pub").read_text())
        for p in (home, home / ".ssh", home / ".ssh" / "authorized_keys"):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        os.chmod(home, 0o755)
        os.chmod(home / ".ssh", 0o700)
        hk = tmp / "ssh_host_ed25519_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hk)], check=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        port = _free_port()
        cfg = tmp / "sshd_config"
        cfg.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPidFile {tmp}/sshd.pid\n"
            "UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nPermitRootLogin no\n"
            f"AllowUsers {user}\nAllowTcpForwarding yes\nSubsystem sftp internal-sftp\n"
            # MaxSessions 10 is OpenSSH's default, as on the appliances
            "LogLevel VERBOSE\nMaxSessions 10\nMaxStartups 50\n"
        )
        log = open(tmp / "sshd.log", "wb")
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited {proc.returncode}: {(tmp / 'sshd.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("sshd did not listen within 10 s")
                time.sleep(0.05)
        (home / OWNER_FILE).write_text(f"{me} {_start_time(me)} {proc.pid}\n")
        kh = tmp / "known_hosts"
        ktype, kdata = (tmp / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        kh.write_text(f"[127.0.0.1]:{port} {ktype} {kdata}\n")
        yield SshServer(port, user, home, key, kh, hk, tmp)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # sshd's per-connection children run as the user; kill them (by pid) before userdel.
        _remove_user(user, home)


@pytest.fixture(scope="session")
def ssh_host(sshd_server: SshServer):
    h = sshd_server.host()
    yield h
    h.close()


@pytest.fixture
def workdir(sshd_server: SshServer, ssh_host: SshHost, request: pytest.FixtureRequest) -> str:
    """A fresh directory owned by the test user, inside its home."""
    d = f"{sshd_server.home}/w-{request.node.name[:40]}-{os.urandom(3).hex()}"
    ssh_host.run(f"mkdir -p '{d}'", timeout=10).check("mkdir workdir")
    return d


def _in_threads(work: Callable[[int], None], n: int, timeout: float = 60) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 -- returned to the test, which asserts on it
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    return errors


@pytest.fixture
def in_threads() -> Callable[[Callable[[int], None], int], list[BaseException]]:
    """``in_threads(work, n)``: ``work(0)`` .. ``work(n - 1)`` in n threads at once, joined;
    returns what they raised. The transport is shared by threads (one connection, SFTP per
    thread, sshd's MaxSessions), so several tests drive it from many threads the same way;
    an exception in a thread would otherwise be lost, not fail the test."""
    return _in_threads
