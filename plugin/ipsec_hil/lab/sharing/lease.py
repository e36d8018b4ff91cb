"""Keeping a lease alive while a run lives, and telling the run when it lost it.

Why a lease and not a lock that lives until released: a run killed on another machine
(a CI runner's VM torn down, a laptop that lost power) can never release; a lock it left
would block the lab until a human removes it. A lease names an expiry that the living
run keeps pushing forward; a holder that stopped renewing is dead once the expiry passed,
and the next run may take over without asking anybody.

Why the run must learn that it lost it: a lease can be taken from a live run (broken by
hand with a reason, or renewals that could not reach the appliance for longer than the
lease). That run must stop at once, before it changes anything else, with a message
that says who took it. The renewal thread cannot raise in the run's thread, so it
records the loss in :class:`LeaseKeeper`; the run calls :meth:`LeaseKeeper.check` (the
pytest glue: before each test, and before every remote change) and gets
:class:`LeaseLost`. ``on_lost`` is called once from the renewal thread for callers that
want to interrupt at once. The suite's locks and places pass every loss to
:mod:`ipsec_hil.lab.sharing.holds`, which fences the host at the transport and stops the run.

The same keeper keeps the on-appliance lease (:mod:`ipsec_hil.lab.sharing.lock`) and the labgrid
place claim (:mod:`ipsec_hil.lab.sharing.labgrid_claim`) alive: one renewal loop, one way to stop.
Both wait for a holder to go the same way too: :class:`Patience`.

Library code: no pytest import.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.remote import fence

log = logging.getLogger(__name__)

#: A lease lasts this long after its last renewal ...
DEFAULT_LEASE_S = 60.0
#: ... and is renewed this often: two renewals may fail (a slow SSH round trip, a busy
#: appliance) before a healthy run's lease is at risk.
DEFAULT_RENEW_S = 20.0


class LeaseLost(LabError):
    """This run's lease (or labgrid place) was taken from it: stop before changing anything."""


class Patience:
    """How an acquire waits for the holder to go: up to ``wait`` seconds (None: as long as
    it takes), looking again every ``poll`` seconds.

    Why one class: the on-appliance lock and the labgrid claim both wait for a holder, and
    both must neither give up early nor oversleep their deadline. :meth:`start` begins a
    wait; :meth:`over` says the time is up; :meth:`pause` sleeps until the next look, never
    past the deadline (so the last look comes at the deadline, not a poll later).
    """

    def __init__(self, wait: float | None, poll: float = 1.0) -> None:
        self.wait = wait
        self.poll = poll
        self._deadline: float | None = None

    def start(self) -> "Patience":
        self._deadline = None if self.wait is None else time.monotonic() + self.wait
        return self

    def over(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def pause(self) -> None:
        left = self.poll if self._deadline is None else self._deadline - time.monotonic()
        time.sleep(min(self.poll, max(0.0, left)))


class LeaseKeeper:
    """Call ``renew()`` every ``every`` seconds (default: a third of the lease, at most 20 s)
    in a daemon thread until :meth:`stop`.

    ``renew`` raises :class:`LeaseLost` when the lease is no longer ours (the keeper then
    stops renewing and records why); any other exception is a failed renewal, logged with
    its reason and retried at the next period, until renewals have failed for longer than
    ``lease`` seconds: then the lease may have expired and been taken, and the run has lost
    it too (it cannot prove otherwise).
    """

    def __init__(self, what: str, renew: Callable[[], None], *, every: float | None = None,
                 lease: float = DEFAULT_LEASE_S, on_lost: Callable[[LeaseLost], None] | None = None) -> None:
        if every is None:  # three renewals per lease, at most DEFAULT_RENEW_S apart
            every = min(DEFAULT_RENEW_S, lease / 3)
        if not 0 < every < lease:
            raise ValueError(f"{what}: expected 0 < renewal period ({every:g}s) < lease ({lease:g}s)")
        self.what = what
        self.every = every
        self.lease = lease
        self._renew = renew
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._lost: LeaseLost | None = None
        self._mark_lock = threading.Lock()
        #: set when the lease is lost: for a caller that waits on it (e.g. a watchdog thread)
        self.lost_event = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals = 0

    @property
    def lost(self) -> LeaseLost | None:
        """Why the lease was lost, or None while it is ours."""
        return self._lost

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease was taken; the run must stop."""
        if self._lost is not None:
            raise LeaseLost(str(self._lost))

    def start(self) -> "LeaseKeeper":
        """Start renewing (again, after a stop: a released lock may be acquired anew)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop = threading.Event()
            self._lost = None
            self.lost_event.clear()
            self._thread = threading.Thread(target=self._loop, args=(self._stop,), name=f"lease {self.what}",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing (the owner releases the lease itself). Idempotent."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=self.every + 30)

    def renew_now(self) -> None:
        """One renewal in the caller's thread (renew-on-use); raises LeaseLost if lost."""
        self.check()
        try:
            with fence.unverified():  # the renewal is the check: not preceded by another
                self._renew()
            self.renewals += 1
        except LeaseLost as exc:
            self._mark_lost(exc)
            raise

    def _mark_lost(self, exc: LeaseLost) -> None:
        with self._mark_lock:  # the renewal thread and a renew_now may both find it lost
            if self._lost is not None:
                return
            self._lost = exc
        self._stop.set()
        self.lost_event.set()
        log.error("%s: %s", self.what, exc)
        if self._on_lost is not None:
            self._on_lost(exc)

    def _loop(self, stop: threading.Event) -> None:
        last_ok = time.monotonic()
        while not stop.wait(self.every):
            try:
                with fence.unverified():
                    self._renew()
                self.renewals += 1
                last_ok = time.monotonic()
            except LeaseLost as exc:
                self._mark_lost(exc)
                return
            except Exception as exc:  # a failed renewal is retried; logged with its reason
                silent = time.monotonic() - last_ok
                log.warning("%s: renewal failed (%s: %s), %.0fs since the last one", self.what,
                            type(exc).__name__, exc, silent)
                if silent >= self.lease:
                    self._mark_lost(LeaseLost(
                        f"{self.what}: could not renew the lease for {silent:.0f}s (>= its {self.lease:g}s; "
                        f"last error: {type(exc).__name__}: {exc}); it may have expired and been taken "
                        "by another run, so this run stops"))
                    return
