"""Changes outside the files (routes, interface flags, addresses) and a teardown that
finishes.

Why journalled: a run killed right after ``route add`` would leave the route on the
appliance forever; the revert recipe is written to the appliance's journal BEFORE the
change, so the next run's ``files.recover`` reverts it. Why :class:`Teardown`: a failing
or interrupted step (Ctrl-C) must not leave half a tunnel -- every step still runs, the
failures are listed, the first interrupt is re-raised at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from ipsec_hil.lab import files
from ipsec_hil.lab.command import ROUTE
from ipsec_hil.lab.errors import LabError, ProvisionError, TransportError
from ipsec_hil.lab.parsers import ifconfig
from ipsec_hil.lab.provision.plan import EndPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Undo:
    """One change outside the files (route, interface flag, address) and how to revert it."""

    appliance: str
    what: str  # human text for logs and the report
    kind: str  # route | ifconfig
    args: tuple[str, ...]
    entry: files.UndoEntry | None = None  # journalled on the appliance (None: not journalled)

    def script(self) -> str:
        """The sh script ``files.recover`` runs: the same command :meth:`revert` runs, made
        idempotent (an already-removed route or address is the wanted state)."""
        if self.kind == "route":
            net, fam = self.args
            cmd = ROUTE[fam]("delete", "-net", net)
        else:
            cmd = ifconfig.COMMAND(*self.args)
        return f"{cmd} >/dev/null 2>&1 || true\n"

    def revert(self, app: Any) -> str:
        """Revert the change on ``app`` (an Appliance) and drop its journal entry."""
        gone = ""
        if self.kind == "route":
            gone = "" if app.route_delete(self.args[0], family=self.args[1]) else " (was already gone)"
        else:
            app.ifconfig(*self.args)
        if self.entry is not None:
            files.forget_undo(app.host, self.entry)
        return f"{self.appliance}: {self.what}{gone}"


@dataclass
class Teardown:
    """What a teardown did and what failed; :meth:`step` never lets one step stop the rest."""

    done: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    interrupted: list[BaseException] = field(default_factory=list)

    def step(self, label: str, action: Callable[[], str | None], kept: str = "") -> bool:
        """Run ``action`` (it returns what it did, or None); a LabError is listed as
        ``label: error``. Anything else (an interrupt) is kept for :meth:`finish` to
        re-raise, and the action is run ONCE more: every teardown step is idempotent
        (terminate and check read the SAs first, a revert of a gone route is "already gone",
        a restore of a file already restored is a no-op), and an interrupt that came just
        after the step's command ran would otherwise skip what follows it -- the journal
        entry it drops, the reload after a restored file (found by
        tests/safety/test_every_step.py: Ctrl-C after each of 49 remote steps). A second
        interrupt stops the step: ``label: interrupted``. A lost connection or a
        failed command (TransportError, CommandFailed among them) is retried once the same
        way, and fails the step only if the retry fails too. ``kept`` tells what stays for the next run."""
        try:
            text = action()
        except TransportError as e:
            # the connection was lost mid-step (the command may have run, its answer is
            # lost): the step is done once more on a new connection, as after an interrupt
            try:
                text = action()
            except BaseException as e2:  # noqa: BLE001 -- listed (an interrupt: kept as well)
                if not isinstance(e2, Exception):
                    self.interrupted.append(e2)
                self.errors.append(f"{label}: {e}; again: {e2}{kept}")
                return False
            text = f"{text} (done again after the connection was lost)" if text else None
        except LabError as e:
            self.errors.append(f"{label}: {e}{kept}")
            return False
        except BaseException as e:  # noqa: BLE001 -- finish the teardown first
            self.interrupted.append(e)
            try:
                text = action()
            except LabError as e2:
                self.errors.append(f"{label}: interrupted, then {e2}{kept}")
                return False
            except BaseException:  # noqa: BLE001 -- a second interrupt: leave this step
                self.errors.append(f"{label}: interrupted{kept}")
                return False
            text = f"{text} (done again after an interrupt)" if text else None
        if text:
            self.done.append(text)
        return True

    def finish(self, what: str, note: Callable[[str], None]) -> list[str]:
        """Re-raise the first interrupt (after noting every failure), raise a
        ProvisionError listing the failures, or return what was done."""
        if self.interrupted:
            for e in self.errors:
                note(f"teardown: {e}")
            raise self.interrupted[0]
        if self.errors:
            raise ProvisionError(f"teardown of {what} incomplete: " + "; ".join(self.errors))
        return self.done


class HostChanges:
    """The journalled route and interface changes of one tunnel, reverted newest first."""

    def __init__(self, journal_dir: str, run_id: str) -> None:
        self.journal_dir = journal_dir
        self.run_id = run_id
        self.undo: list[Undo] = []

    def __len__(self) -> int:
        return len(self.undo)

    @contextlib.contextmanager
    def journalled(self, app: Any, undo: Undo) -> Iterator[None]:
        """Journal ``undo`` on the appliance, make the change (the with-block), then keep it
        for :meth:`revert_all`. Journalled BEFORE the change: a run killed right after the
        change leaves the recipe for the next run's ``files.recover``. If the change is
        refused as already existing, the entry is dropped (never undo what someone else
        made); on any other failure or interrupt it may have been made, so it is reverted
        like a success."""
        entry = files.journal_undo(app.host, f"{app.name}: {undo.what}", undo.script(), self.journal_dir, self.run_id)
        try:
            yield
        except LabError as e:
            if any(w in str(e) for w in ("already in table", "File exists")):
                self._forget(app, entry)  # refused because it already existed: not ours
            else:  # we cannot know whether it was made: revert_all reverts it (idempotent)
                self.undo.append(dataclasses.replace(undo, entry=entry))
            raise
        except BaseException:  # interrupted: the change may well be made
            self.undo.append(dataclasses.replace(undo, entry=entry))
            raise
        self.undo.append(dataclasses.replace(undo, entry=entry))

    @staticmethod
    def _forget(app: Any, entry: files.UndoEntry) -> None:
        try:
            files.forget_undo(app.host, entry)
        except LabError as e:  # the entry stays: the next recovery runs its idempotent script
            log.warning("%s: dropping the undo entry of a change that already existed failed: %s", app.name, e)

    def revert_all(self, apps: Mapping[str, Any], td: Teardown) -> None:
        """Revert every change, newest first; failures stay journalled for the next run."""
        while self.undo:
            u = self.undo.pop()
            td.step(f"{u.appliance}: {u.what}", lambda: u.revert(apps[u.appliance]),
                    kept=" (journal entry kept for the next run)")

    def clear(self) -> None:
        self.undo.clear()


def prepare_inner_v6(app: Any, me: EndPlan, peer: EndPlan, changes: HostChanges, note: Callable[[str], None]) -> None:
    """The 000 page: the association's port must speak IPv6 and route the peer's inner net."""
    ifname = me.port_ifname
    iface = app.interface(ifname)
    if iface.ifdisabled:
        with changes.journalled(app, Undo(app.name, f"{ifname} inet6 ifdisabled again", "ifconfig",
                                          (ifname, "inet6", "ifdisabled"))):
            app.ifconfig(ifname, "inet6", "-ifdisabled")
        note(f"{app.name}: ifconfig {ifname} inet6 -ifdisabled")
    if not _has_global_inet6(iface) and "ipv6" in me.port_if:
        addr = me.port_if["ipv6"]
        with changes.journalled(app, Undo(app.name, f"{ifname} inet6 {addr} removed", "ifconfig",
                                          (ifname, "inet6", addr, "-alias"))):
            app.ifconfig(ifname, "inet6", addr, "alias")
        note(f"{app.name}: ifconfig {ifname} inet6 {addr} alias")
    net = peer.lan_net("ipv6")
    probe = str(next(ipaddress.ip_network(net).hosts()))
    route = app.route_get(probe, family="ipv6")
    if route is None or route.interface != ifname:
        # Out of the association's port: via the peer's IPv6 address on that link when the
        # topology gives one (an ordinary on-link gateway), else `-interface PORT`.
        gw = peer.outer.get("ipv6")
        how = gw or f"-interface {ifname}"
        with changes.journalled(app, Undo(app.name, f"route {net} via {how} removed", "route", (net, "ipv6"))):
            if gw:
                app.route_add(net, gateway=gw, family="ipv6")
            else:
                app.route_add(net, interface=ifname, family="ipv6")
        note(f"{app.name}: route -6 add -net {net} {how}")


def _has_global_inet6(iface: Any) -> bool:
    for a in iface.inet6 or ():
        addr = getattr(a, "address", a)
        try:
            ip = ipaddress.IPv6Address(str(addr).split("%", 1)[0])
        except ValueError:
            continue
        if not ip.is_link_local:
            return True
    return False
