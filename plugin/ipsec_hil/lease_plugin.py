"""A lost lease or place stops the run at once (the pytest side of ipsec_hil.lab.sharing.holds).

Why a plugin of its own: the library fences a lost host at the transport and records the
loss (:data:`~ipsec_hil.lab.sharing.holds.HOLDS`) from the renewal thread; what a pytest
run must add is small and sits at five points of the run:

- **the bench's lease**, taken when the lab is ready (:class:`LeaseHold`, the run
  context's first part: before preflight or a driver deploy touches anything), renewed
  by its thread, released when the run closes: two runs never drive one bench's
  namespaces, routes and iperf3 servers at once;
- **the stop**: while tests run, a loss interrupts the main thread (a signal from the
  renewal thread, so a test blocked in a long stream is stopped too) with
  ``pytest.exit(..., returncode=LEASE_LOST)``, within one renewal period of the break;
  before each test's fixtures (``pytest_runtest_setup``, first) the same exit, so
  nothing is brought up on a lost host;
- **the exit status**: :attr:`HilExitCode.LEASE_LOST` wins over every other status (the
  run's results after the loss are not evidence of anything);
- **what was left**: the terminal's "lease lost" section and the page's section say
  which lease went to whom, that nothing more was sent there, what was left in place,
  and that the new holder's recovery owns it;
- **xdist**: a worker's losses (and what its teardowns left) travel to the controller in
  its ``workeroutput``; the controller fences those hosts too -- it runs the driver
  restore -- and ends the run the same way.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ipsec_hil.context import Part, RunContext, run_context
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.reporting import sections
from ipsec_hil.lab.reporting.page import Section
from ipsec_hil.lab.sharing.holds import HOLDS, Loss
from ipsec_hil.lab.sharing.lease import LeaseLost
from ipsec_hil.lab.sharing.lock import ApplianceLock, bench_lock_path
from ipsec_hil.lab.traffic.bench_routes import remove_empty_journal

log = logging.getLogger(__name__)

#: The signal the renewal thread sends the main thread (unused by pytest and its plugins).
STOP_SIGNAL = signal.SIGUSR2



def _acceptance(config: pytest.Config) -> bool:
    """Only a run of acceptance tests holds leases for itself: the project's own tests
    lose leases on purpose, in their own scenarios, and must not stop their own run."""
    from ipsec_hil.session import wants_lab

    return wants_lab(config)


#: How long the stop signal's handler waits for the recheck of the other leases. Short: the
#: handler runs on top of whatever the main thread was doing, and a CI run's main thread
#: was inside a command to peer3300 when the signal came -- the recheck's renewal of
#: peer3300 waited for that connection, the handler for the recheck, 20 s. Nothing depends
#: on the wait any more: from the first loss on, every command renews its host's lease
#: before it goes (ipsec_hil.lab.remote.fence.verify_before_use), and a worker waits again
#: at its session's end, holding nothing, before it tells the controller what it lost.
HANDLER_SETTLE_S = 2.0
#: The same wait where the main thread holds no connection (a hook, the session's end).
SETTLE_S = 20.0


def stop_if_lost(config: pytest.Config, settle: float = SETTLE_S) -> None:
    """End the run now (LEASE_LOST) when any of its leases or places was lost."""
    if HOLDS.losses and _acceptance(config):
        # every lease the same break took is known (and fenced) first, within ``settle``
        HOLDS.wait_settled(settle)
        message = HOLDS.stop_message()
        hold = run_context(config).part(LeaseHold)
        session = hold.session
        if run_context(config).worker:
            _tell_controller(config)
            if session is not None:  # xdist's controller then stops scheduling, not "worker crashed"
                session.shouldstop = message
        pytest.exit(message, returncode=HilExitCode.LEASE_LOST)


def _tell_controller(config: pytest.Config) -> None:
    """An xdist worker's losses and what it left, in its workeroutput: the controller
    (which restores the drivers and holds the bench) records them as its own."""
    out = getattr(config, "workeroutput", None)
    if out is not None:
        out["hil_lease_lost"] = [[loss.what, list(loss.hosts), loss.message] for loss in HOLDS.losses]
        out["hil_lease_left"] = list(HOLDS.left)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """The controller: a worker that lost a lease stops the whole run, and the controller
    fences those hosts too (its driver restore must not reach them)."""
    data = getattr(node, "workeroutput", None) or {}
    for text in data.get("hil_lease_left", []):
        HOLDS.leave(text)
    known = {(loss.what, loss.message) for loss in HOLDS.losses}
    for what, hosts, message in data.get("hil_lease_lost", []):
        if (what, message) not in known:
            HOLDS.lost(what, hosts, LeaseLost(f"{message} (found by xdist worker {node.gateway.id})"))
    if HOLDS.losses:
        stop_if_lost(node.config)


@contextlib.contextmanager
def stops_the_run(config: pytest.Config) -> Iterator[None]:
    """A LeaseLost inside (a lock's or the place's check) ends the run, not just the test."""
    try:
        yield
    except LeaseLost as exc:
        if not _acceptance(config):
            raise
        pytest.exit(HOLDS.stop_message() or str(exc), returncode=HilExitCode.LEASE_LOST)


class _Stopper:
    """Interrupts the main thread at a loss, only while tests run (a loss during the
    session's own start or end is acted on by :func:`stop_if_lost` and the exit status)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.main = threading.main_thread().ident
        self.armed = False
        self._previous: object = None
        self._unsubscribe = HOLDS.subscribe(self.on_loss)

    def on_loss(self, loss: Loss) -> None:  # the renewal thread
        # (a loss recorded by the main thread itself -- an xdist worker's, reported to the
        # controller -- is acted on by its caller: a signal to itself would wait in the
        # handler for the recheck that this very thread has yet to run)
        if self.armed and self.main is not None and threading.get_ident() != self.main:
            signal.pthread_kill(self.main, STOP_SIGNAL)

    def _handler(self, signum: int, frame: object) -> None:  # the main thread
        if self.armed and HOLDS.losses:
            self.armed = False  # once: the teardowns that follow are not interrupted again
            stop_if_lost(self.config, HANDLER_SETTLE_S)

    def arm(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(STOP_SIGNAL, self._handler)
            self.armed = True

    def disarm(self) -> None:
        if self.armed or self._previous is not None:
            self.armed = False
            signal.signal(STOP_SIGNAL, self._previous or signal.SIG_DFL)  # type: ignore[arg-type]
            self._previous = None

    def close(self) -> None:
        self.disarm()
        self._unsubscribe()


@dataclass
class LeaseHold(Part):
    """The run's own leases beside the appliances' (the bench's), and the stopper that ends
    the run at a loss. A part of the run context: created in every process with it,
    ``lab_ready`` in the controller takes the bench's lease, ``close`` releases it."""

    stopper: _Stopper | None = None
    bench_lock: ApplianceLock | None = None
    bench_host: object = None
    #: ``bench_host`` is this part's own transport (closed with the lease), not the run's lab's
    own_host: bool = False
    session: pytest.Session | None = None

    name = "lease"

    @classmethod
    def from_config(cls, config: pytest.Config) -> LeaseHold:
        return cls(stopper=_Stopper(config))

    def lab_ready(self, ctx: RunContext, session: pytest.Session) -> None:
        """Take the bench's lease for the whole run (waiting, like the appliances' leases, up
        to 600 s for another run's to end); a bench that cannot be had ends the run as "lab
        not up" naming its holder."""
        from ipsec_hil.lab.sharing.lease_cli import connect

        if not _acceptance(session.config):
            return
        topology = ctx.topology()
        bench = next((n for n, h in topology.hosts.items() if h.role == "bench"), None)
        if bench is None:
            return
        run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:12] or uuid.uuid4().hex[:12]
        # the run's connected lab's bench (one connection per run), unless the controller
        # connects no lab: the appliances are the xdist workers' labgrid places
        own = ctx.places_in_workers and topology.lab.labgrid is not None
        try:
            host = connect(topology, bench) if own else ctx.live_lab().hosts[bench]
            lock = ApplianceLock(host, f"{getpass.getuser()}@{socket.gethostname()}: pytest (bench)", run_id=run_id,
                                 path=bench_lock_path(host), wait=600, poll=2)
            lock.acquire()
        except LabError as exc:
            pytest.exit(f"bench lease: {exc}", returncode=HilExitCode.LAB_NOT_UP)
        self.bench_lock, self.bench_host, self.own_host = lock, host, own

    def worker_finish(self, ctx: RunContext, session: pytest.Session, workeroutput: dict) -> None:
        # the losses go to the controller after the session's teardowns (pytest_sessionfinish
        # below), with what they left
        if self.stopper is not None:
            self.stopper.close()

    def close(self, ctx: RunContext) -> None:
        if self.stopper is not None:
            self.stopper.close()
        lock, host, self.bench_lock, self.bench_host = self.bench_lock, self.bench_host, None, None
        if lock is None:
            return
        try:
            if lock.held and not lock.lost:
                # its journal's directory, once empty (every route removed): a virtual lab's
                # bench has one of its own on this machine, and labs come and go
                remove_empty_journal(host)
            lock.release()
        except LabError as exc:
            log.warning("bench lease not released: %s", exc)
        finally:
            if self.own_host:
                host.close()  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    hold = run_context(session.config).part(LeaseHold)
    hold.session = session
    stopper = hold.stopper
    if _acceptance(session.config) and stopper is not None:
        stopper.arm()
    try:
        stop_if_lost(session.config)  # lost during collection: no test starts
        return (yield)
    finally:
        if stopper is not None:
            stopper.disarm()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Before the item's fixtures (a wrapper runs before pytest's own setup, which sets
    them up): a session-scoped ``tunnel`` is set up before any function-scoped fixture
    (pytest orders by scope), so a check inside a fixture would come after a new
    configuration's bring-up on hosts that are no longer ours."""
    from ipsec_hil import places

    stop_if_lost(item.config)
    with stops_the_run(item.config):
        places.check_place(item.config)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    try:
        return (yield)
    finally:
        if HOLDS.losses and _acceptance(session.config):
            session.exitstatus = HilExitCode.LEASE_LOST
            if run_context(session.config).worker:
                HOLDS.wait_settled(SETTLE_S)  # every loss of the break known: the controller fences them all
                _tell_controller(session.config)  # with what the teardowns left
            else:
                _say(session.config)


def _say(config: pytest.Config) -> None:
    """The terminal's "lease lost" section. Written here, not in pytest_terminal_summary:
    pytest prints no summary for an exit status of its own choosing (27 is not one)."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    lines = HOLDS.summary_lines()
    if terminal is None:
        sys.stderr.write("".join(f"lease lost: {line}\n" for line in lines))
        return
    terminal.section("lease lost", red=True)
    for line in lines:
        terminal.write_line(line)


def pytest_hil_page_sections(config: pytest.Config) -> Section | None:
    return sections.lost_leases(HOLDS) if _acceptance(config) else None
