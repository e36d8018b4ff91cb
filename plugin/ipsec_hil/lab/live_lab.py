"""The lab with live objects: a topology's appliances and bench, connected.

Why here and not in the pytest fixtures: a person at a Python prompt wants the same
objects a test gets (``with Lab.connect(load_topology(path, models=REGISTRY)) as lab: lab.appliances[...]``).

One run, one lab (issue 53): a pytest run connects its lab once per process, through its
run context (``ipsec_hil.context.RunContext.live_lab``), and hands that :class:`Lab` to
whatever needs the appliances -- the bench's lease, the recovery of dead runs, preflight,
the driver under test, the candidate comparison, the hardware facts (:func:`read_hardware`)
and the fixtures; the run closes it once, after its last use. This module is the one place
that talks to the appliances for the page's hardware table (:func:`hardware_info`): the
page (``ipsec_hil.lab.reporting``) only renders what it is given, and nothing here imports it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ipsec_hil.lab.appliance import Appliance
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.expectations.hardware import host_profile
from ipsec_hil.lab.measuring.baseline import HardwareInfo
from ipsec_hil.lab.remote import host_from_mgmt
from ipsec_hil.lab.topology import Port, Topology
from ipsec_hil.lab.traffic.bench import BenchHost

log = logging.getLogger(__name__)


def build_appliances(topology: Topology) -> tuple[dict[str, Appliance], dict[str, Any]]:
    """Appliance objects (and every host's transport) for every appliance of a topology."""
    known_hosts = topology.lab.known_hosts
    hosts: dict[str, Any] = {}
    for name, h in topology.hosts.items():
        jump = None
        if h.mgmt.jump is not None:
            jump = host_from_mgmt(f"{name}-jump", h.mgmt.jump, known_hosts)
        hosts[name] = host_from_mgmt(name, h.mgmt, known_hosts, jump=jump)
    apps = {
        name: Appliance(name, hosts[name], host_profile(h), command_timeout=h.mgmt.command_timeout,
                        ports=tuple(h.ports))
        for name, h in topology.hosts.items()
        if h.is_appliance
    }
    return apps, hosts


def close_hosts(hosts: dict[str, Any]) -> None:
    """Close every transport; a failure is logged with its host (the run's verdict stands)."""
    for name, h in hosts.items():
        try:
            h.close()
        except Exception as exc:  # noqa: BLE001 -- closing must not mask what the run found
            log.warning("%s: closing its connection failed: %s: %s", name, type(exc).__name__, exc)


@dataclass
class Lab:
    """The topology with live objects: ``lab.appliances[name]``, ``lab.bench``."""

    topology: Topology
    appliances: dict[str, Appliance]
    bench: BenchHost | None
    hosts: dict[str, Any]
    recovered: dict[str, list[str]] = field(default_factory=dict)
    _checked: set[str] = field(default_factory=set)

    @classmethod
    def connect(cls, topology: Topology) -> Lab:
        """Every appliance and the bench of ``topology`` (connections open lazily)."""
        apps, hosts = build_appliances(topology)
        bench_name = next((n for n, h in topology.hosts.items() if not h.is_appliance), None)
        bench = BenchHost(bench_name, hosts[bench_name]) if bench_name else None
        return cls(topology, apps, bench, hosts)

    def close(self) -> None:
        close_hosts(self.hosts)

    def check_again(self) -> None:
        """Forget which appliances :meth:`recover_once` checked: the next lease-taker checks
        them again (a run's recovery at its start released their leases; another run may
        have held them, and died, since)."""
        self._checked.clear()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def recover_once(self, *apps: Appliance, took_over: dict[str, Any] | None = None) -> None:
        """Restore what a dead run left on ``apps`` (their journals), once per process each.

        Call it only while holding every one's ApplianceLock: a journal belongs to a dead run
        only when nobody holds the lock -- recovering a live run's journal would undo its
        tunnel mid-test. Give a tunnel's two ends in one call: their routes are undone before
        either end's SAs are ended (provision.recovery.recover_ends says why). What was
        undone, and whose it was (the journal's writers; ``took_over``: appliance -> the dead
        holder's lease record, when the caller took its lease over), is recorded in
        ``dead_runs.FOUND``: the run says it on the terminal, the page and Allure's
        environment (issue 55). A recovery that fails raises (recorded with what is left).
        """
        from ipsec_hil.lab.dead_runs import recover_tunnel_journals  # files, routes, SAs, charon (issues 40, 55)

        todo = [a for a in apps if a.name not in self._checked]
        if not todo:
            return
        self._checked.update(a.name for a in todo)
        for name, restored in recover_tunnel_journals(todo, took_over=took_over).items():
            if restored:
                self.recovered[name] = restored

    def bench_port_facing(self, host: str, port: str) -> tuple[str, Port] | None:
        """The bench's port wired to ``host.port`` (name, Port), if the bench has one."""
        bench = self.bench.name if self.bench else None
        for link in self.topology.links:
            (ha, pa), (hb, pb) = link.ends
            if (ha, pa) == (host, port) and hb == bench:
                return pb, self.topology.hosts[hb].ports[pb]
            if (hb, pb) == (host, port) and ha == bench:
                return pa, self.topology.hosts[ha].ports[pa]
        return None


@dataclass(frozen=True)
class HardwareFacts:
    """Every appliance's driver build and kernel as the run found them, read once.

    ``unreadable``: appliance -> why its build could not be read (said on the page and in
    the header rather than dropped).
    """

    appliances: tuple[HardwareInfo, ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()


def hardware_info(appliance: Any) -> HardwareInfo:
    """Ask one Appliance for its driver build and kernel (module_info + kernel_version)."""
    mod = appliance.module_info()
    try:
        k = appliance.kernel_version()
        kernel = f"{k.osrelease} ({k.version})" if k.version else k.osrelease
    except LabError as e:
        kernel = f"unknown ({type(e).__name__})"
    return HardwareInfo(
        appliance=appliance.name,
        model=str(getattr(appliance.profile, "model", "?")),
        driver=str(getattr(appliance.profile, "driver", mod.name)),
        module_md5=mod.md5,
        module_size=mod.size,
        module_loaded=mod.loaded,
        kernel=kernel,
    )


def read_hardware(lab: Lab) -> HardwareFacts:
    """Ask each appliance of the connected ``lab`` for its module (name, md5, size, loaded)
    and kernel."""
    infos, unreadable = [], []
    for app in lab.appliances.values():
        try:
            infos.append(hardware_info(app))
        except LabError as exc:
            unreadable.append((app.name, str(exc)))
    return HardwareFacts(tuple(infos), tuple(unreadable))
