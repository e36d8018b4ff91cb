"""What this process holds, what it lost, and what it left for the new holder.

Why one process-wide record: a run holds many leases at once (both ends of the tunnel
being tested, the bench, an appliance whose driver it swapped, or a labgrid place), each
kept by its own renewal thread. When ANY of them is lost the whole run must stop: the
tests still to come, the fixtures' teardowns and the driver restore at the end would
otherwise drive appliances another run now holds. So every keeper reports its loss here
(:meth:`Holds.lost`, from the renewal thread, within one renewal period of the break):

1. the lost hosts are fenced at the transport at once (:mod:`ipsec_hil.lab.remote.fence`:
   every later command to them is refused, whoever sends it);
2. the loss is recorded with who holds the host now (the message the run ends with);
3. the listeners are told once (the pytest glue interrupts the run's main thread).

A teardown that finds its hosts lost does not undo its changes (it could not: the fence
refuses) but says what it left (:meth:`Holds.leave`): the new holder's recovery restores
it from the journal this run kept on the appliance. :meth:`Holds.summary_lines` says all
of it for the terminal, and the page's section is made of the same lines in reporting/
(ipsec_hil.lab.reporting.sections.lost_leases: Markdown is spelled there only).

Library code: no pytest import.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ipsec_hil.lab.remote import fence
from ipsec_hil.lab.sharing.lease import LeaseLost

log = logging.getLogger(__name__)

__all__ = ["Loss", "Holds", "HOLDS", "left_for_new_holder"]


@dataclass(frozen=True)
class Loss:
    """One lease (or place) this run lost: which, the hosts it covered, why, and when
    (wall clock: comparable with another process's command log)."""

    what: str
    hosts: tuple[str, ...]
    message: str
    at: float


class Holds:
    """The process's losses, listeners and left-in-place notes (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.losses: list[Loss] = []
        self.left: list[str] = []
        self._listeners: list[Callable[[Loss], None]] = []
        self._held: list[Any] = []  # leases held now (objects with .keeper and .host)
        self._rechecking = False
        self._settled = threading.Event()
        self._settled.set()

    def hold(self, lease: Any) -> None:
        """``lease`` (an ApplianceLock) is held from now on: rechecked at another's loss."""
        with self._lock:
            if lease not in self._held:
                self._held.append(lease)

    def unhold(self, lease: Any) -> None:
        with self._lock:
            if lease in self._held:
                self._held.remove(lease)

    def subscribe(self, listener: Callable[[Loss], None]) -> Callable[[], None]:
        """``listener(loss)`` is called (from the renewal thread) at each loss; returns the
        unsubscribe function."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)
        return unsubscribe

    def lost(self, what: str, hosts: Iterable[str], exc: BaseException) -> Loss:
        """Record a loss: fence ``hosts`` first (nothing more reaches them), then tell."""
        hosts = tuple(hosts)
        for name in hosts:
            fence.fence(name, f"lease lost ({what}): {exc}")
        loss = Loss(what, hosts, str(exc), time.time())
        fence.verify_before_use(self._renew_before_use)
        with self._lock:
            self.losses.append(loss)
            listeners = list(self._listeners)
            first = not self._rechecking
            if first:
                self._rechecking = True
                self._settled.clear()
        log.error("lease lost: %s (hosts fenced: %s)", loss.message, ", ".join(hosts) or "none")
        if not first:
            return loss  # found by the recheck of an earlier loss, whose call told the listeners
        try:
            # the listeners first (the run's main thread is interrupted now), then the other
            # leases; the interrupted run waits for that (wait_settled) before its teardown
            for listener in listeners:
                try:
                    listener(loss)
                except Exception:  # noqa: BLE001 -- a listener must not hide the loss from the next
                    log.exception("a listener of the lease loss failed")
            self._recheck_held()
        finally:
            with self._lock:
                self._rechecking = False
                self._settled.set()
        return loss

    def wait_settled(self, timeout: float = 60) -> bool:
        """Wait until the recheck after a loss is done (every lease lost by the same break
        is then known and fenced): a teardown that starts earlier may still reach a host
        whose loss its keeper has not found yet."""
        return self._settled.wait(timeout)

    def _recheck_held(self) -> None:
        """Renew every other lease held now, at once: a break usually takes several hosts
        (``break TOPOLOGY`` takes them all), and each keeper alone would notice only at
        its own next renewal -- meanwhile the stopping run's teardown would still reach
        those hosts. A lease found lost here is fenced like the first (its keeper reports
        it); one still ours is merely renewed early."""
        with self._lock:
            held = [lease for lease in self._held if lease.keeper.lost is None]
        for lease in held:
            if fence.fenced(lease.host.name):
                continue
            try:
                lease.keeper.renew_now()
            except LeaseLost:
                pass  # reported through its keeper
            except Exception as exc:  # noqa: BLE001 -- its own thread retries and decides
                log.warning("%s: early renewal after another loss failed: %s: %s", lease.host.name,
                            type(exc).__name__, exc)

    def _renew_before_use(self, host: str) -> None:
        """After a loss: renew ``host``'s lease before a command goes there (the fence's
        check before use); a lease found taken is fenced through its keeper's report."""
        with self._lock:
            held = [lease for lease in self._held if lease.host.name == host and lease.keeper.lost is None]
        for lease in held:
            try:
                lease.keeper.renew_now()
            except LeaseLost:
                pass  # its keeper reported it: the host is fenced now

    @property
    def lost_hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h for loss in self.losses for h in loss.hosts))

    def check(self) -> None:
        """Raise :class:`LeaseLost` (the first loss's message) once anything was lost."""
        if self.losses:
            raise LeaseLost(self.stop_message())

    def leave(self, text: str) -> None:
        """A teardown did not run because its hosts are lost: say what stays there."""
        with self._lock:
            if text not in self.left:
                self.left.append(text)
        log.warning("left in place for the new holder: %s", text)

    def stop_message(self) -> str:
        hosts = ", ".join(self.lost_hosts) or "none"
        return (f"this run lost its hold: {self.losses[0].message} -- the run stops now; no command is sent "
                f"to {hosts} any more") if self.losses else ""

    def summary_lines(self) -> list[str]:
        """The terminal's lines: each loss, what was left, and who restores it (the page's
        bullets too: ipsec_hil.lab.reporting.sections.lost_leases)."""
        if not self.losses:
            return []
        out = [f"lost {loss.what} at {time.strftime('%H:%M:%S', time.gmtime(loss.at))} UTC: {loss.message}"
               for loss in self.losses]
        hosts = ", ".join(self.lost_hosts)
        out.append(f"nothing was sent to {hosts} after the loss (the transport refuses every command there)")
        out += [f"left in place: {text}" for text in self.left]
        out.append(f"left in place on {hosts}: whatever this run had changed there (its journal in "
                   "/var/db/ipsec-hil); the new holder's recovery restores it when it takes the host")
        return out

    def reset(self) -> None:
        """Forget everything (tests running several scenarios in one process)."""
        with self._lock:
            self.losses.clear()
            self.left.clear()
            self._listeners.clear()
            self._held.clear()


#: The process's record: the fence is process-wide, so is what it fences for.
HOLDS = Holds()


def left_for_new_holder(locks: Iterable[object], what: str) -> bool:
    """True when any of ``locks`` (objects with ``.lost`` and ``.host``) was lost: the
    caller skips its teardown and ``what`` is noted as left in place on their hosts."""
    locks = list(locks)
    if not any(getattr(lk, "lost", None) is not None for lk in locks):
        return False
    hosts = ", ".join(dict.fromkeys(lk.host.name for lk in locks))  # type: ignore[attr-defined]
    HOLDS.leave(f"{what} on {hosts} (its teardown was not run)")
    return True
