"""Holding a labgrid place for a run: reserve, wait one's turn, acquire, renew, release.

Why: driver teams already share their appliances through a labgrid coordinator; the suite
uses that engine (fair queueing by ``reserve --wait`` semantics, tags, priorities) instead
of its own, and gets each appliance's SSH address and user from the place's
``NetworkService`` resources, so the topology file names no addresses (see
docs/shared-lab.md). What labgrid alone does not give, and this adds:

- a run that is killed with its place acquired does not block the lab for good: while it
  holds the place, the run renews a stamp in the place's comment; a waiting run that sees
  a stamp unchanged for longer than its lease (or a holder on its own machine whose pid is
  gone) kicks that holder (:meth:`LabgridLab.kick`). Reservations that were never acquired
  expire by themselves in the coordinator (60 s without a poll).
- a run whose place was taken (kicked by hand, ``labgrid-client release --kick``) learns it
  at its next renewal: :meth:`PlaceClaim.check` raises :class:`LeaseLost` naming who has
  the place now and what the kick said.

Library code: no pytest import.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.sharing.labgrid_session import STAMP, LabgridError, LabgridLab, Stamp, pid_of, run_user
from ipsec_hil.lab.sharing.lease import LeaseKeeper, LeaseLost, Patience
from ipsec_hil.lab.topology import LabgridInfo, Topology

log = logging.getLogger(__name__)

__all__ = ["PlaceClaim", "ServiceAccess", "LabgridError", "LabgridLab", "apply_services", "worker_id"]


@dataclass(frozen=True)
class ServiceAccess:
    """How to reach one appliance, as the place's NetworkService publishes it."""

    name: str
    address: str
    port: int
    user: str
    resource: str  # exporter/group/NetworkService/name, for messages


class _Watch:
    """A waiter's view of other holders' stamps: the stamp text and when (our monotonic
    clock) we first saw it. A stamp unchanged for longer than its lease is a dead holder."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, float]] = {}

    def unchanged_for(self, place: str, stamp_text: str) -> float:
        now = time.monotonic()
        last = self.seen.get(place)
        if last is None or last[0] != stamp_text:
            self.seen[place] = (stamp_text, now)
            return 0.0
        return now - last[1]


class PlaceClaim:
    """``with PlaceClaim(cfg, holder="alice: pytest", worker="gw0") as claim:`` -- one place.

    ``acquire`` reserves (tags, or ``name: PLACE``) with ``cfg.prio``, waits up to ``wait``
    seconds (None: as long as it takes) for the coordinator to allocate a place, acquires
    it and reads its NetworkService resources (:attr:`services`). While held, a daemon
    thread renews the stamp every ``renew_every`` s and checks the place is still ours.
    ``release`` (idempotent) releases the place and cancels the reservation.
    """

    def __init__(self, cfg: LabgridInfo, *, holder: str, run_id: str = "", worker: str = "main",
                 wait: float | None = None, poll: float = 1.0, lease: float | None = None,
                 renew_every: float | None = None, hostname: str | None = None,
                 on_lost: Callable[[LeaseLost], None] | None = None) -> None:
        self.cfg = cfg
        self.holder = holder
        self.run_id = run_id
        self.worker = worker
        self.patience = Patience(wait, poll)
        self.lease = float(lease if lease is not None else cfg.lease)
        self.hostname = hostname or socket.gethostname()
        self.user = run_user(worker)
        self.lab: LabgridLab | None = None
        self.place: str | None = None
        self.token: str | None = None
        self._reserved = False  # a CreateReservation was sent (answered or not)
        self.services: dict[str, ServiceAccess] = {}
        self.kick_note = ""  # what the previous holder's kick said, if it was kicked
        self._own_comment = ""  # the place's comment without our stamp (restored on release)
        self._n = 0
        self._on_lost = on_lost
        self.keeper = LeaseKeeper(f"labgrid {cfg.coordinator} place", self._renew, every=renew_every,
                                  lease=self.lease, on_lost=self._lost)

    def _lost(self, exc: LeaseLost) -> None:
        """From the renewal thread, once: fence the place's appliances (by their names)
        and record the loss for the run (ipsec_hil.lab.sharing.holds), then ``on_lost``."""
        from ipsec_hil.lab.sharing.holds import HOLDS

        HOLDS.lost(f"labgrid place {self.place}", tuple(self.services), exc)
        if self._on_lost is not None:
            self._on_lost(exc)

    @property
    def name(self) -> str:
        """Our labgrid client name, as the coordinator shows it (``HOST/login.worker.pid``)."""
        return f"{self.hostname}/{self.user}"

    # ------------------------------------------------------------------ acquire

    def acquire(self) -> "PlaceClaim":
        from labgrid.remote.common import Reservation, ReservationState
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        self.lab = LabgridLab(self.cfg.coordinator, user=self.user, hostname=self.hostname)
        try:
            filters = self.cfg.filters(self.worker)
            req = pb.CreateReservationRequest(filters={"main": pb.Reservation.Filter(filter=filters)},
                                              prio=self.cfg.prio)
            # from the request on, the coordinator may hold a reservation of ours, even if a
            # Ctrl-C comes before its answer: _give_back then cancels ours by name
            self._reserved = True
            res = Reservation.from_pb2(self.lab.rpc("CreateReservation", req, f"reserve {filters}",
                                                    finish_on_interrupt=True).reservation)
            self.token = res.token
            log.info("%s: reservation %s for %s (prio %g) by %s", self.cfg.coordinator, res.token, filters,
                     self.cfg.prio, self.name)
            self.patience.start()
            watch = _Watch()
            while True:
                # polling also keeps the reservation alive (it expires 60 s after the last poll)
                resp = self.lab.rpc("PollReservation", pb.PollReservationRequest(token=res.token),
                                    f"poll reservation {res.token}")
                res = Reservation.from_pb2(resp.reservation)
                log.debug("%s: reservation %s is %s", self.cfg.coordinator, res.token, res.state.name)
                if res.state in (ReservationState.allocated, ReservationState.acquired):
                    break
                if res.state is not ReservationState.waiting:
                    raise LabgridError(f"labgrid coordinator {self.cfg.coordinator}: reservation {res.token} "
                                       f"for {filters} is {res.state.name}")
                self._kick_dead_holders(filters, watch)
                if self.patience.over():
                    raise LabgridError(self._still_waiting(filters))
                self.patience.pause()
            self.place = res.allocations["main"][0]
            self.lab.rpc("AcquirePlace", pb.AcquirePlaceRequest(placename=self.place), f"acquire place {self.place}")
            self._read_services()
            self._renew()
            log.info("%s: place %s acquired by %s (%s)", self.cfg.coordinator, self.place, self.name,
                     ", ".join(f"{s.name}={s.user}@{s.address}:{s.port}" for s in self.services.values()))
            if self.kick_note:
                log.warning("%s: the previous holder of place %s was kicked: %s", self.cfg.coordinator,
                            self.place, self.kick_note)
            self.keeper.start()
            return self
        except BaseException:
            self._give_back()
            raise

    def _still_waiting(self, filters: dict[str, str]) -> str:
        assert self.lab is not None
        who = "; ".join(f"{n} acquired by {p.acquired}" for n, p in self.lab.places().items()
                        if p.acquired and n in self.lab.matching_places(self.cfg, worker=self.worker))
        return (f"labgrid coordinator {self.cfg.coordinator}: no place for {filters} within {self.patience.wait:g}s"
                + (f" ({who})" if who else " (no place matches)")
                + f"; see python -m ipsec_hil.lab.sharing status TOPOLOGY")

    def _kick_dead_holders(self, filters: dict[str, str], watch: _Watch) -> None:
        """Kick holders of matching places that are provably dead: a stamp unchanged for
        longer than its lease, or a holder on this machine whose pid is gone. A place
        without our stamp (a human's) is never kicked automatically."""
        assert self.lab is not None
        for name in self.lab.matching_places(self.cfg, worker=self.worker):
            p = self.lab.places()[name]
            if not p.acquired:
                continue
            _, stamp = Stamp.split(p.comment or "")
            if stamp is None or stamp.kicked or f"{p.acquired.partition('/')[0]}/{stamp.user}" != p.acquired:
                continue
            host, pid = pid_of(p.acquired)
            why = ""
            if host == self.hostname and pid is not None and not _alive(pid):
                why = f"its process {pid} on {host} is gone"
            else:
                silent = watch.unchanged_for(name, p.comment)
                if silent > stamp.lease:
                    why = f"its claim was not renewed for {silent:.0f}s (lease {stamp.lease:g}s)"
            if why:
                self.lab.kick(name, f"dead holder ({stamp.holder}, run {stamp.run_id or '-'}): {why}", self.name)

    def _read_services(self) -> None:
        assert self.lab is not None and self.place is not None
        place = self.lab.place(self.place)
        own, stamp = Stamp.split(place.comment or "")
        self.kick_note = stamp.kicked if stamp is not None else ""
        self._own_comment = own
        self.services = {}
        for name, path, entry in self.lab.network_services(place):
            params = entry.params
            if name in self.services:
                raise LabgridError(f"labgrid place {self.place}: two NetworkService resources named {name} "
                                   f"({self.services[name].resource} and {path}); rename one in the place's match")
            self.services[name] = ServiceAccess(name, str(params["address"]), int(params.get("port", 22)),
                                                str(params["username"]), path)

    # ------------------------------------------------------------------ while held

    def _renew(self) -> None:
        """Check the place is still ours, then renew our stamp in its comment."""
        assert self.lab is not None and self.place is not None
        try:
            place = self.lab.place(self.place)
        except LabgridError as exc:
            if "no place" in str(exc):
                raise LeaseLost(f"labgrid place {self.place} was deleted while this run held it; this run stops") from None
            raise
        if place.acquired != self.name:
            _, stamp = Stamp.split(place.comment or "")
            note = f" ({stamp.kicked})" if stamp is not None and stamp.kicked else ""
            now = f"acquired by {place.acquired}" if place.acquired else "released"
            raise LeaseLost(f"labgrid place {self.place} was taken from this run ({self.name}): it is now "
                            f"{now}{note}. This run stops before changing anything else on the appliances.")
        _, seen = Stamp.split(place.comment or "")
        if seen is not None and seen.kicked.startswith(f"{self.name} kicked by "):
            # a kick is under way: its release follows; writing our stamp would erase its reason
            log.warning("%s: place %s: %s", self.cfg.coordinator, self.place, seen.kicked)
            return
        self._n += 1
        stamp = Stamp(user=self.user, holder=self.holder, run_id=self.run_id, lease=self.lease, n=self._n)
        self.lab.set_comment(self.place, self._own_comment + STAMP + stamp.to_text())

    def check(self) -> None:
        """Raise :class:`LeaseLost` once the place was taken: call between tests and before
        every remote change."""
        self.keeper.check()

    @property
    def lost(self) -> LeaseLost | None:
        return self.keeper.lost

    # ------------------------------------------------------------------ topology

    def access_for(self, topo: Topology) -> dict[str, ServiceAccess]:
        """Each appliance's access; every appliance of ``topo`` must have a NetworkService."""
        missing = [h.name for h in topo.appliances() if h.name not in self.services]
        if missing:
            raise LabgridError(
                f"labgrid place {self.place} has no NetworkService for {', '.join(missing)} of "
                f"{topo.source or topo.lab.name} (it has: {', '.join(sorted(self.services)) or 'none'}); "
                "name each resource (or its match's rename, or its exporter group) after the appliance")
        return {h.name: self.services[h.name] for h in topo.appliances()}

    # ------------------------------------------------------------------ release

    def _give_back(self) -> None:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        lab, self.lab = self.lab, None
        if lab is None:
            return
        try:
            # Reservation first, place second: the coordinator re-plans its queue when a
            # place is released, and only then sees the place free of our reservation; in
            # the other order the next run waits for its periodic re-plan (~15 s).
            if self._reserved:
                lab.cancel_reservations_of(self.name)
            if self.place is not None:
                place = lab.place(self.place)
                if place.acquired == self.name:
                    lab.set_comment(self.place, Stamp.split(place.comment or "")[0])
                    lab.rpc("ReleasePlace", pb.ReleasePlaceRequest(placename=self.place, fromuser=self.name),
                            f"release place {self.place}")
                    log.info("%s: place %s released by %s", self.cfg.coordinator, self.place, self.name)
                else:
                    log.warning("%s: place %s was no longer ours (now %s); left alone", self.cfg.coordinator,
                                self.place, place.acquired or "free")
        except LabError as exc:  # the coordinator went away: its reservation expires by itself
            log.warning("releasing labgrid place %s: %s", self.place, exc)
        finally:
            lab.close()

    def release(self) -> None:
        """Release the place and cancel the reservation (idempotent, every exit path)."""
        self.keeper.stop()
        self._give_back()

    def __enter__(self) -> "PlaceClaim":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def apply_services(topo: Topology, access: dict[str, ServiceAccess]) -> Topology:
    """A copy of ``topo`` whose appliances' ``mgmt`` has the place's address, port and user."""
    out = topo.model_copy(deep=True)
    for name, svc in access.items():
        mgmt = out.hosts[name].mgmt
        mgmt.address, mgmt.port, mgmt.user = svc.address, svc.port, svc.user
    return out


def worker_id() -> str:
    """The xdist worker this process is (``gw0``...), or ``main`` without xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")

