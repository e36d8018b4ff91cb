"""A synchronous handle on a labgrid coordinator: places, reservations, resources, kicks.

Why our own thin handle and not ``labgrid-client`` subprocesses: the run must keep a
session open for hours (renewing its claim, noticing at once when its place is taken),
read the place's ``NetworkService`` resources as data, and name exactly who holds what in
its errors; the client's text output is for humans. labgrid's ``ClientSession`` is asyncio
over gRPC; it lives here in one event-loop thread of its own, and every call is submitted
to that loop, so the suite (plain threads, pytest) never sees a coroutine.

Identity: labgrid names a client ``HOST/USER``. Every run (and every xdist worker) gets
its own USER, ``<login>.<worker>.<pid>`` (e.g. ``ci.gw1.4711``): two workers of one run
must not be the same labgrid user (a place reserved for one would be acquirable by the
other), and the pid lets a run on the same machine see that a holder is dead at once.

The claim stamp: while a run holds a place it keeps a stamp in the place's comment
(``... ## ipsec-hil: {json}``), renewed every few seconds with a counter. The coordinator
does not release a place when its client disconnects (a place stays acquired until
released), so a run killed with its place acquired would block the lab for good; a
waiting run that sees the same stamp for longer than its lease (by its own monotonic
clock, so no two clocks must agree) kicks the holder -- releases the place from that user
and cancels that user's reservations -- and records why in the comment.

Library code: no pytest import.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import itertools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.topology import LabgridInfo

log = logging.getLogger(__name__)
T = TypeVar("T")

STAMP = " ## ipsec-hil: "
_LOOKS = itertools.count()  # sessions that only look (status) get distinct users too


class LabgridError(LabError):
    """The coordinator refused, or could not be reached; the message names it."""


@dataclass(frozen=True)
class Stamp:
    """What a holding run writes in its place's comment (renewed: ``n`` counts renewals)."""

    user: str
    holder: str
    run_id: str
    lease: float
    n: int
    kicked: str = ""  # set instead by whoever kicked the previous holder: who, when, why

    def to_text(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def split(cls, comment: str) -> tuple[str, "Stamp | None"]:
        """(the place's own comment, our stamp or None)."""
        own, sep, rest = comment.partition(STAMP)
        if not sep:
            return comment, None
        try:
            d = json.loads(rest)
            return own, cls(user=str(d["user"]), holder=str(d["holder"]), run_id=str(d["run_id"]),
                            lease=float(d["lease"]), n=int(d["n"]), kicked=str(d.get("kicked", "")))
        except (ValueError, KeyError, TypeError):
            log.warning("place comment has an unreadable ipsec-hil stamp, ignored: %r", rest[:200])
            return own, None


def run_user(worker: str) -> str:
    """This run's labgrid user: login, xdist worker, pid (see the module docstring)."""
    return f"{getpass.getuser()}.{worker}.{os.getpid()}"


def pid_of(acquired: str) -> tuple[str, int | None]:
    """(host, pid) of a labgrid client name ``HOST/login.worker.pid``; pid None if not ours."""
    host, _, user = acquired.partition("/")
    tail = user.rsplit(".", 1)[-1]
    return host, int(tail) if "." in user and tail.isdigit() else None


class LabgridLab:
    """One session with a coordinator, usable from plain threads. ``with LabgridLab(addr):``."""

    def __init__(self, coordinator: str, *, user: str | None = None, hostname: str | None = None,
                 timeout: float = 30) -> None:
        from labgrid.remote.client import ClientSession  # heavy import: only when a lab uses labgrid

        self.coordinator = coordinator
        self.user = user or run_user(f"look{next(_LOOKS)}")
        self.hostname = hostname or socket.gethostname()
        self.name = f"{self.hostname}/{self.user}"
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"labgrid {coordinator}", daemon=True)
        self._thread.start()
        user_, host_ = self.user, self.hostname

        class _Session(ClientSession):  # type: ignore[misc]
            def __attrs_post_init__(self) -> None:
                # gRPC shares one TCP connection among a process's channels to one target;
                # the coordinator keys clients by connection and refuses a second session
                # on it: each session gets its own connection (local subchannel pool).
                super().__attrs_post_init__()
                import grpc

                from labgrid.remote.generated import labgrid_coordinator_pb2_grpc

                self.channel = grpc.aio.insecure_channel(target=self.address, options=[
                    ("grpc.keepalive_time_ms", 7500), ("grpc.keepalive_timeout_ms", 10000),
                    ("grpc.http2.ping_timeout_ms", 10000), ("grpc.http2.max_pings_without_data", 0),
                    ("grpc.use_local_subchannel_pool", 1)])
                self.stub = labgrid_coordinator_pb2_grpc.CoordinatorStub(self.channel)

            def getuser(self) -> str:
                return user_

            def gethostname(self) -> str:
                return host_

        async def _start() -> Any:
            s = _Session(address=coordinator, loop=self._loop)
            await s.start()
            return s
        try:
            self.session = self.call(_start(), what="connect")
        except BaseException:
            self._stop_loop()
            raise

    # ------------------------------------------------------------------ plumbing

    def call(self, coro: Coroutine[Any, Any, T], what: str, *, finish_on_interrupt: bool = False) -> T:
        """Run ``coro`` on the session's loop; gRPC and labgrid errors become LabgridError.

        ``finish_on_interrupt``: a Ctrl-C (or SystemExit) while the request is in flight
        first lets it finish (up to the timeout), then goes on. Why: a request that
        creates something on the coordinator (a reservation) is processed there whether
        or not we are still listening; interrupted in that window, the caller would not
        know what to take back, and the shared lab would keep it."""
        import grpc

        from labgrid.remote.client import Error as ClientError

        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(self.timeout)
        except (KeyboardInterrupt, SystemExit):
            if finish_on_interrupt:
                with contextlib.suppress(BaseException):
                    fut.result(self.timeout)
            raise
        except TimeoutError:
            fut.cancel()
            raise LabgridError(f"labgrid coordinator {self.coordinator}: {what}: no answer in {self.timeout:g}s") from None
        except grpc.aio.AioRpcError as exc:
            raise LabgridError(f"labgrid coordinator {self.coordinator}: {what}: {exc.details()}") from None
        except ClientError as exc:
            raise LabgridError(f"labgrid coordinator {self.coordinator}: {what}: {exc}") from None

    def rpc(self, method: str, request: Any, what: str, *, finish_on_interrupt: bool = False) -> Any:
        async def _do() -> Any:
            return await getattr(self.session.stub, method)(request)
        return self.call(_do(), what, finish_on_interrupt=finish_on_interrupt)

    def sync(self) -> None:
        """Wait until the coordinator has sent every update before now (places, resources)."""
        async def _sync() -> bool:
            return await self.session.sync_with_coordinator()
        if not self.call(_sync(), "sync"):
            raise LabgridError(f"labgrid coordinator {self.coordinator}: connection lost")

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    def close(self) -> None:
        async def _stop() -> None:
            await self.session.stop()
            await self.session.close()
        try:
            self.call(_stop(), "disconnect")
        except LabgridError as exc:
            log.warning("%s", exc)
        finally:
            self._stop_loop()

    def __enter__(self) -> "LabgridLab":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading

    def places(self) -> dict[str, Any]:
        """The coordinator's places now (labgrid ``Place`` objects), by name."""
        self.sync()
        return dict(self.session.places)

    def place(self, name: str) -> Any:
        places = self.places()
        if name not in places:
            raise LabgridError(f"labgrid coordinator {self.coordinator}: no place {name!r}; places: "
                               f"{', '.join(sorted(places)) or 'none'}")
        return places[name]

    def reservations(self) -> list[Any]:
        from labgrid.remote.common import Reservation
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        resp = self.rpc("GetReservations", pb.GetReservationsRequest(), "list reservations")
        return [Reservation.from_pb2(r) for r in resp.reservations]

    def network_services(self, place: Any) -> list[tuple[str, str, Any]]:
        """(name, resource path, ResourceEntry) of each NetworkService the place matches.

        The name is the match's rename if it has one, else the resource's name, else (a
        resource left with its class name) the exporter group's name: in the exporter YAML
        ``dut3300: {NetworkService: {address: ...}}`` is the appliance ``dut3300``.
        """
        out = []
        for exporter, groups in sorted(self.session.resources.items()):
            for group, resources in sorted(groups.items()):
                for rname, entry in sorted(resources.items()):
                    if entry.cls != "NetworkService":
                        continue
                    path = (exporter, group, entry.cls, rname)
                    match = place.getmatch(path)
                    if match is None:
                        continue
                    name = match.rename or (group if rname == entry.cls else rname)
                    out.append((name, "/".join(path), entry))
        return out

    def matching_places(self, cfg: LabgridInfo, names: list[str] | None = None, worker: str = "main") -> list[str]:
        """Places a reservation of ``cfg`` could get (or ``names``, checked to exist)."""
        places = self.places()
        if names:
            missing = [n for n in names if n not in places]
            if missing:
                raise LabgridError(f"labgrid coordinator {self.coordinator}: no place {', '.join(missing)}; "
                                   f"places: {', '.join(sorted(places)) or 'none'}")
            return list(names)
        want = set(cfg.filters(worker).items())
        return sorted(n for n, p in places.items() if want <= set(p.tags.items()) | {("name", n)})

    def status_lines(self, cfg: LabgridInfo) -> list[str]:
        """Who holds what: each matching place, its holder and stamp, and the reservations."""
        lines = []
        places = self.places()
        for name in self.matching_places(cfg) or sorted(places):
            p = places[name]
            own, stamp = Stamp.split(p.comment or "")
            held = f"acquired by {p.acquired}" if p.acquired else "free"
            extra = ""
            if stamp is not None and stamp.kicked:
                extra = f"; last kick: {stamp.kicked}"
            elif stamp is not None:
                extra = f" ({stamp.holder}, run {stamp.run_id or '-'}, lease {stamp.lease:g}s, renewal {stamp.n})"
            lines.append(f"{self.coordinator}: place {name} [{', '.join(f'{k}={v}' for k, v in sorted(p.tags.items()))}]: "
                         f"{held}{extra}" + (f"; reserved by {p.reservation}" if p.reservation else ""))
        for r in sorted(self.reservations(), key=lambda r: (-r.prio, r.created)):
            lines.append(f"{self.coordinator}: reservation {r.token} of {r.owner}: {r.state.name}, prio {r.prio:g}, "
                         f"filter {r.filters.get('main', {})}, places {r.allocations.get('main', [])}, "
                         f"expires {time.strftime('%H:%M:%S UTC', time.gmtime(r.timeout))}")
        return lines

    # ------------------------------------------------------------------ changing

    def set_comment(self, place: str, comment: str) -> None:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        self.rpc("SetPlaceComment", pb.SetPlaceCommentRequest(placename=place, comment=comment),
                 f"set the comment of place {place}")

    def cancel_reservations_of(self, owner: str) -> list[str]:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        tokens = [r.token for r in self.reservations() if r.owner == owner]
        for token in tokens:
            self.rpc("CancelReservation", pb.CancelReservationRequest(token=token), f"cancel reservation {token}")
        return tokens

    def kick(self, place: str, reason: str, by: str) -> str:
        """Release ``place`` from whoever holds it (labgrid's ``release --kick``, but only from
        that holder: ``fromuser``), cancel the holder's reservations, record who and why."""
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        p = self.place(place)
        if not p.acquired:
            return f"{self.coordinator}: place {place} is not acquired: nothing to kick"
        holder = p.acquired
        own, stamp = Stamp.split(p.comment or "")
        note = f"{holder} kicked by {by} at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: {reason}"
        comment = own + STAMP + Stamp(user=holder, holder=stamp.holder if stamp else holder,
                                      run_id=stamp.run_id if stamp else "", lease=0, n=-1, kicked=note).to_text()
        # The note goes in before the release, so a holder that polls between the release and
        # our next call already reads why (a holder that sees it while still holding stops
        # renewing over it), and again after, in case a renewal in flight wrote over it.
        self.set_comment(place, comment)
        # reservations first: the release re-plans the queue with the place free of them
        tokens = self.cancel_reservations_of(holder)
        self.rpc("ReleasePlace", pb.ReleasePlaceRequest(placename=place, fromuser=holder), f"release place {place}")
        if self.place(place).comment != comment:
            self.set_comment(place, comment)
        log.warning("%s: place %s: %s (reservations cancelled: %s)", self.coordinator, place, note,
                    ", ".join(tokens) or "none")
        return f"{self.coordinator}: place {place}: {note}"
