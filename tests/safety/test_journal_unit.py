"""The safety fixes in the library, on a LocalHost (seconds, no lab): the undo journal,
recovery's report, the interrupted backup, the lock of a dead run on this machine."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from ipsec_hil.lab.errors import ProvisionError, TransportError
from ipsec_hil.lab.files import Transaction, backup, discard, journal_undo, pending, pending_undos, recover, restore
from ipsec_hil.lab.sharing.lock import ApplianceLock, LockHeld, LockInfo
from ipsec_hil.lab.remote import LocalHost, argv


@pytest.fixture
def host():
    return LocalHost("unit")


def test_undo_entry_is_run_by_the_next_recover(host, tmp_path):
    j, marker = str(tmp_path / "journal"), tmp_path / "route-added"
    marker.write_text("x")
    e = journal_undo(host, "route fd00:b::/64 removed", argv("rm", "-f", str(marker)), j, run_id="dead-run")
    assert [u.journal_path for u in pending_undos(host, j)] == [e.journal_path]
    assert pending(host, j) == []  # undo entries are not file backups
    done = recover(host, j)
    assert not marker.exists() and pending_undos(host, j) == []
    assert len(done) == 1 and done[0].startswith("undone: route fd00:b::/64 removed") and "dead-run" in done[0]


def test_recover_undoes_before_it_restores_files(host, tmp_path):
    j, f = str(tmp_path / "journal"), tmp_path / "swanctl.conf"
    f.write_bytes(b"original\n")
    backup(host, str(f), j, run_id="r")
    journal_undo(host, "flag", argv("sh", "-c", f"cat {f} > {tmp_path}/seen-by-undo"), j, run_id="r")
    f.write_bytes(b"changed by the dead run\n")
    done = recover(host, j)
    assert f.read_bytes() == b"original\n"
    assert (tmp_path / "seen-by-undo").read_bytes() == b"changed by the dead run\n"  # undo ran first
    assert done[0].startswith("undone: flag") and done[1].startswith(f"{f} (9 bytes")


class _CutAfterCopy:
    """A host whose first command runs and then 'loses' its answer (KeyboardInterrupt)."""

    def __init__(self, inner):
        self.inner, self.name, self.fired = inner, inner.name, False

    def run(self, script, **kw):
        r = self.inner.run(script, **kw)
        if not self.fired and "cp -p" in script:
            self.fired = True
            raise KeyboardInterrupt
        return r


def test_interrupted_backup_leaves_no_orphan_copy(host, tmp_path):
    j, f = tmp_path / "journal", tmp_path / "swanctl.conf"
    f.write_bytes(b"secret = \"psk\"\n")
    with pytest.raises(KeyboardInterrupt):
        backup(_CutAfterCopy(host), str(f), str(j), run_id="r")
    assert list(j.iterdir()) == []  # the copy (which holds the PSK) is gone too


class _AnswerLost:
    """A host whose first command matching ``needle`` runs and then 'loses' its answer."""

    def __init__(self, inner, needle: str):
        self.inner, self.name, self.needle, self.fired = inner, inner.name, needle, False

    def run(self, script, **kw):
        r = self.inner.run(script, **kw)
        if not self.fired and self.needle in script:
            self.fired = True
            raise KeyboardInterrupt
        return r


def test_interrupted_undo_entry_is_dropped(host, tmp_path):
    """journal_undo is called BEFORE the change: an interrupt after the entry was written
    (its answer lost) drops the entry, since the change it reverts was never made."""
    j = tmp_path / "journal"
    with pytest.raises(KeyboardInterrupt):
        journal_undo(_AnswerLost(host, "printf"), "route removed", "true\n", str(j), run_id="r")
    assert pending_undos(host, str(j)) == [] and list(j.iterdir()) == []


def test_restore_again_after_the_copy_was_discarded_is_a_no_op(host, tmp_path):
    """A restore whose answer was lost, then its discard: restoring once more (a teardown step
    done again after an interrupt) finds the file already the original and succeeds; a
    file that differs still fails, naming the missing copy."""
    j, f = str(tmp_path / "journal"), tmp_path / "swanctl.conf"
    f.write_bytes(b"original\n")
    b = backup(host, str(f), j, run_id="r")
    f.write_bytes(b"changed\n")
    restore(host, b)
    discard(host, b)
    restore(host, b)
    assert f.read_bytes() == b"original\n"
    f.write_bytes(b"changed again\n")
    with pytest.raises(ProvisionError, match="backup copy .* is missing"):
        restore(host, b)


def test_recover_removes_what_a_run_killed_inside_backup_left(host, tmp_path):
    """SIGKILL between the copy and its entry leaves X.bak alone (the original unchanged,
    the copy holding its secrets), or an entry never renamed from .tmp: recover removes them
    and says so; a complete backup beside them is restored as usual."""
    j, f = tmp_path / "journal", tmp_path / "swanctl.conf"
    f.write_bytes(b"original\n")
    backup(host, str(f), str(j), run_id="complete")
    f.write_bytes(b"changed\n")
    (j / "1-killed-abc123-swanctl.conf.bak").write_bytes(b'secret = "psk"\n')
    (j / "2-killed-def456.undo.tmp").write_text("{")
    done = recover(host, str(j))
    assert f.read_bytes() == b"original\n" and list(j.iterdir()) == []
    removed = sorted(line for line in done if line.startswith("removed "))
    assert len(removed) == 2 and "swanctl.conf.bak" in removed[0] and "undo.tmp" in removed[1], done


class _LostOnce:
    """A host whose first command matching ``needle`` is lost before it runs (TransportError)."""

    def __init__(self, inner, needle: str):
        self.inner, self.name, self.needle, self.fired = inner, inner.name, needle, False

    def run(self, script, **kw):
        if not self.fired and self.needle in script:
            self.fired = True
            raise TransportError(f"{self.name}: connection lost")
        return self.inner.run(script, **kw)


def test_a_rollback_that_lost_its_connection_keeps_what_is_left_for_the_next_try(host, tmp_path):
    """The failed file stays in the transaction (a second rollback restores it); the error
    is a TransportError, which a teardown step does once more."""
    j = str(tmp_path / "journal")
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    a.write_bytes(b"a\n")
    b.write_bytes(b"b\n")
    lossy = _LostOnce(host, "a.conf.restore-")
    tx = Transaction(lossy, "r", j)
    tx.backup(str(a))
    tx.backup(str(b))
    a.write_bytes(b"changed a\n")
    b.write_bytes(b"changed b\n")
    with pytest.raises(TransportError, match="rollback incomplete"):
        tx.rollback()
    assert b.read_bytes() == b"b\n" and a.read_bytes() == b"changed a\n" and [x.path for x in tx.backups] == [str(a)]
    tx.rollback()
    assert a.read_bytes() == b"a\n" and tx.backups == [] and pending(host, j) == []


def _lock_record(path: Path, **kw) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LockInfo(holder="killed run", run_id="k", **kw).to_json() + "\n")


def test_lock_of_a_dead_pid_on_this_machine_is_taken_over(host, tmp_path):
    p = subprocess.Popen(["true"])
    p.wait()  # a pid that existed and is gone
    lock = tmp_path / "run.lock"
    _lock_record(lock, pid=p.pid, host=socket.gethostname())
    with ApplianceLock(host, "next run", path=str(lock)) as lk:
        assert LockInfo.parse(lock.read_text()).holder == "next run" and lk.held


@pytest.mark.parametrize("who", ["live pid here", "other machine"])
def test_lock_of_a_live_or_remote_holder_is_refused_naming_it(host, tmp_path, who):
    lock = tmp_path / "run.lock"
    if who == "live pid here":
        _lock_record(lock, pid=os.getppid(), host=socket.gethostname())
    else:
        _lock_record(lock, pid=999999, host="elsewhere.example")
    with pytest.raises(LockHeld) as ei:
        ApplianceLock(host, "next run", path=str(lock)).acquire()
    assert "killed run" in str(ei.value) and str(lock) in str(ei.value)
    assert LockInfo.parse(lock.read_text()).holder == "killed run"
