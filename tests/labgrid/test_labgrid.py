"""The labgrid claim against a real coordinator and exporter (see conftest.py): runs wait
their turn, a killed run's place is freed, workers hold one place each, a place taken
away stops its run, and the topology's appliances get the place's addresses."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ipsec_hil.lab.sharing.labgrid_claim import LabgridError, PlaceClaim, apply_services
from ipsec_hil.lab.sharing.labgrid_session import LabgridLab
from ipsec_hil.lab.sharing.lease import LeaseLost
from ipsec_hil.lab.topology import LabgridInfo, parse_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY

REPO = Path(__file__).resolve().parents[2]
HOLDER = Path(__file__).with_name("holder.py")


def _cfg(coordinator, **kw) -> LabgridInfo:
    return LabgridInfo(coordinator=coordinator.address, **kw)


def _reservation_state(coordinator, claim_name: str) -> str | None:
    with LabgridLab(coordinator.address) as lg:
        states = [r.state.name for r in lg.reservations() if r.owner == claim_name]
    return states[0] if states else None


def _acquire_in_thread(claim: PlaceClaim) -> tuple[threading.Thread, list]:
    out: list = []

    def run() -> None:
        try:
            out.append(claim.acquire())
        except BaseException as exc:  # handed to the test, which asserts on it
            out.append(exc)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_two_runs_on_one_place_wait_in_turn_by_priority(coordinator):
    coordinator.place("lab1", "lab1", board="xgs")
    cfg = _cfg(coordinator, tags={"board": "xgs"})
    first = PlaceClaim(cfg, holder="alice", worker="r1", renew_every=1, wait=30).acquire()
    assert first.place == "lab1"
    low = PlaceClaim(cfg, holder="bob", worker="r2", wait=120)
    high = PlaceClaim(_cfg(coordinator, tags={"board": "xgs"}, prio=10), holder="ci", worker="r3", wait=120)
    t_low, got_low = _acquire_in_thread(low)
    coordinator.wait_until("bob's reservation to wait", lambda: _reservation_state(coordinator, low.name) == "waiting")
    t_high, got_high = _acquire_in_thread(high)
    coordinator.wait_until("ci's reservation to wait", lambda: _reservation_state(coordinator, high.name) == "waiting")
    assert not got_low and not got_high  # both wait while alice holds the place
    first.release()
    t_high.join(60)
    assert got_high == [high] and high.place == "lab1"  # the higher priority goes first
    assert not got_low and _reservation_state(coordinator, low.name) == "waiting"
    high.release()
    t_low.join(60)
    assert got_low == [low] and low.place == "lab1"
    low.release()
    with LabgridLab(coordinator.address) as lg:
        assert not lg.place("lab1").acquired and lg.reservations() == []
        assert " ## ipsec-hil" not in lg.place("lab1").comment  # the place's comment is left as found


def test_wait_times_out_naming_the_holder(coordinator):
    coordinator.place("lab1", "lab1")
    cfg = _cfg(coordinator, place="lab1")
    with PlaceClaim(cfg, holder="alice", worker="r1") as first:
        with pytest.raises(LabgridError) as ei:
            PlaceClaim(cfg, holder="bob", worker="r2", wait=2).acquire()
        assert f"lab1 acquired by {first.name}" in str(ei.value) and "within 2s" in str(ei.value)
    with LabgridLab(coordinator.address) as lg:
        assert lg.reservations() == []  # the refused run's reservation was cancelled


@pytest.mark.parametrize("machine", ["this", "other"])
def test_a_killed_run_does_not_block_the_place(coordinator, machine):
    """SIGKILL: nothing releases. On this machine its pid is gone -> kicked at once; on
    another machine its stamp stops changing -> kicked once its lease (4 s) passed."""
    coordinator.place("lab1", "lab1", board="xgs")
    import socket
    hostname = socket.gethostname() if machine == "this" else "machine-b"
    p = subprocess.Popen([sys.executable, str(HOLDER), coordinator.address, "board=xgs", "4", hostname],
                         cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().split() == ["ACQUIRED", "lab1"]
    finally:
        p.kill()
        p.wait(30)
    with PlaceClaim(_cfg(coordinator, tags={"board": "xgs"}), holder="bob", worker="r2", wait=120) as claim:
        assert claim.place == "lab1"
        assert "dead holder (holder.py, run run-killed)" in claim.kick_note
        why = "is gone" if machine == "this" else "was not renewed for"
        assert why in claim.kick_note and claim.name in claim.kick_note
    with LabgridLab(coordinator.address) as lg:
        assert lg.reservations() == []  # the dead run's reservation was cancelled with the kick


def test_two_workers_hold_one_place_each(coordinator):
    coordinator.place("xgs-gw0", "lab1", board="xgs")
    coordinator.place("xgs-gw1", "lab2", board="xgs")
    by_name = _cfg(coordinator, place="xgs-{worker}")
    with PlaceClaim(by_name, holder="w0", worker="gw0") as w0, PlaceClaim(by_name, holder="w1", worker="gw1") as w1:
        assert (w0.place, w1.place) == ("xgs-gw0", "xgs-gw1")
        assert w0.services["dut3300"].port == 2201 and w1.services["dut3300"].port == 2211
    by_tags = _cfg(coordinator, tags={"board": "xgs"})
    with PlaceClaim(by_tags, holder="w0", worker="gw0", wait=30) as w0, \
            PlaceClaim(by_tags, holder="w1", worker="gw1", wait=30) as w1:
        assert {w0.place, w1.place} == {"xgs-gw0", "xgs-gw1"}
        assert w0.name != w1.name


def test_place_taken_away_stops_the_run(coordinator):
    coordinator.place("lab1", "lab1")
    lost = threading.Event()
    claim = PlaceClaim(_cfg(coordinator, place="lab1"), holder="alice", worker="r1", renew_every=0.5,
                       lease=10, on_lost=lambda exc: lost.set()).acquire()
    try:
        claim.check()
        r = coordinator.client("-p", "lab1", "release", "--kick")
        assert "kicking user" in r.stdout
        assert lost.wait(30)
        with pytest.raises(LeaseLost) as ei:
            claim.check()
        assert f"labgrid place lab1 was taken from this run ({claim.name}): it is now released" in str(ei.value)
    finally:
        claim.release()


def test_topology_without_addresses_gets_them_from_the_place(coordinator):
    coordinator.place("lab1", "lab1")
    text = (REPO / "tests/topology/bad/hardware_lab_without_mgmt.yaml").read_text()
    text = text.replace("gw1", "dut3300").replace("gw2", "peer3300").replace(
        "  virtual: false\n", f"  virtual: false\n  labgrid: {{coordinator: '{coordinator.address}', place: lab1}}\n")
    topo = parse_topology(text, "lab.yaml", models=REGISTRY)
    assert topo.hosts["dut3300"].mgmt.address is None
    with PlaceClaim(topo.lab.labgrid, holder="alice") as claim:
        resolved = apply_services(topo, claim.access_for(topo))
    assert (resolved.hosts["dut3300"].mgmt.address, resolved.hosts["dut3300"].mgmt.port) == ("127.0.0.1", 2201)
    assert resolved.hosts["peer3300"].mgmt.port == 2202 and resolved.hosts["peer3300"].mgmt.user == "root"
    assert topo.hosts["dut3300"].mgmt.address is None  # the loaded topology is not changed
    coordinator.place("half", "lab1")
    coordinator.client("-p", "half", "del-match", f"exp/lab1-peer/NetworkService")
    with PlaceClaim(LabgridInfo(coordinator=coordinator.address, place="half"), holder="alice") as claim:
        with pytest.raises(LabgridError, match="place half has no NetworkService for peer3300 of .*lab.yaml .it has: dut3300."):
            claim.access_for(topo)


def test_status_and_break_commands_in_labgrid_mode(coordinator, tmp_path):
    coordinator.place("lab1", "lab1", board="xgs")
    text = (REPO / "tests/topology/bad/hardware_lab_without_mgmt.yaml").read_text().replace(
        "  virtual: false\n", f"  virtual: false\n  labgrid: {{coordinator: '{coordinator.address}', tags: {{board: xgs}}}}\n")
    topo = tmp_path / "lab.yaml"
    topo.write_text(text)
    lost = threading.Event()
    claim = PlaceClaim(parse_topology(text, models=REGISTRY).lab.labgrid, holder="alice: pytest", run_id="run-A", renew_every=0.5,
                       lease=10, on_lost=lambda exc: lost.set()).acquire()
    try:
        cli = [sys.executable, "-m", "ipsec_hil.lab.sharing"]
        st = subprocess.run([*cli, "status", str(topo)], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert st.returncode == 0, st.stderr
        assert f"place lab1 [board=xgs]: acquired by {claim.name} (alice: pytest, run run-A" in st.stdout
        assert f"reservation {claim.token} of {claim.name}: acquired" in st.stdout
        br = subprocess.run([*cli, "break", str(topo), "lab1", "--reason", "rack rewiring"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
        assert br.returncode == 0, br.stderr
        assert lost.wait(30)
        with pytest.raises(LeaseLost, match=f"it is now released .*{claim.name} kicked by .*: rack rewiring"):
            claim.check()
        # the place's appliances are fenced: this process sends them nothing more
        from ipsec_hil.lab.remote import fence

        assert sorted(claim.services) == ["dut3300", "peer3300"]
        assert all("rack rewiring" in (fence.fenced(name) or "") for name in claim.services)
    finally:
        claim.release()


def test_a_kicks_reason_is_readable_before_the_place_is_released(coordinator):
    """ci62 caught a holder that polled between the kick's release and its note, and lost
    the reason: the note now goes in first, and a renewal that sees it leaves it alone."""
    coordinator.place("lab1", "lab1")
    claim = PlaceClaim(_cfg(coordinator, place="lab1"), holder="alice", renew_every=600, lease=1200).acquire()
    try:
        with LabgridLab(coordinator.address) as lg:
            sent: list[str] = []
            real_rpc = lg.rpc

            def rpc(name, request, what):  # read the place as the holder would, just before the release
                if name == "ReleasePlace":
                    place = lg.place("lab1")
                    sent.append(place.comment or "")
                    assert place.acquired == claim.name
                    claim._renew()  # the holder's renewal in that moment must not erase the note
                    assert lg.place("lab1").comment == sent[-1]
                return real_rpc(name, request, what)

            lg.rpc = rpc
            lg.kick("lab1", "rack rewiring", "bob")
        assert sent and f"{claim.name} kicked by bob at " in sent[0]
        with pytest.raises(LeaseLost, match=f"it is now released .{claim.name} kicked by bob at .*: rack rewiring"):
            claim._renew()
    finally:
        claim.release()


def test_ctrl_c_before_the_reservation_is_answered_leaves_none(coordinator, monkeypatch):
    """Ctrl-C in the window where the coordinator has made our reservation but its answer
    has not reached us (measured: a loaded CI run's waiter was interrupted there and left a
    'waiting' reservation behind). Here the answer is held back 1 s and SIGINT reaches the
    waiting main thread in that second: no reservation of ours may remain."""
    import asyncio
    import signal

    coordinator.place("lab1", "lab1")
    claim = PlaceClaim(_cfg(coordinator, place="lab1"), holder="alice", worker="r1", wait=30)
    real_call = LabgridLab.call
    main = threading.main_thread().ident
    answered: list[str] = []

    def call(self, coro, what, **kw):
        if not what.startswith("reserve "):
            return real_call(self, coro, what, **kw)

        async def late_answer():
            resp = await coro  # the coordinator has made the reservation ...
            answered.append(resp.reservation.token)
            await asyncio.sleep(1.0)  # ... and its answer is still on its way
            return resp
        threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT)).start()
        return real_call(self, late_answer(), what, **kw)

    monkeypatch.setattr(LabgridLab, "call", call)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist's workers may ignore it
    try:
        with pytest.raises(KeyboardInterrupt):
            claim.acquire()
    finally:
        signal.signal(signal.SIGINT, old)
    assert answered, "the reservation request never reached the coordinator: the window was not exercised"
    assert _reservation_state(coordinator, claim.name) is None


def test_ctrl_c_releases_at_once_while_holding_and_while_waiting(coordinator):
    """Ctrl-C (SIGINT) is an exit path like any other: the place and the reservation go back
    at once, without waiting for a lease and without a kick."""
    import getpass
    import signal
    import socket
    coordinator.place("lab1", "lab1")
    holder = subprocess.Popen([sys.executable, str(HOLDER), coordinator.address, "lab1", "30", socket.gethostname()],
                              cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    waiter = None
    try:
        assert holder.stdout.readline().split() == ["ACQUIRED", "lab1"]
        waiter = subprocess.Popen([sys.executable, str(HOLDER), coordinator.address, "lab1", "30",
                                   socket.gethostname()], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        waiter_name = f"{socket.gethostname()}/{getpass.getuser()}.gw9.{waiter.pid}"
        coordinator.wait_until("the second run to wait",
                               lambda: _reservation_state(coordinator, waiter_name) == "waiting")
        waiter.send_signal(signal.SIGINT)
        assert waiter.wait(30) != 0
        assert _reservation_state(coordinator, waiter_name) is None  # its reservation was cancelled
        holder.send_signal(signal.SIGINT)
        assert holder.wait(30) != 0
        with LabgridLab(coordinator.address) as lg:
            place = lg.place("lab1")
            assert place.acquired is None and lg.reservations() == []
            assert "ipsec-hil" not in place.comment  # released by the run itself, not kicked
    finally:
        for p in (holder, waiter):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(30)


def test_an_unreachable_coordinator_is_named():
    with pytest.raises(LabgridError, match="labgrid coordinator 127.0.0.1:1: connect: .*Could not connect"):
        PlaceClaim(LabgridInfo(coordinator="127.0.0.1:1", place="x"), holder="alice").acquire()
