"""The tunnel transaction: install a config on both ends, bring it up, undo it all.

Why: the pages changed tunnels by hand (sed through a csh, the 001 page's destroyed
address lines) and lost measurements to it. Here a tunnel is rendered from the topology
and installed as a transaction on both ends: back up, write atomically into ``conf.d``
(OPNsense rewrites swanctl.conf, conf.d persists), verify, load, initiate every child,
and undo it all byte-identically afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from ipsec_hil.lab import files
from ipsec_hil.lab.errors import LabError, ProvisionError
from ipsec_hil.lab.provision import verify
from ipsec_hil.lab.provision.changes import HostChanges, Teardown, prepare_inner_v6
from ipsec_hil.lab.provision import recovery, spd, terminate
from ipsec_hil.lab.provision.commands import initiate_children
from ipsec_hil.lab.provision.plan import CONF_DIR, TunnelPlan, child_plans, conf_path, conn_name
from ipsec_hil.lab.provision.render import render_swanctl
from ipsec_hil.lab.provision.secret import Secret, as_secret
from ipsec_hil.lab.timeshare import BRING_UP, spent
from ipsec_hil.lab.topology import TunnelConfig

log = logging.getLogger(__name__)

SWANCTL_CONF = "/usr/local/etc/swanctl/swanctl.conf"
INCLUDE_LINE = "include conf.d/*.conf"


@dataclass
class BringUp:
    """What bring-up found: children established, each initiate outcome, both ends' SAs.

    ``children_up`` counts only children both ends list INSTALLED under the plan's names
    (:mod:`verify`); ``problems`` says, per child that does not count, why: its initiate
    outcome, or where an end really installed it. ``foreign`` names the connection(s) the
    peer filed children under instead of the plan's (the 002 page's shared identities)."""

    conn: str
    children_total: int
    children_up: int
    outcomes: dict[str, Any]  # child -> parsers.swanctl_initiate InitiateResult
    sas: dict[str, Any] = field(default_factory=dict)  # appliance -> parsers SaList
    problems: dict[str, str] = field(default_factory=dict)  # child -> why it does not count
    foreign: dict[str, list[str]] = field(default_factory=dict)  # peer's IKE_SA (as child) -> children
    spd: dict[str, Any] = field(default_factory=dict)  # appliance -> parsers SpdDump (setkey -DP)
    spd_problems: list[str] = field(default_factory=list)  # policies a child lacks (spd.missing)

    @property
    def all_up(self) -> bool:
        return self.children_up == self.children_total

    def failures(self) -> list[tuple[str, str]]:
        return list(self.problems.items())

    def judge(self, initiator: str, initiator_sas: Any, responder: str, responder_sas: Any) -> None:
        """Count the children both ends installed where the plan says; note the others."""
        at_i, at_r = verify.installed_by_spis(initiator_sas), verify.installed_by_spis(responder_sas)
        placements = {c: verify.place(self.conn, c, r, at_i, at_r) for c, r in self.outcomes.items() if r.ok}
        self.problems = {c: _outcome_name(r) for c, r in self.outcomes.items() if not r.ok}
        for c, p in placements.items():
            why = p.problem(initiator, responder)
            if why:
                self.problems[c] = f"established by the initiator, but {why}"
        self.problems = {c: self.problems[c] for c in self.outcomes if c in self.problems}  # plan order
        self.foreign = verify.foreign_connections(placements.values())
        self.children_up = self.children_total - len(self.problems)

    def stop_message(self, tunnel: str, responder: str) -> str:
        """The ProvisionError's text when not every child is up (the 002 page's rule)."""
        msg = (f"tunnel {tunnel} ({self.conn}): {self.children_up} of {self.children_total} children "
               "established -- the run stops here (002 page)")
        for used, kids in self.foreign.items():
            msg += (f"; {responder} installed {len(kids)} of them in another connection, {used}, "
                    f"not in {self.conn} (shared identities? the 002 page's first try: give the tunnel "
                    "identities of its own)")
        shown = self.failures()[:_SHOWN_FAILURES]
        msg += "; " + "; ".join(f"child {c}: {o}" for c, o in shown)
        if len(self.problems) > len(shown):
            msg += f"; and {len(self.problems) - len(shown)} more child(ren) likewise"
        return msg


#: children named in a bring-up's error (the rest are counted): 256 lines help nobody
_SHOWN_FAILURES = 8


def _outcome_name(r: Any) -> str:
    """``established``, ``timeout (not established after 30000ms)``, ... (parsers.swanctl_initiate)."""
    return f"{r.outcome.value} ({r.error})" if r.error else str(r.outcome.value)


class TunnelProvisioner:
    """Install one tunnel config on both ends as a transaction, bring it up, undo it.

    ``up()``: for each end, back up swanctl.conf and the tunnel's conf.d file
    (``files.Transaction``: sha256 + a journal on the appliance, so a crashed run is
    restored by the next one), make sure swanctl.conf includes ``conf.d/*.conf``, write the
    rendered file atomically (mode 0600), verify it byte for byte, ``swanctl --load-all``;
    initiate every child from the initiator end; for an IPv6 inner family make the
    association's port speak IPv6 (``-ifdisabled``, an address if it has none) and route the
    peer's inner network out of it (the 000 page's two raises); read both ends' SAs (one
    ``--list-sas`` each) and count a child only if both list it INSTALLED under its planned
    name inside an IKE_SA named the connection (:mod:`verify`; real strongSwan files
    shared-identity children under another connection and still prints "established").
    Not all children up -> teardown, then ``ProvisionError`` naming the children, their
    outcomes and the connection the peer really used (all or nothing: the 002 page).

    ``down()``: undo routes/flags/addresses; terminate on the initiator only (children it put
    outside the connection's IKE_SA by unique id, then the IKE_SA), check that neither end
    lists anything of the plan; restore the files (sha256-checked by files.restore), load
    again so charon forgets the connection. ``keep=True`` skips all of it, loudly (the
    journal stays on the appliance for the next run's recovery). ``timings`` holds the
    seconds of each phase.
    """

    def __init__(
        self,
        appliances: Mapping[str, Any] | Sequence[Any],
        tunnel: TunnelPlan,
        config: TunnelConfig,
        psk: Secret | str | bytes,
        *,
        run_id: str,
        keep: bool = False,
        initiator: str = "local",
        initiate_timeout: float = 30.0,
        transaction_factory: Any = None,
    ) -> None:
        if not isinstance(appliances, Mapping):
            appliances = {a.name: a for a in appliances}
        self.apps = dict(appliances)
        for e in (tunnel.local, tunnel.remote):
            if e.host not in self.apps:
                raise ProvisionError(f"tunnel {tunnel.name}: no appliance {e.host!r} given (have {sorted(self.apps)})")
        self.tunnel = tunnel
        self.config = config
        self._psk = as_secret(psk)
        self.run_id = run_id
        self.keep = keep
        if initiator not in ("local", "remote"):
            raise ProvisionError(f"initiator must be 'local' or 'remote', not {initiator!r}")
        self.initiator = initiator
        self.initiate_timeout = initiate_timeout
        self._tx_factory = transaction_factory or files.Transaction
        self.conn = conn_name(tunnel, config)
        self.path = conf_path(tunnel)
        # (appliance, open Transaction for the conf.d file, kind) with kind "conf" or "main"
        # (swanctl.conf, only opened when its include line had to be added)
        self._txs: list[tuple[str, Any, str]] = []
        self.journal_dir = files.DEFAULT_JOURNAL_DIR  # where undo entries of routes/flags go
        self._changes = HostChanges(self.journal_dir, run_id)
        # appliance -> the undo entry that ends this tunnel's SAs there (journalled before the
        # load; dropped once the teardown saw no SA and no policy left): a killed run's SAs,
        # kernel SAs and policies are ended by the next run's recovery (provision.recovery)
        self._sa_undo: dict[str, files.UndoEntry] = {}
        self.bringup: BringUp | None = None
        self._initiated: dict[str, Any] = {}  # child -> InitiateResult, kept as they arrive (for down())
        self.log: list[str] = []  # what was done, in order (no secrets) -- for the report
        #: seconds spent per phase (install, load, initiate, verify, terminate, restore), summed
        #: over up/down calls: the bring-up's share of a run, and the scale benchmark's figures
        self.timings: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"TunnelProvisioner({self.tunnel.name!r}, {self.conn!r}, psk={self._psk!r})"

    # -- helpers
    def _app(self, end: str) -> Any:
        return self.apps[self.tunnel.end(end).host]

    def _ends_apps(self) -> list[Any]:
        return [self._app("local"), self._app("remote")]

    def _note(self, text: str) -> None:
        self.log.append(text)
        log.info("%s", text)

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """Time one phase of up/down into :attr:`timings`; the run's breakdown counts every
        phase, teardown's too, as "bring-up" (ipsec_hil.lab.timeshare), SSH inside included."""
        t0 = time.monotonic()
        try:
            with spent(BRING_UP):
                yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.monotonic() - t0

    def _open_transaction(self, app: Any, kind: str) -> Any:
        tx = self._tx_factory(app.host, self.run_id)
        tx.__enter__()
        self._txs.append((app.name, tx, kind))
        return tx

    # -- bring-up
    def __enter__(self) -> BringUp:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> BringUp:
        try:
            with self._phase("install"):
                for end in ("local", "remote"):
                    self._install(end)
            with self._phase("load"):
                for end in ("local", "remote"):
                    self._load(end)
            with self._phase("initiate"):
                bu = self._initiate()
            if self.config.inner == "ipv6":
                with self._phase("inner-v6"):
                    for end in ("local", "remote"):
                        prepare_inner_v6(self._app(end), self.tunnel.end(end), self.tunnel.other(end),
                                         self._changes, self._note)
            with self._phase("verify"):
                self._verify(bu)
            self.bringup = bu
        except BaseException:
            self._teardown_after_failure()
            raise
        if not bu.all_up:
            self._teardown_after_failure()
            raise ProvisionError(bu.stop_message(self.tunnel.name, self._app(self._responder).name))
        if bu.spd_problems:
            self._teardown_after_failure()
            raise ProvisionError(
                f"tunnel {self.tunnel.name} ({self.conn}): every child is up but the SPD is not as planned "
                f"(setkey -DP): {verify.summarize(bu.spd_problems)}")
        return bu

    @property
    def _responder(self) -> str:
        return "remote" if self.initiator == "local" else "local"

    def _verify(self, bu: BringUp) -> None:
        """One ``--list-sas`` per end: a child counts only if both ends list it INSTALLED under
        its planned name inside an IKE_SA named the connection (:mod:`verify`)."""
        bu.sas = {a.name: a.list_sas() for a in self._ends_apps()}
        i, r = self._app(self.initiator).name, self._app(self._responder).name
        bu.judge(i, bu.sas[i], r, bu.sas[r])
        for c, why in bu.problems.items():
            if bu.outcomes[c].ok:  # the failed initiates were noted as they came
                self._note(f"{c} does not count: {why}")
        if bu.all_up:
            verify_spd(bu, spd_ends(self.tunnel, self.config, self._app),
                       [c.name for c in child_plans(self.tunnel, self.config)], self._note)

    def _install(self, end: str) -> None:
        app = self._app(end)
        self._ensure_include(app)
        self._open_transaction(app, "conf").backup(self.path)
        data = render_swanctl(self.tunnel, self.config, end, self._psk).encode("utf-8")
        app.host.run(f"mkdir -p {shlex.quote(CONF_DIR)}", timeout=30).check(f"mkdir -p {CONF_DIR}")
        app.host.write_file_atomic(self.path, data, mode=0o600)
        back = app.host.read_file(self.path)
        if hashlib.sha256(back).digest() != hashlib.sha256(data).digest():
            raise ProvisionError(f"{app.name}: {self.path} does not read back as written ({len(back)} bytes)")
        self._note(f"{app.name}: wrote {self.path} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]})")

    def _ensure_include(self, app: Any) -> None:
        """OPNsense's swanctl.conf ends with ``include conf.d/*.conf``; add it if it does not.

        Only then is swanctl.conf itself backed up (its own transaction, restored last, after
        charon has been told to forget our connection while the include still stood).
        """
        current = app.host.read_file(SWANCTL_CONF) if app.host.exists(SWANCTL_CONF) else None
        if current is not None and any(l.strip() == INCLUDE_LINE for l in current.decode("utf-8", "replace").splitlines()):
            return
        self._open_transaction(app, "main").backup(SWANCTL_CONF)
        base = current or b""
        if base and not base.endswith(b"\n"):
            base += b"\n"
        app.host.write_file_atomic(SWANCTL_CONF, base + (INCLUDE_LINE + "\n").encode(), mode=0o600)
        self._note(f"{app.name}: added '{INCLUDE_LINE}' to {SWANCTL_CONF}")

    def _load(self, end: str) -> None:
        app = self._app(end)
        if app.name not in self._sa_undo:
            self._sa_undo[app.name] = files.journal_undo(
                app.host, recovery.sa_undo_what(app.name, self.conn), recovery.sa_undo_script(self.conn),
                self.journal_dir, self.run_id)
        res = app.swanctl_load()
        if not res.ok or self.conn not in res.connections:
            errs = list(res.config_errors) + [f"{f.kind} {f.name}: {f.message}" for f in res.failures]
            if res.charon_error:
                errs.append(f"charon: {res.charon_error}")
            raise ProvisionError(
                f"{app.name}: swanctl --load-all did not load {self.conn} (status {res.status}): "
                + ("; ".join(errs) or "no error printed")
            )
        self._note(f"{app.name}: swanctl --load-all loaded {self.conn}")

    def _initiate(self) -> BringUp:
        """Every child from the initiator end (:func:`initiate_children`: one remote command
        for all of them). Counted as initiated here; :meth:`_verify` decides."""
        app = self._app(self.initiator)
        kids = [c.name for c in child_plans(self.tunnel, self.config)]

        def seen(child: str, res: Any) -> None:
            self._initiated[child] = res
            self._note(f"{app.name}: initiate {child}: {_outcome_name(res)}")

        outcomes = initiate_children(app, self.conn, kids, self.initiate_timeout, seen)
        up = sum(1 for r in outcomes.values() if r.ok)
        return BringUp(self.conn, len(kids), up, outcomes)

    def reestablish(self) -> BringUp:
        """After a reboot of an end: load the kept files on both ends and bring every child
        up again (a rebooted OPNsense keeps swanctl.conf and conf.d, but no SA; the peer
        replaces its stale SAs when the rebooted end initiates with INITIAL_CONTACT)."""
        for end in ("local", "remote"):
            self._app(end).wait_charon()
            self._load(end)
        bu = self._initiate()
        self._verify(bu)
        if not bu.all_up:
            raise ProvisionError(
                f"{self.conn}: after the reboot {bu.children_up} of {bu.children_total} children came back: "
                + "; ".join(f"child {c}: {o}" for c, o in bu.failures()))
        self.bringup = bu
        return bu

    def backups(self) -> list[tuple[str, Any]]:
        """(appliance, files.Backup) of every file this tunnel's transactions saved (the
        state to compare with after teardown)."""
        return [(t[0], b) for t in self._txs for b in t[1].backups]

    # -- teardown
    def _teardown_after_failure(self) -> None:
        try:
            self.down()
        except LabError as e:  # the original error is the one to report; this one is logged
            log.error("teardown after a failed bring-up also failed: %s", e)
            self.log.append(f"teardown after failure also failed: {e}")

    def _terminate(self) -> str:
        return terminate.terminate_on_initiator(self._app(self.initiator), self.conn, self._initiated)

    def _check_gone(self) -> str:
        kids = [c.name for c in child_plans(self.tunnel, self.config)]
        done = terminate.check_gone(self._app(self.initiator), self._app(self._responder), self.conn, kids,
                                    self._initiated)
        self._initiated.clear()
        return done

    def down(self) -> list[str]:
        """Undo everything ``up`` did (reverse order); returns what was done. Idempotent.

        Every step runs even when one fails or is interrupted (:class:`Teardown`): routes
        and interface changes, then the SAs, then the files -- 1. the tunnel's own file,
        2. load (the include still stands: charon drops the connection), 3. swanctl.conf
        if we had to touch it.
        """
        if self.keep:
            return _keep(self)
        td = Teardown()
        self._changes.revert_all(self.apps, td)
        kept = False  # the SA undo entries stay: the next run's recovery ends what is left
        if self._txs:
            with self._phase("terminate"):
                initiator = self._app(self.initiator).name
                td.step(f"{initiator}: terminate {self.conn}", self._terminate)
                gone = td.step(f"checking that no SA of {self.conn} is left", self._check_gone)
                gone &= td.step(f"checking that no SPD entry of {self.conn} is left",
                                lambda: check_spd_gone(self.conn, spd_ends(self.tunnel, self.config, self._app)))
                kept = not gone
        with self._phase("restore"):
            for kind, what in (("conf", self.path), ("main", SWANCTL_CONF)):
                for name, tx, _ in reversed([t for t in self._txs if t[2] == kind]):
                    restored = td.step(f"{name}: restoring {what}", lambda: _restore(tx, name, what),
                                       kept=" (journal kept for the next run)")
                    if restored and kind == "conf":
                        td.step(f"{name}: reload", lambda: _reload(self, name))
        self._txs.clear()
        # last: until the files are restored and charon loaded them, the entry also makes
        # the next run's recovery load them (a run killed between the restore and the
        # reload left its connection loaded: tests/safety/test_every_step_sigkill.py)
        if self._sa_undo and not (kept or td.errors):
            _forget_sa_undo(self, td)
        for d in td.done:
            self._note(d)
        return td.finish(self.conn, self._note)


def spd_ends(tunnel: TunnelPlan, config: TunnelConfig, app_of: Any) -> list[tuple[Any, spd.EndPolicies]]:
    """(appliance, what its SPD holds for this tunnel) of each end that has a kernel SPD to
    read (an appliance says ``reads_spd = False`` when it has none, e.g. a Linux peer whose
    charon keeps its policies in user space). ``app_of``: end ("local"/"remote") -> appliance."""
    out = []
    for end in ("local", "remote"):
        app = app_of(end)
        if not getattr(app, "reads_spd", True):
            continue
        me, peer = tunnel.end(end), tunnel.other(end)
        out.append((app, spd.EndPolicies(app.name, me.lan_net(config.inner), peer.lan_net(config.inner),
                                         me.outer_addr(config.outer), peer.outer_addr(config.outer))))
    return out


def verify_spd(bu: BringUp, ends: list[tuple[Any, spd.EndPolicies]], kids: list[str], note: Any) -> None:
    """One ``setkey -DP`` per end: each child's ``in`` and ``out`` policy, by its reqid (:mod:`spd`)."""
    for app, want in ends:
        bu.spd[app.name] = dump = app.setkey_policies()
        bu.spd_problems += spd.missing(dump, want, spd.child_reqids(bu.sas[app.name], bu.conn, kids))
    for why in bu.spd_problems:
        note(f"SPD: {why}")


def check_spd_gone(conn: str, ends: list[tuple[Any, spd.EndPolicies]]) -> str:
    """Neither end's SPD still holds a policy of the tunnel (:func:`spd.leftovers`)."""
    left = [x for app, want in ends for x in spd.leftovers(app.setkey_policies(), want)]
    if left:
        raise LabError(f"the SPD still holds {len(left)} policy(ies) of {conn} after the teardown: "
                       + verify.summarize(left))
    return f"no SPD entry of {conn} is left"


def _restore(tx: Any, name: str, what: str) -> str:
    tx.__exit__(None, None, None)
    return f"{name}: restored {what} (sha256 verified)"


def _reload(prov: TunnelProvisioner, name: str) -> str:
    """charon forgets the connection whose file is gone. Not best effort: a reload that
    fails leaves the run's connection (and its PSK) loaded in charon, so its LabError
    fails the teardown step (a lost connection: done once more, :class:`Teardown`);
    found by tests/safety/test_every_step.py, which compares ``--list-conns``."""
    app = prov.apps[name]
    if not app.host.exists(SWANCTL_CONF):
        return f"{name}: WARNING no {SWANCTL_CONF}; charon keeps {prov.conn} loaded (no SAs)"
    res = app.swanctl_load()
    return f"{name}: swanctl --load-all (status {res.status})"


def _keep(prov: TunnelProvisioner) -> list[str]:
    """--keep-tunnels: nothing undone, the journal keeps what the next run restores."""
    msg = (
        f"KEEPING tunnel {prov.tunnel.name} ({prov.conn}) as asked (--keep-tunnels): "
        f"{prov.path} stays on {', '.join(sorted({t[0] for t in prov._txs}))}, "
        f"{len(prov._changes)} route/interface change(s) stay; the journal restores them on the next run"
    )
    log.warning("%s", msg)
    prov.log.append(msg)
    prov._txs.clear()
    prov._changes.clear()
    return [msg]


def _forget_sa_undo(prov: TunnelProvisioner, td: Teardown) -> None:
    """The teardown's last step: the journal entry that would end this tunnel's SAs, dropped."""
    for name, entry in list(prov._sa_undo.items()):
        def forget(name: str = name, entry: files.UndoEntry = entry) -> str:
            files.forget_undo(prov.apps[name].host, entry)
            prov._sa_undo.pop(name, None)
            return f"{name}: dropped the journal entry that would end {prov.conn}'s SAs"

        td.step(f"{name}: dropping the SA undo entry", forget, kept=" (the next run's recovery runs it: harmless)")
