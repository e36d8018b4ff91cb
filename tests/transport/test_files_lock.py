"""files.py transactions and lock.py against the real sshd + tcsh user (and LocalHost)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time

import pytest

from ipsec_hil.lab import files
from ipsec_hil.lab.errors import ParseError, ProvisionError
from ipsec_hil.lab.files import Backup, Transaction, backup, discard, pending, recover, remote_sha256, restore, verify
from ipsec_hil.lab.sharing.lock import ApplianceLock, LeaseLost, LockHeld, LockInfo
from ipsec_hil.lab.remote import LocalHost, argv

ORIGINAL = b"# swanctl.conf\nsecrets { ike-lab { secret = \"s3cr\\1t!$`x`\" } }\n\x00\xff\n"


def _ls(host, d):
    return sorted(host.run(argv("ls", "-A", d), timeout=10).stdout.split())


@pytest.fixture(params=["ssh", "local"])
def host_and_dir(request, tmp_path):
    """The same file API on both transports."""
    if request.param == "ssh":
        return request.getfixturevalue("ssh_host"), request.getfixturevalue("workdir")
    d = tmp_path / "w"
    d.mkdir()
    return LocalHost("bench"), str(d)


def test_backup_verify_restore_byte_identical(host_and_dir):
    host, d = host_and_dir
    p, j = f"{d}/swanctl.conf", f"{d}/journal"
    host.write_file_atomic(p, ORIGINAL, mode=0o600)
    b = backup(host, p, j, run_id="r1")
    assert b.existed and b.size == len(ORIGINAL)
    assert b.sha256 == hashlib.sha256(ORIGINAL).hexdigest()
    assert remote_sha256(host, p) == b.sha256
    assert verify(host, b)
    assert host.read_file(b.backup_path) == ORIGINAL
    assert host.run(argv("stat", "-c", "%a", j), timeout=10).stdout.strip() == "700"  # secrets inside
    host.write_file_atomic(p, b"changed by the test\n")
    restore(host, b)
    assert host.read_file(p) == ORIGINAL
    assert host.run(argv("stat", "-c", "%a", p), timeout=10).stdout.strip() == "600"  # mode kept
    assert [e.journal_path for e in pending(host, j)] == [b.journal_path]
    discard(host, b)
    assert pending(host, j) == [] and _ls(host, j) == []
    assert _ls(host, d) == ["journal", "swanctl.conf"]  # no temp files anywhere


def test_restore_of_absent_file_removes_it(host_and_dir):
    host, d = host_and_dir
    p = f"{d}/conf.d/new.conf"
    host.run(argv("mkdir", "-p", f"{d}/conf.d"), timeout=10).check("mkdir")
    b = backup(host, p, f"{d}/j", run_id="r1")
    assert not b.existed and b.sha256 is None and verify(host, b)
    host.write_file_atomic(p, b"created")
    restore(host, b)
    assert not host.exists(p)


def test_corrupted_backup_refused_and_file_untouched(host_and_dir):
    host, d = host_and_dir
    p = f"{d}/f"
    host.write_file_atomic(p, ORIGINAL)
    b = backup(host, p, f"{d}/j", run_id="r1")
    host.write_file_atomic(b.backup_path, b"bitrot")
    assert not verify(host, b)
    host.write_file_atomic(p, b"current")
    with pytest.raises(ProvisionError, match="does not match its recorded sha256") as ei:
        restore(host, b)
    assert "journal entry kept" in str(ei.value)
    assert host.read_file(p) == b"current"


def test_transaction_restores_on_exception_and_clears_journal(ssh_host, workdir):
    p1, p2, j = f"{workdir}/a.conf", f"{workdir}/b.conf", f"{workdir}/j"
    ssh_host.write_file_atomic(p1, ORIGINAL)
    with pytest.raises(RuntimeError, match="test failed midway"):
        with Transaction(ssh_host, "run-x", journal_dir=j) as tx:
            tx.backup(p1)
            ssh_host.write_file_atomic(p1, b"new 1")
            tx.backup(p2)  # did not exist
            ssh_host.write_file_atomic(p2, b"new 2")
            assert tx.backup(p1).sha256 == hashlib.sha256(ORIGINAL).hexdigest()  # first backup wins
            ssh_host.write_file_atomic(p1, b"new 1 again")
            raise RuntimeError("test failed midway")
    assert ssh_host.read_file(p1) == ORIGINAL
    assert not ssh_host.exists(p2)
    assert pending(ssh_host, j) == []
    assert len(tx.restored) == 2


def test_transaction_restores_on_keyboard_interrupt(ssh_host, workdir):
    p, j = f"{workdir}/a.conf", f"{workdir}/j"
    ssh_host.write_file_atomic(p, ORIGINAL)
    with pytest.raises(KeyboardInterrupt):
        with Transaction(ssh_host, "run-k", journal_dir=j) as tx:
            tx.backup(p)
            ssh_host.write_file_atomic(p, b"half done")
            raise KeyboardInterrupt
    assert ssh_host.read_file(p) == ORIGINAL and pending(ssh_host, j) == []


def test_transaction_keep_leaves_change_and_journal(ssh_host, workdir, caplog):
    p, j = f"{workdir}/a.conf", f"{workdir}/j"
    ssh_host.write_file_atomic(p, ORIGINAL)
    with Transaction(ssh_host, "run-keep", journal_dir=j, keep=True) as tx:
        tx.backup(p)
        ssh_host.write_file_atomic(p, b"kept")
    assert ssh_host.read_file(p) == b"kept"
    assert "NOT restoring" in caplog.text
    assert recover(ssh_host, j) and ssh_host.read_file(p) == ORIGINAL


def test_dead_run_is_recovered_by_the_next(sshd_server, ssh_host, workdir, tmp_path):
    """A separate process backs up, changes and is killed (SIGKILL: no finally runs);
    a new connection finds the journal and restores."""
    p1, p2, j = f"{workdir}/swanctl.conf", f"{workdir}/conf.d-x.conf", f"{workdir}/j"
    ssh_host.write_file_atomic(p1, ORIGINAL)
    prog = tmp_path / "dead_run.py"
    prog.write_text(
        "import os, signal, sys\n"
        "from ipsec_hil.lab.remote import SshHost\n"
        "from ipsec_hil.lab.files import Transaction\n"
        f"h = SshHost('dut', '127.0.0.1', {sshd_server.port}, {sshd_server.user!r}, "
        f"{str(sshd_server.key_file)!r}, {str(sshd_server.known_hosts)!r})\n"
        f"with Transaction(h, 'dead-run', journal_dir={j!r}) as tx:\n"
        f"    tx.backup({p1!r}); h.write_file_atomic({p1!r}, b'half-provisioned')\n"
        f"    tx.backup({p2!r}); h.write_file_atomic({p2!r}, b'extra')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    import subprocess
    import sys
    rc = subprocess.run([sys.executable, str(prog)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert rc.returncode == -9, rc.stderr
    assert ssh_host.read_file(p1) == b"half-provisioned"
    left = pending(ssh_host, j)
    assert sorted(e.path for e in left) == sorted([p1, p2]) and {e.run_id for e in left} == {"dead-run"}
    fresh = sshd_server.host()
    try:
        done = recover(fresh, j)
    finally:
        fresh.close()
    assert len(done) == 2 and any(p1 in d and "dead-run" in d for d in done)
    assert ssh_host.read_file(p1) == ORIGINAL and not ssh_host.exists(p2)
    assert pending(ssh_host, j) == [] and _ls(ssh_host, j) == []
    assert recover(ssh_host, j) == []


def test_recover_restores_oldest_backup_last(ssh_host, workdir):
    p, j = f"{workdir}/a", f"{workdir}/j"
    ssh_host.write_file_atomic(p, b"v0")
    backup(ssh_host, p, j, "r1")
    ssh_host.write_file_atomic(p, b"v1")
    backup(ssh_host, p, j, "r2")  # a nested/second run backed up the already-changed file
    ssh_host.write_file_atomic(p, b"v2")
    recover(ssh_host, j)
    assert ssh_host.read_file(p) == b"v0"


def test_bad_journal_entry_names_file(ssh_host, workdir):
    j = f"{workdir}/j"
    ssh_host.run(f"mkdir -p {j} && echo '{{not json' > {j}/1-x.json", timeout=10).check("plant")
    with pytest.raises(ParseError, match="1-x.json"):
        pending(ssh_host, j)
    ssh_host.run(f"echo '{{\"path\": 3}}' > {j}/1-x.json", timeout=10).check("plant")
    with pytest.raises(ParseError, match="field path"):
        pending(ssh_host, j)


def test_backup_rejects_directory_and_relative(ssh_host, workdir):
    with pytest.raises(Exception, match="not a regular file"):
        backup(ssh_host, workdir, f"{workdir}/j")
    with pytest.raises(ProvisionError, match="absolute"):
        backup(ssh_host, "relative/path", f"{workdir}/j")


def test_backup_json_roundtrip():
    b = Backup("/p", True, "a" * 64, 3, "/j/x.bak", journal_path="/j/x.json", run_id="r")
    assert Backup.from_json(b.to_json(), "w") == b


def test_sha256_prefers_freebsd_tool(ssh_host, workdir):
    """With a `sha256` on PATH (FreeBSD's), it is used; sha256sum only as the fallback."""
    bindir = f"{workdir}/bin"
    ssh_host.run(f"mkdir -p {bindir}; printf '#!/bin/sh\\necho {'f' * 64}\\n' > {bindir}/sha256; "
                 f"chmod +x {bindir}/sha256", timeout=10).check("fake sha256")
    ssh_host.write_file_atomic(f"{workdir}/x", b"x")
    r = ssh_host.run(f"PATH={bindir}:$PATH\n" + files.SHA256_FN + f"_sha256 {workdir}/x", timeout=10)
    assert r.stdout.strip() == "f" * 64
    r = ssh_host.run(files.SHA256_FN + f"_sha256 {workdir}/x", timeout=10)
    assert r.stdout.strip() == hashlib.sha256(b"x").hexdigest()


# --------------------------------------------------------------------------- lock


def test_lock_refuses_second_holder_naming_the_first(ssh_host, workdir):
    path = f"{workdir}/ipsec-hil.lock"
    first = ApplianceLock(ssh_host, "alice: pytest -m xgs136", path=path, run_id="run-A")
    with first:
        rec = json.loads(ssh_host.read_file(path))
        assert rec["holder"] == "alice: pytest -m xgs136" and rec["run_id"] == "run-A"
        assert {"host", "pid", "time"} <= set(rec)
        second = ApplianceLock(ssh_host, "bob", path=path, run_id="run-B")
        with pytest.raises(LockHeld) as ei:
            second.acquire()
        msg = str(ei.value)
        assert "alice: pytest -m xgs136" in msg and "run-A" in msg and "since" in msg
        assert f"rm {path}" in msg
        assert ei.value.holder is not None and ei.value.holder.run_id == "run-A"
        assert first.current().run_id == "run-A"
    assert not ssh_host.exists(path)
    with ApplianceLock(ssh_host, "bob", path=path):  # free again
        pass


def test_lock_wait_gets_it_when_released(ssh_host, workdir):
    path = f"{workdir}/lock"
    first = ApplianceLock(ssh_host, "alice", path=path).acquire()
    threading.Timer(1.0, first.release).start()
    t0 = time.monotonic()
    with ApplianceLock(ssh_host, "bob", path=path, wait=10, poll=0.2) as second:
        assert 0.8 < time.monotonic() - t0 < 5
        assert second.current().holder == "bob"


def test_lock_wait_expires(ssh_host, workdir):
    path = f"{workdir}/lock"
    with ApplianceLock(ssh_host, "alice", path=path):
        t0 = time.monotonic()
        with pytest.raises(LockHeld):
            ApplianceLock(ssh_host, "bob", path=path, wait=1, poll=0.2).acquire()
        assert 0.9 < time.monotonic() - t0 < 4


def test_release_leaves_a_lock_that_is_no_longer_ours(ssh_host, workdir):
    path = f"{workdir}/lock"
    mine = ApplianceLock(ssh_host, "alice", path=path).acquire()
    other = LockInfo(holder="carol", run_id="run-C")
    ssh_host.write_file_atomic(path, (other.to_json() + "\n").encode())  # someone broke and took it
    mine.release()
    assert LockInfo.parse(ssh_host.read_file(path).decode()).holder == "carol"


def test_break_if_older_than(ssh_host, workdir):
    path = f"{workdir}/lock"
    ssh_host.write_file_atomic(path, (LockInfo(holder="ghost").to_json() + "\n").encode())
    ssh_host.run(argv("touch", "-d", "2 hours ago", path), timeout=10).check("age the lock")
    with pytest.raises(LockHeld, match="ghost"):
        ApplianceLock(ssh_host, "bob", path=path).acquire()  # never automatic
    with pytest.raises(LockHeld):
        ApplianceLock(ssh_host, "bob", path=path, break_if_older_than=3 * 3600).acquire()
    with ApplianceLock(ssh_host, "bob", path=path, break_if_older_than=3600) as lk:
        assert lk.current().holder == "bob"


def test_lock_is_atomic_under_contention(ssh_host, workdir, in_threads):
    path = f"{workdir}/lock"
    winners: list[str] = []
    held: list[ApplianceLock] = []  # released at the end: a held lease keeps renewing

    def grab(i: int) -> None:
        try:
            held.append(ApplianceLock(ssh_host, f"h{i}", path=path).acquire())
            winners.append(f"h{i}")
        except LockHeld:
            pass

    errors = in_threads(grab, 6)
    assert not errors and len(winners) == 1
    assert LockInfo.parse(ssh_host.read_file(path).decode()).holder == winners[0]
    for lk in held:
        lk.release()


def test_lease_over_ssh_expiry_takeover_and_break(ssh_host, workdir):
    """The lease's scripts through the real sshd and tcsh user: a holder on another machine
    that stopped renewing is taken over once its lease expired (host clock); a break with a
    reason stops the holder at its next renewal and is shown to the next acquirer."""
    path = f"{workdir}/run.lock"
    dead = ApplianceLock(ssh_host, LockInfo(holder="bob", host="machine-b"), path=path, lease=2, renew_every=1)
    dead.acquire()
    dead.keeper.stop()  # machine-b died
    alice = ApplianceLock(ssh_host, LockInfo(holder="alice", host="machine-a"), path=path, wait=30, poll=0.5,
                          lease=30, renew_every=10).acquire()
    assert "taken over by alice on machine-a" in ssh_host.read_file(f"{path}.log").decode()
    alice.renew()
    assert alice.status().holder.holder == "alice" and not alice.status().expired
    ApplianceLock(ssh_host, "carol", path=path).break_("DUT needs a firmware update", "carol@ws7")
    with pytest.raises(LeaseLost, match="DUT needs a firmware update"):
        alice.renew()
    from ipsec_hil.lab.remote import fence

    assert fence.fenced(ssh_host.name)  # alice's process sends nothing more to the host
    fence.reset()  # dave runs on another machine, whose process never fenced it
    with ApplianceLock(ssh_host, "dave", path=path) as dave:
        assert "carol@ws7" in dave.broken_note and "firmware update" in dave.broken_note
    alice.release()
    assert not ssh_host.exists(path) and not ssh_host.exists(f"{path}.broken")
