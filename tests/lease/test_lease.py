"""The on-appliance lease with two machines simulated: two lock clients with different host
names writing one lock file through one Host (LocalHost, a temp dir). No mock: the real
shell scripts run, with the host's own clock deciding expiry."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ipsec_hil.lab.sharing.lease import LeaseKeeper, LeaseLost
from ipsec_hil.lab.sharing.lock import ApplianceLock, LockHeld, LockInfo
from ipsec_hil.lab.remote import LocalHost

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def lock_path(tmp_path: Path) -> str:
    return str(tmp_path / "db" / "ipsec-hil" / "run.lock")


def machine(host_name: str, who: str, path: str, **kw) -> ApplianceLock:
    """A lock client as if run on machine ``host_name`` (its own pid is irrelevant there).
    Each machine reaches the file through a Host of its own name: a lost lease fences its
    host by name in this process (ipsec_hil.lab.remote.fence), as it would on that machine."""
    return ApplianceLock(LocalHost(f"dut-{host_name}"), LockInfo(holder=who, host=host_name, pid=4242, run_id=f"run-{who}"),
                         path=path, **kw)


def _record(path: str) -> dict:
    return json.loads(Path(path).read_text())


def test_record_names_holder_host_pid_start_and_expiry(lock_path):
    a = machine("machine-a", "alice", lock_path, lease=60)
    with a:
        rec = _record(lock_path)
        assert (rec["holder"], rec["host"], rec["pid"], rec["run_id"]) == ("alice", "machine-a", 4242, "run-alice")
        assert rec["lease"] == 60 and rec["expires"] >= rec["time"] + 59
        assert a.status().holder.expires == rec["expires"] and not a.status().expired
    assert not Path(lock_path).exists()


def test_live_remote_holder_is_refused_by_name(lock_path):
    with machine("machine-b", "bob", lock_path, lease=60):
        with pytest.raises(LockHeld) as ei:
            machine("machine-a", "alice", lock_path).acquire()
    msg = str(ei.value)
    assert "bob on machine-b (pid 4242, run run-bob)" in msg and "lease until" in msg and lock_path in msg
    assert ei.value.holder.host == "machine-b"


def test_dead_remote_holder_is_taken_over_after_its_lease_expired(lock_path):
    b = machine("machine-b", "bob", lock_path, lease=2, renew_every=1).acquire()
    b.keeper.stop()  # machine-b died: nobody renews, nobody releases
    with pytest.raises(LockHeld, match="bob on machine-b"):
        machine("machine-a", "alice", lock_path).acquire()  # not expired yet: refused
    a = machine("machine-a", "alice", lock_path, wait=30, poll=0.5).acquire()
    try:
        assert _record(lock_path)["holder"] == "alice"
        log = Path(lock_path + ".log").read_text()
        assert "taken over by alice on machine-a" in log and "expired lease of bob on machine-b" in log
    finally:
        a.release()


def test_renewal_keeps_a_live_holder(lock_path):
    """A lease shorter than the wait is kept alive by its renewals: the waiter gives up."""
    renewed = threading.Event()
    b = machine("machine-b", "bob", lock_path, lease=2, renew_every=0.5)
    with b:
        first = _record(lock_path)["expires"]
        b.keeper._renew = _counting(b.keeper._renew, renewed, 4)  # observe, do not change
        assert renewed.wait(30)
        assert _record(lock_path)["expires"] > first
        with pytest.raises(LockHeld, match="bob on machine-b"):
            machine("machine-a", "alice", lock_path, wait=3, poll=0.5).acquire()
        b.check()


def _counting(fn, event: threading.Event, n: int):
    count = [0]

    def wrapped() -> None:
        fn()
        count[0] += 1
        if count[0] >= n:
            event.set()
    return wrapped


def test_stolen_lease_stops_the_holder_at_its_next_check(lock_path):
    lost = threading.Event()
    a = machine("machine-a", "alice", lock_path, lease=3, renew_every=1, on_lost=lambda exc: lost.set())
    a.acquire()
    breaker = machine("machine-b", "bob", lock_path)
    before = breaker.break_("firmware update on the DUT", "carol@machine-b")
    assert before.holder.holder == "alice"
    with machine("machine-b", "bob", lock_path) as b:  # the next acquirer sees who broke it and why
        assert "carol@machine-b" in b.broken_note and "firmware update on the DUT" in b.broken_note
        assert lost.wait(30), "the renewal thread never noticed"
        with pytest.raises(LeaseLost) as ei:
            a.check()
        assert "bob on machine-b" in str(ei.value) and "stops" in str(ei.value)
        with pytest.raises(LeaseLost):
            a.renew()
        a.release()  # not ours any more: left alone
        assert _record(lock_path)["holder"] == "bob"
    log = Path(lock_path + ".log").read_text()
    assert "broken by carol@machine-b: firmware update on the DUT; holder was alice on machine-a" in log


def test_renewal_failures_longer_than_the_lease_lose_it():
    """Lost SSH: renewals that fail for a whole lease mean another run may hold it now."""
    def unreachable() -> None:
        raise ConnectionError("ssh: connection reset")
    lost = threading.Event()
    k = LeaseKeeper("dut:/lock", unreachable, every=0.2, lease=1, on_lost=lambda e: lost.set()).start()
    assert lost.wait(30) and k.lost_event.is_set()
    with pytest.raises(LeaseLost, match="could not renew the lease .* connection reset"):
        k.check()
    k.stop()


def test_keeper_refuses_a_period_not_shorter_than_the_lease():
    with pytest.raises(ValueError, match="renewal period"):
        LeaseKeeper("x", lambda: None, every=60, lease=60)


def test_bench_lock_is_the_same_lease_on_the_bench(tmp_path):
    path = str(tmp_path / "lib" / "bench.lock")
    bench = LocalHost("bench")
    with ApplianceLock(bench, LockInfo(holder="alice", host="machine-a"), path=path):
        with pytest.raises(LockHeld, match="bench: appliance lock .*bench.lock is held by alice"):
            ApplianceLock(bench, LockInfo(holder="bob", host="machine-b"), path=path).acquire()


# --------------------------------------------------------------------------- the command


def _topology(tmp_path: Path) -> Path:
    src = (REPO / "tests/topology/bad/hardware_lab_without_mgmt.yaml").read_text()
    text = src.replace("    model: xgs3300\n", "    model: xgs3300\n    mgmt: {local: true}\n", 1)
    text = text.replace("    model: xgs136\n", "    model: xgs136\n    mgmt: {local: true}\n", 1)
    p = tmp_path / "lab.yaml"
    p.write_text(text)
    return p


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ipsec_hil.lab.sharing", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_status_and_break_commands(tmp_path):
    topo = _topology(tmp_path)
    path, bench = str(tmp_path / "run.lock"), str(tmp_path / "bench.lock")
    opts = ["--path", path, "--bench-path", bench]
    holder = machine("machine-b", "bob", path, lease=60)
    holder.acquire()
    holder.keeper.stop()
    try:
        st = _cli("status", str(topo), *opts)
        assert st.returncode == 0, st.stderr
        assert f"gw1:{path}: held by bob on machine-b (pid 4242, run run-bob)" in st.stdout
        assert "s left)" in st.stdout and f"bench:{bench}: free" in st.stdout
        no_reason = _cli("break", str(topo), "gw1", *opts)
        assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
        br = _cli("break", str(topo), "gw1", "--reason", "bob's runner was deleted", *opts)
        assert br.returncode == 0, br.stderr
        assert "broke gw1:" in br.stdout and "bob's runner was deleted" in br.stdout
        st = _cli("status", str(topo), "gw1", *opts)
        assert f"gw1:{path}: free; last broken:" in st.stdout and "bob's runner was deleted" in st.stdout
        again = _cli("break", str(topo), "gw1", "--reason", "x", *opts)
        assert again.returncode == 1 and f"gw1:{path}: no lease to break" in again.stderr
        unknown = _cli("status", str(topo), "gw9", *opts)
        assert unknown.returncode == 2 and "no host 'gw9'" in unknown.stderr
    finally:
        holder.release()


def test_a_released_lock_can_be_acquired_again_and_renews(lock_path):
    lk = machine("machine-a", "alice", lock_path, lease=3, renew_every=0.5)
    for _ in range(2):
        with lk:
            first = lk.keeper.renewals
            lk.renew()
            assert lk.keeper.renewals == first + 1 and lk.keeper._thread.is_alive()
        assert not Path(lock_path).exists() and not lk.keeper._thread.is_alive()


def test_an_active_tunnel_stops_when_either_end_lost_its_lease(tmp_path):
    """ipsec_hil.fixtures checks ``tunnel.check_leases()`` before every tunnel test: no round
    trip of its own, it reports what the renewal threads found (within one renewal period)."""
    from ipsec_hil.lab.tunnel import ActiveTunnel

    paths = [str(tmp_path / end / "run.lock") for end in ("dut", "peer")]
    lost = threading.Event()
    locks = [machine("machine-a", "alice", p, lease=3, renew_every=0.5, on_lost=lambda exc: lost.set()).acquire()
             for p in paths]
    try:
        active = ActiveTunnel(None, None, None, None, None, None, tuple(locks))
        active.check_leases()  # both ours: nothing happens
        machine("machine-b", "bob", paths[1]).break_("the peer is needed elsewhere", "carol@machine-b")
        with machine("machine-b", "bob", paths[1]):
            assert lost.wait(30), "the renewal thread never noticed"
            with pytest.raises(LeaseLost, match="bob on machine-b"):
                active.check_leases()
    finally:
        for lock in locks:
            lock.release()


# --------------------------------------------------------------------------- the fence


def test_a_fenced_host_refuses_every_operation_and_the_recording_says_so(tmp_path, monkeypatch):
    """After a loss the transport itself refuses: commands and file operations alike,
    with an error naming the host and why, and nothing reaches the host."""
    from ipsec_hil.lab.remote import fence

    monkeypatch.setenv(fence.COMMAND_LOG_ENV, str(tmp_path / "log"))
    host, target = LocalHost("dut-fence"), tmp_path / "touched"
    host.run(f"echo before > {target}")
    fence.fence("dut-fence", "lease lost (test): bob took it")
    calls = {
        "run": lambda: host.run(f"echo after > {target}"),
        "run_file": lambda: host.run_file("/bin/true", stdin=b""),
        "read_file": lambda: host.read_file(str(target)),
        "write_file_atomic": lambda: host.write_file_atomic(str(target), b"after"),
        "exists": lambda: host.exists(str(target)),
        "remove": lambda: host.remove(str(target)),
        "rename": lambda: host.rename(str(target), str(target) + ".moved"),
    }
    for op, call in calls.items():
        with pytest.raises(fence.HostFenced, match=f"dut-fence: no command sent \\({op} refused\\).*bob took it"):
            call()
    assert target.read_text() == "before\n"
    log = fence.read_log(tmp_path / "log", "dut-fence")
    assert [e.get("outcome") or e.get("event") for e in log] == ["sent", "fenced"] + ["refused"] * len(calls)
    assert [e["op"] for e in log if e.get("outcome") == "refused"] == list(calls)
    LocalHost("other").run("true")  # by name: another host is not fenced


def test_a_loss_rechecks_every_other_lease_at_once(tmp_path):
    """A break usually takes several hosts: the first loss found renews the others now,
    so a host whose own renewal is far off is fenced within a round trip, not a period."""
    from ipsec_hil.lab.remote import fence
    from ipsec_hil.lab.sharing.holds import HOLDS

    told = threading.Event()
    unsubscribe = HOLDS.subscribe(lambda loss: told.set())
    quick = ApplianceLock(LocalHost("dut-quick"), "alice", path=str(tmp_path / "q.lock"), lease=30, renew_every=0.3)
    slow = ApplianceLock(LocalHost("dut-slow"), "alice", path=str(tmp_path / "s.lock"), lease=60, renew_every=20)
    other = ApplianceLock(LocalHost("dut-other"), "alice", path=str(tmp_path / "o.lock"), lease=60, renew_every=20)
    try:
        for lk in (quick, slow, other):
            lk.acquire()
        for lk in (slow, quick):  # the slow one first: its own thread would see it in 20 s
            ApplianceLock(LocalHost("breaker"), "carol", path=lk.path).break_("taken for a test", "carol@ws7")
        assert told.wait(10) and HOLDS.wait_settled(10)
        assert fence.fenced("dut-quick") and fence.fenced("dut-slow"), HOLDS.losses
        assert "taken for a test" in fence.fenced("dut-slow")
        assert fence.fenced("dut-other") is None and other.lost is None  # still ours: renewed early
        assert sorted(HOLDS.lost_hosts) == ["dut-quick", "dut-slow"]
        with pytest.raises(LeaseLost, match="this run lost its hold"):
            HOLDS.check()
    finally:
        unsubscribe()
        for lk in (quick, slow, other):
            lk.release()  # the lost ones send nothing; the held one is removed
    assert not Path(other.path).exists() and not Path(slow.path).exists()


def test_after_a_loss_a_host_broken_after_the_recheck_is_fenced_before_the_next_command(tmp_path, monkeypatch):
    """A break takes hosts one by one; the recheck can fall between two of them (a CI run:
    the bench renewed early, broken a moment later, never fenced before the run ended).
    From the first loss on, each command renews its host's lease first: the host broken
    after the recheck is fenced before the command, which is refused unsent."""
    from ipsec_hil.lab.remote import fence
    from ipsec_hil.lab.sharing.holds import HOLDS

    monkeypatch.setenv(fence.COMMAND_LOG_ENV, str(tmp_path / "log"))
    first = ApplianceLock(LocalHost("dut-first"), "alice", path=str(tmp_path / "f.lock"), lease=60, renew_every=20)
    late = ApplianceLock(LocalHost("dut-late"), "alice", path=str(tmp_path / "l.lock"), lease=60, renew_every=20)
    target = tmp_path / "touched"
    try:
        for lk in (first, late):
            lk.acquire()
        ApplianceLock(LocalHost("breaker"), "carol", path=first.path).break_("taken for a test", "carol@ws7")
        with pytest.raises(LeaseLost):
            first.renew()
        assert HOLDS.wait_settled(10) and fence.fenced("dut-first")
        assert fence.fenced("dut-late") is None and late.lost is None  # the recheck renewed it: still ours
        LocalHost("dut-late").run(f"echo still-ours > {target}")  # renewed before use, and sent
        ApplianceLock(LocalHost("breaker"), "carol", path=late.path).break_("taken a moment later", "carol@ws7")
        with pytest.raises(fence.HostFenced, match="dut-late: no command sent.*taken a moment later"):
            LocalHost("dut-late").run(f"echo after-the-break > {target}")
        assert target.read_text() == "still-ours\n"
        log = [e.get("outcome") or e.get("event") for e in fence.read_log(tmp_path / "log", "dut-late")
               if e.get("what", "").startswith("echo") or e.get("event")]
        assert log == ["sent", "fenced", "refused"], log
    finally:
        for lk in (first, late):
            lk.release()


def test_a_bench_in_a_namespace_has_a_lease_file_of_its_own():
    """Virtual labs side by side share this machine's /var/lib: one file per bench netns."""
    from ipsec_hil.lab.sharing.lock import BENCH_LOCK_PATH, bench_lock_path

    assert bench_lock_path(LocalHost("bench")) == BENCH_LOCK_PATH
    assert bench_lock_path(LocalHost("bench", netns="tw1a2b-bench")) == "/var/lib/ipsec-hil/bench.tw1a2b-bench.lock"


def test_lease_seconds_from_the_environment_is_checked(monkeypatch):
    from ipsec_hil.lab.errors import LabError
    from ipsec_hil.lab.sharing.lock import lease_seconds

    monkeypatch.setenv("HIL_LEASE_SECONDS", "6")
    assert lease_seconds() == 6 and machine("m", "a", "/x").lease == 6
    monkeypatch.setenv("HIL_LEASE_SECONDS", "2")
    with pytest.raises(LabError, match="HIL_LEASE_SECONDS='2': expected seconds between 3 and 86400"):
        lease_seconds()
