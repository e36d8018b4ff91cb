"""A tunnel's associations while they change: rekeys, automatic rekeys, hard expiry (issue 13).

What strongSwan 5.9.8 does (verified on a real charon pair), and so what these reads wait for:

- ``swanctl --rekey`` returns at once (vici only queues it): a caller polls (:func:`poll`)
  for the new SPIs and for the end of the overlap;
- the old OUTBOUND association goes at the switch; only the old inbound one lingers for
  delete_rekeyed_delay (5 s), the old child listed DELETED meanwhile: its outbound
  counters are read from that listing before it disappears;
- at life_time (no rekey) the child is closed and RE-CREATED ("scheduling CHILD_SA
  recreate after hard expire"), not left down.

The engine's association count is read against strongSwan's listing in one round trip
(:func:`engine_sample`): an association left behind shows as a count above what the
listing implies (:data:`ASSOCIATIONS_BY_STATE`). Around the rekeys the offloading ends'
mbufs are compared with the health policy every acceptance test uses
(ipsec_hil.lab.measuring.health.POLICY, :func:`mbufs_around`).

Library code (no pytest): tests_hil/test_rekey.py states the invariants with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ipsec_hil.lab.appliance import Appliance
from ipsec_hil.lab.command import SWANCTL_REKEY
from ipsec_hil.lab.measuring.health import POLICY, HealthSnapshot, compare, driver_scope, take_snapshots
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.parsers import netstat_ipsec, swanctl_list_sas, sysctl
from ipsec_hil.lab.tunnel import ActiveTunnel

__all__ = [
    "ASSOCIATIONS_BY_STATE", "CONFIRM_S", "OVERLAP_DEADLINE_S", "POLL_S", "WATCH_S", "ChildView", "EngineSample",
    "children_of", "engine_sample", "flowing", "health_of", "ike_spis", "mbufs_around", "offloaded_ends",
    "poll", "rekey", "sa_count", "settled_associations", "ipsec_stats", "NO_SA", "INVALID_OUT",
]

#: FreeBSD's name for a packet an outbound policy met with no SA (netstat -s -p ipsec:
#: "outbound packets with no SA available", sys/netipsec/ipsec_output.c ipsec4_allocsa's
#: ips_out_nosa); the same packet also counts INVALID_OUT (ipsec4_perform_request's `bad:`)
NO_SA, INVALID_OUT = "discarded-no-sa", "discarded-invalid"

T = TypeVar("T")

#: Seconds between two reads of ``swanctl --list-sas`` while a rekey is watched: well
#: inside the 5 s overlap, so the DELETED child's final counters are always seen.
POLL_S = 0.3
#: Seconds between two readings of a watch over a whole stream (test_rekey_no_leak,
#: test_life_time_expiry: each offloading end's listing and engine count, engine_sample).
#: What they look for lasts seconds -- a child installed until its rekey (rekey_time 4,
#: rand_time 1), a life of 6 s, an association left behind for good -- so a reading about
#: every second still sees each several times; at POLL_S these watches were 739 readings
#: of one fault-matrix shard on the virtual lab, a fifth of all its SSH commands (issue 39).
WATCH_S = 0.8
#: Seconds before a count that disagrees with its listing is read again (engine_sample):
#: longer than the daemon needs to catch up with a removal it already made, far shorter
#: than a leak lasts (for good).
CONFIRM_S = 0.2
#: strongSwan's delete_rekeyed_delay (5 s) plus the time a loaded machine needs to act.
OVERLAP_DEADLINE_S = 20.0


class Figures(Protocol):
    """Where readings go on the measurement page (the plugin's test record)."""

    def figure(self, label: str, value: Any, unit: str = "") -> Any: ...


@dataclass(frozen=True)
class ChildView:
    """One listed CHILD_SA of the tunnel: its state, SPIs and outbound packets."""

    state: str
    spi_in: str
    spi_out: str
    packets_out: int
    packets_in: int
    rekey_in: int | None
    expires_in: int | None

    @property
    def key(self) -> tuple[str, str, str]:
        """Which association pair it is and in what state (its counters move under a stream)."""
        return self.state, self.spi_in, self.spi_out


_SPLIT = "@@hil-rekey-split"


def _children(listing: str, conn: str) -> list[ChildView]:
    return [ChildView(c.state, c.spi_in or "", c.spi_out or "", c.packets_out or 0, c.packets_in or 0,
                      c.rekey_in, c.expires_in)
            for ike in swanctl_list_sas.parse(listing).ike_sas if ike.name == conn for c in ike.children]


def children_of(app: Appliance, conn: str) -> list[ChildView]:
    """The tunnel's children on ``app`` as ``swanctl --list-sas`` lists them (every IKE_SA of ``conn``)."""
    r = app.host.run(swanctl_list_sas.COMMAND, timeout=app.command_timeout)
    r.check(swanctl_list_sas.COMMAND)
    return _children(r.stdout, conn)


def ike_spis(app: Appliance, conn: str) -> list[tuple[str, str, str]]:
    """(state, initiator SPI, responder SPI) of every IKE_SA of ``conn`` on ``app``."""
    return [(i.state, i.initiator_spi, i.responder_spi) for i in app.list_sas().ike_sas if i.name == conn]


def sa_count(app: Appliance) -> int:
    """The associations the engine holds (the profile's ``sa_count``)."""
    return app.snapshot().counters["sa_count"]


def ipsec_stats(app: Appliance, family: str) -> netstat_ipsec.IpsecStats:
    """``netstat -s -p ipsec|ipsec6 --libxo json``: the IPsec statistics of packets of the
    inner ``family`` (ipv4: ipsec4stat, ipv6: ipsec6stat). ipsec.ko not loaded is a
    LabError: a test that reads these needs them."""
    proto = {"ipv4": "ipsec", "ipv6": "ipsec6"}[family]
    r = app.host.run(netstat_ipsec.BY_FAMILY[family], timeout=app.command_timeout)
    if r.status != 0:
        raise LabError(f"{app.name}: netstat -s -p {proto} failed ({r.status}): {r.stderr.strip()[-300:]}")
    stats = netstat_ipsec.parse(r.stdout)
    if not stats.loaded:
        raise LabError(f"{app.name}: netstat -s -p {proto} printed no statistics (ipsec.ko not loaded)")
    return stats


def poll(what: str, read: Callable[[], T | None], deadline_s: float) -> T:
    """``read()`` until it returns something, or AssertionError naming ``what``.

    A poll, not a timed assert: strongSwan's rekey is asynchronous (vici queues it), so
    the caller waits for the state it needs; the deadline only ends a wait that would
    otherwise never end (a lost rekey). AssertionError because a state never reached is
    the invariant failing, which the acceptance test reports as such.
    """
    end = time.monotonic() + deadline_s
    while True:
        got = read()
        if got is not None:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not seen within {deadline_s:g} s")
        time.sleep(POLL_S)


#: Associations a listed child holds in the engine, by state (5.9.8): both until the
#: switch; a DELETED child only its inbound one, for delete_rekeyed_delay.
ASSOCIATIONS_BY_STATE = {"INSTALLED": 2, "REKEYING": 2, "REKEYED": 2, "DELETED": 1}


@dataclass(frozen=True)
class EngineSample:
    """What strongSwan lists of the tunnel on one appliance and what its engine holds, read together."""

    app: str
    children: list[ChildView]
    held: int

    @property
    def listed(self) -> int:
        """Associations the listing implies (ASSOCIATIONS_BY_STATE per child)."""
        return sum(ASSOCIATIONS_BY_STATE[c.state] for c in self.children)

    @property
    def installed_out(self) -> list[str]:
        return [c.spi_out for c in self.children if c.state == "INSTALLED"]


def settled_associations(app: Appliance, conn: str) -> tuple[list[ChildView], int] | None:
    """(children, sa_count) when no overlap runs: every listed child INSTALLED, read
    consistently (engine_sample)."""
    kids, got = engine_sample(app, conn)
    if got is None or any(c.state != "INSTALLED" for c in kids):
        return None
    return kids, got.held


def engine_sample(app: Appliance, conn: str) -> tuple[list[ChildView], EngineSample | None]:
    """(the listing, the engine's count between two equal listings or None when a state
    changed in between), in ONE round trip: the two listings are milliseconds apart, so a
    rekey every few seconds still leaves most readings consistent.

    A count that disagrees with its listing is read again after :data:`CONFIRM_S`, and the
    second reading is the one returned. Why: equal listings do not prove that nothing
    moved between them -- when charon (and the twin's daemon, twin/ipsec_hil_twin/ike/rekey.py) drops a
    DELETED child, the kernel's SA goes first and the listing follows once the daemon runs
    again; a count read in that gap is one association short of a listing that has not
    changed yet (CI, 4 workers at load 5: "holds 4 where strongSwan lists 5 (DELETED,
    REKEYED, INSTALLED)", 1 of 25 readings). A leak stays: an association left behind is
    still there a moment later, the second listing's transition has settled."""
    kids, got = _engine_reading(app, conn)
    if got is None or got.held == got.listed:
        return kids, got
    time.sleep(CONFIRM_S)
    return _engine_reading(app, conn)


def _engine_reading(app: Appliance, conn: str) -> tuple[list[ChildView], EngineSample | None]:
    """One reading of :func:`engine_sample`: listing, count, listing in one script."""
    script = (f"{swanctl_list_sas.COMMAND}; echo {_SPLIT}; {sysctl.COMMAND('-n', app.profile.oid('sa_count'))}; "
              f"echo {_SPLIT}; {swanctl_list_sas.COMMAND}")
    r = app.host.run(script, timeout=app.command_timeout)
    parts = r.stdout.split(_SPLIT + "\n")
    assert r.status == 0 and len(parts) == 3, f"{app.name}: listing and sa_count failed ({r.status}): {r.stderr[-300:]}"
    before, after = (_children(parts[0], conn), _children(parts[2], conn))
    if [c.key for c in before] != [c.key for c in after] or any(c.state not in ASSOCIATIONS_BY_STATE for c in after):
        return after, None
    return after, EngineSample(app.name, after, int(parts[1].strip()))


def rekey(app: Appliance, what: str, name: str) -> None:
    """``swanctl --rekey --child|--ike NAME``; returns at once (5.9.8's vici only queues it)."""
    r = app.host.run(SWANCTL_REKEY(f"--{what}", name), timeout=app.command_timeout)
    assert r.status == 0, f"{app.name}: swanctl --rekey --{what} {name} failed ({r.status}): {r.stderr.strip()[-300:]}"


def offloaded_ends(tunnel: ActiveTunnel) -> list[Appliance]:
    """The ends whose engine holds the associations (a kernel-cipher peer has none)."""
    return [tunnel.appliance(e) for e in ("local", "remote") if tunnel.offloaded(e)]


def flowing(app: Appliance, conn: str, floor: int) -> Callable[[], ChildView | None]:
    """A read that returns the installed child once its outbound packets passed ``floor``."""
    def read() -> ChildView | None:
        kids = [c for c in children_of(app, conn) if c.state == "INSTALLED"]
        return kids[0] if len(kids) == 1 and kids[0].packets_out > floor else None
    return read


def health_of(engines: list[Appliance]) -> dict[str, HealthSnapshot]:
    """One health snapshot per offloading end (netstat -m among it), read at once."""
    return dict(zip((app.name for app in engines), take_snapshots([app.host for app in engines])))


def mbufs_around(record: Figures, engines: list[Appliance], before: dict[str, HealthSnapshot],
                 after: dict[str, HealthSnapshot]) -> list[str]:
    """Record each end's mbufs and clusters before / after on the page; return the findings
    (the mbuf rows of the health comparison beyond POLICY, as that comparison words them).

    The same POLICY as the whole-configuration health test: a leak small enough for one
    must not fail the other for no reason anyone could name."""
    bad = []
    for app in engines:
        b, a = before[app.name].mbufs, after[app.name].mbufs
        record.figure(f"{app.name}: mbufs in use, before / after", f"{b.mbuf_current} / {a.mbuf_current}")
        record.figure(f"{app.name}: mbuf clusters in use, before / after", f"{b.cluster_current} / {a.cluster_current}")
        report = compare(before[app.name], after[app.name], POLICY, driver=driver_scope(app.profile))
        bad += [f"{app.name}: {r.check} {r.before} -> {r.after} ({r.change}, limit {r.limit})"
                for r in report.mbuf_findings]
    return bad
