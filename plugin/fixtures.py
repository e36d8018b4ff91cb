"""Fixtures: the lab, its appliances, the bench, tunnels per configuration, measurements.

Thin wiring over ``plugin.lab`` (library first): every object a fixture hands out is a
library object usable from a Python prompt. What is decided here:

- **Tunnels per configuration.** A test asks for ``tunnel`` and says which tunnels suit it
  with ``@pytest.mark.tunnels(model=..., remote_cipher=..., outer=..., inner=...,
  cipher=..., children=...)``. ``pytest_generate_tests`` turns every matching
  (tunnel, outer, inner, cipher) of the topology into one parameter, session-scoped, so
  pytest groups the tests of one configuration and the tunnel is built once and torn
  down after its last test. Each parameter carries the marker of the hardware it runs on
  (the local end's model) and its family/cipher markers, so ``-m xgs136`` selects exactly
  the XGS 136's cases.
- **Bring-up is all or nothing** (the 002 page): a configuration whose children do not all
  come up raises ``ProvisionError`` in the fixture; pytest caches that error, so every
  test of that configuration reports it without trying again.
- **Both ends locked** while a tunnel exists (``ApplianceLock`` on the appliances
  themselves), so two runs never interleave on one appliance.
- **Bench routes** for the forwarded tests are added with pyroute2 on the bench (the
  ``route`` probe) and removed afterwards.
"""

from __future__ import annotations

import contextlib
import getpass
import ipaddress
import logging
import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from plugin.lab.appliance import Appliance
from plugin.lab.errors import LabError
from plugin.lab.files import recover
from plugin.lab.lock import ApplianceLock
from plugin.lab.measure import Ledger, collect_checks, settle
from plugin.lab.provision import ChildPlan, TunnelPlan, TunnelProvisioner, child_plans, render_masked
from plugin.lab.remote import host_from_mgmt
from plugin.lab.topology import Topology, TunnelConfig
from plugin.lab.traffic import BenchHost
from plugin.records import PROPERTY, TestRecord

log = logging.getLogger(__name__)

#: Registered as a plugin of its own (root conftest's pytest_plugins); nothing is exported
#: for ``from plugin.fixtures import *`` so its hooks never shadow pytest_plugin's.
__all__: list[str] = []

MODEL_MARKERS = ("xgs136", "xgs3300")
FILTER_KEYS = ("model", "remote_cipher", "outer", "inner", "cipher", "children", "tunnel")


# ----------------------------------------------------------------- library-level builders


def build_appliances(topology: Topology) -> tuple[dict[str, Appliance], dict[str, Any]]:
    """Appliance objects (and their hosts) for every appliance of a topology."""
    known_hosts = topology.lab.known_hosts
    hosts: dict[str, Any] = {}
    for name, h in topology.hosts.items():
        jump = None
        if h.mgmt.jump is not None:
            jump = host_from_mgmt(f"{name}-jump", h.mgmt.jump, known_hosts)
        hosts[name] = host_from_mgmt(name, h.mgmt, known_hosts, jump=jump)
    apps = {
        name: Appliance(name, hosts[name], h.hardware, command_timeout=h.mgmt.command_timeout)
        for name, h in topology.hosts.items()
        if h.is_appliance
    }
    return apps, hosts


@dataclass(frozen=True)
class TunnelCase:
    """One parameter of the ``tunnel`` fixture: a topology tunnel and a configuration."""

    tunnel: str
    config: TunnelConfig
    model: str

    @property
    def id(self) -> str:
        return f"{self.tunnel}-{self.config.id}"


def _as_set(v: Any) -> set | None:
    if v is None:
        return None
    if isinstance(v, (list, tuple, set, frozenset)):
        return set(v)
    return {v}


def tunnel_cases(topology: Topology, **criteria: Any) -> list[TunnelCase]:
    """Every (tunnel, configuration) of ``topology`` matching the marker's criteria.

    ``children`` is ``"one"`` or ``"many"``; the other keys take a value or a list.
    """
    unknown = set(criteria) - set(FILTER_KEYS)
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.tunnels: unknown key(s) {sorted(unknown)}; known: {FILTER_KEYS}")
    want = {k: _as_set(v) for k, v in criteria.items()}
    out = []
    for name, t in topology.tunnels.items():
        model = topology.hosts[t.local.host].model
        if want.get("tunnel") and name not in want["tunnel"]:
            continue
        if want.get("model") and model not in want["model"]:
            continue
        if want.get("remote_cipher") and t.remote.cipher not in want["remote_cipher"]:
            continue
        for cfg in t.configs():
            if want.get("outer") and cfg.outer not in want["outer"]:
                continue
            if want.get("inner") and cfg.inner not in want["inner"]:
                continue
            if want.get("cipher") and cfg.cipher not in want["cipher"]:
                continue
            kids = "one" if cfg.children == 1 else "many"
            if want.get("children") and kids not in want["children"]:
                continue
            out.append(TunnelCase(name, cfg, model))
    return out


def appliance_groups(topology: Topology) -> dict[str, str]:
    """Tunnel name -> its xdist group: the connected set of appliances it belongs to.

    Why connected sets, not pairs: two tunnels that share an appliance (the virtual lab's
    lab/npu/many all end on peer3300) must never run at once, so every tunnel reachable
    through shared appliances lands in one group, named by its sorted appliances joined
    with "+" (e.g. "dut3300+peer3300+xgs136"). Under ``-n`` with ``--dist loadgroup``
    xdist gives each group to one worker; disjoint sets run in parallel.
    """
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for t in topology.tunnels.values():
        parent[find(t.local.host)] = find(t.remote.host)
    members: dict[str, list[str]] = {}
    for host in list(parent):
        members.setdefault(find(host), []).append(host)
    name = {root: "+".join(sorted(hosts)) for root, hosts in members.items()}
    return {tname: name[find(t.local.host)] for tname, t in topology.tunnels.items()}


def case_marks(case: TunnelCase, group: str | None = None) -> list[pytest.MarkDecorator]:
    marks = [getattr(pytest.mark, case.model)]
    if group:
        marks.append(pytest.mark.xdist_group(group))
    if case.config.outer == "ipv6":
        marks.append(pytest.mark.outer_v6)
    if case.config.inner == "ipv6":
        marks.append(pytest.mark.inner_v6)
    marks.append(pytest.mark.gcm if case.config.cipher == "aes-gcm-16" else pytest.mark.cbc)
    if case.config.children > 1:
        marks.append(pytest.mark.six_children)
    return marks


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tunnels(model, remote_cipher, outer, inner, cipher, children, tunnel): which of the "
        "topology's tunnel configurations a test using the `tunnel` fixture runs on",
    )
    config.addinivalue_line("markers", "runs_last: run after every other test (it takes a tunnel down)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One bring-up per configuration: the tests of one tunnel case run together (in the
    order the cases first appear), and the teardown checks run last within their case
    (they take their tunnel down on purpose; placed after every case they made pytest
    bring each earlier case's tunnel up a second time -- measured: 2 cases, 4 bring-ups).
    Tests without a tunnel keep their place at the front; runs_last ones go at the end."""
    first_seen: dict[str, int] = {}
    for item in items:
        case = _case_of(item)
        if case is not None:
            first_seen.setdefault(case, len(first_seen))

    def key(item: pytest.Item) -> tuple[int, bool]:
        case = _case_of(item)
        last = item.get_closest_marker("runs_last") is not None
        if case is None:
            return (len(first_seen) if last else -1, last)
        return (first_seen[case], last)

    items.sort(key=key)


def _case_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "tunnel" not in callspec.params:
        return None
    case = callspec.params["tunnel"]
    return case.id if case is not None else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tunnel" not in metafunc.fixturenames:
        return
    from plugin.session import active_topology

    marker = metafunc.definition.get_closest_marker("tunnels")
    criteria = dict(marker.kwargs) if marker else {}
    topology = active_topology(metafunc.config)
    cases = tunnel_cases(topology, **criteria)
    if cases:
        groups = appliance_groups(topology)
        params = [pytest.param(c, id=c.id, marks=case_marks(c, groups[c.tunnel])) for c in cases]
    else:
        models = _as_set(criteria.get("model")) or set(MODEL_MARKERS)
        reason = f"the topology has no tunnel matching {criteria or 'any'}"
        params = [pytest.param(None, id="no-tunnel",
                               marks=[pytest.mark.skip(reason=reason)] + [getattr(pytest.mark, m) for m in sorted(models)])]
    metafunc.parametrize("tunnel", params, indirect=True, scope="session")


# ----------------------------------------------------------------- session fixtures


@pytest.fixture(scope="session")
def topology(pytestconfig: pytest.Config) -> Topology:
    """The lab the tests run against (for the virtual lab: its resolved lab file)."""
    from plugin.session import active_topology

    return active_topology(pytestconfig)


@pytest.fixture(scope="session")
def run_id() -> str:
    return os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:12] or uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def lab(topology: Topology) -> Iterator["Lab"]:
    """Every appliance and the bench, connected.

    A dead run's journal is recovered by the tunnel fixture, per appliance, once it holds
    that appliance's lock (``Lab.recover_once``): under xdist a worker must not lock
    appliances of another worker's group (it would wait for that group's tunnels to end).
    """
    apps, hosts = build_appliances(topology)
    bench_name = next((n for n, h in topology.hosts.items() if not h.is_appliance), None)
    bench = BenchHost(bench_name, hosts[bench_name]) if bench_name else None
    the_lab = Lab(topology, apps, bench, hosts)
    try:
        yield the_lab
    finally:
        for h in hosts.values():
            with contextlib.suppress(Exception):
                h.close()


@dataclass
class Lab:
    """The topology with live objects: ``lab.appliances[name]``, ``lab.bench``."""

    topology: Topology
    appliances: dict[str, Appliance]
    bench: BenchHost | None
    hosts: dict[str, Any]
    recovered: dict[str, list[str]] = field(default_factory=dict)
    _checked: set[str] = field(default_factory=set)

    def recover_once(self, app: Appliance) -> None:
        """Restore what a dead run left on ``app`` (its journal), once per process.

        Call it only while holding ``app``'s ApplianceLock: a journal belongs to a dead run
        only when nobody holds the lock -- recovering a live run's journal would undo its
        tunnel mid-test.
        """
        if app.name in self._checked:
            return
        self._checked.add(app.name)
        restored = recover(app.host)
        if restored:
            self.recovered[app.name] = restored
            log.warning("%s: restored what a dead run left: %s", app.name, "; ".join(restored))

    def bench_port_facing(self, host: str, port: str) -> tuple[str, Any] | None:
        """The bench's port wired to ``host.port`` (name, Port), if the bench has one."""
        bench = self.bench.name if self.bench else None
        for link in self.topology.links:
            (ha, pa), (hb, pb) = link.ends
            if (ha, pa) == (host, port) and hb == bench:
                return pb, self.topology.hosts[hb].ports[pb]
            if (hb, pb) == (host, port) and ha == bench:
                return pa, self.topology.hosts[ha].ports[pa]
        return None


@pytest.fixture(scope="session")
def appliances(lab: Lab) -> dict[str, Appliance]:
    return lab.appliances


@pytest.fixture(scope="session")
def bench(lab: Lab) -> BenchHost:
    if lab.bench is None:
        pytest.skip("the topology has no bench host")
    return lab.bench


@dataclass
class ActiveTunnel:
    """A tunnel that is up: its plan, configuration, both appliances and what bring-up saw."""

    case: TunnelCase
    plan: TunnelPlan
    provisioner: TunnelProvisioner
    local: Appliance
    remote: Appliance
    lab: Lab

    @property
    def config(self) -> TunnelConfig:
        return self.case.config

    @property
    def conn(self) -> str:
        return self.provisioner.conn

    @property
    def children(self) -> list[ChildPlan]:
        return child_plans(self.plan, self.config)

    @property
    def bringup(self):
        return self.provisioner.bringup

    def appliance(self, end: str) -> Appliance:
        return self.local if end == "local" else self.remote

    def inner_address(self, end: str) -> str:
        """The ``end`` appliance's own address on its LAN in the inner family."""
        return str(ipaddress.ip_interface(self.plan.end(end).lan_if[self.config.inner]).ip)

    def bench_inner_address(self, end: str) -> str | None:
        """The bench's address on ``end``'s LAN in the inner family (None if not wired)."""
        e = self.plan.end(end)
        found = self.lab.bench_port_facing(e.host, e.lan)
        if found is None:
            return None
        v = getattr(found[1], self.config.inner, None)
        return str(ipaddress.ip_interface(str(v)).ip) if v else None

    def bench_lan_mtu(self, end: str) -> int:
        """The MTU a forwarded packet from the bench meets first: the smaller of the bench's
        port and the appliance's LAN port on ``end``'s side."""
        e = self.plan.end(end)
        lan = self.lab.topology.port(e.host, e.lan).mtu
        found = self.lab.bench_port_facing(e.host, e.lan)
        return min(lan, found[1].mtu) if found else lan

    def masked_conf(self, end: str) -> str:
        return render_masked(self.plan, self.config, end)

    def reestablish(self) -> None:
        """After a reboot: the kept configuration loaded again and every child up."""
        self.provisioner.reestablish()

    def spis(self, app: Appliance) -> set[int]:
        """This tunnel's SPIs (both directions) on ``app``, from ``swanctl --list-sas``."""
        out: set[int] = set()
        for ike in app.list_sas().ike_sas:
            if ike.name == self.conn:
                for c in ike.children:
                    out |= {int(s, 16) for s in (c.spi_in, c.spi_out) if s}
        return out

    def close(self) -> list[str]:
        """Tear the tunnel down now (idempotent: the fixture's own teardown is then a no-op)."""
        return self.provisioner.down()

    def backups(self) -> list[tuple[str, Any]]:
        """(appliance, files.Backup) of every file the tunnel's transactions saved."""
        return self.provisioner.backups()


@pytest.fixture(scope="session")
def tunnel(request: pytest.FixtureRequest, lab: Lab, run_id: str) -> Iterator[ActiveTunnel]:
    """The tunnel of this parameter, built on both ends (transaction) and torn down after."""
    case: TunnelCase | None = request.param
    if case is None:
        pytest.skip("no tunnel configuration for this test in the topology")
    topo = lab.topology
    plan = TunnelPlan.from_topology(topo, case.tunnel)
    psk = topo.tunnels[case.tunnel].psk.read()
    keep = request.config.getoption("--keep-tunnels", False)
    local, remote = lab.appliances[plan.local.host], lab.appliances[plan.remote.host]
    holder = f"{getpass.getuser()}@{socket.gethostname()}: pytest {case.id}"
    locks = [ApplianceLock(a.host, holder, run_id=run_id, wait=600, poll=2) for a in (local, remote)]
    with contextlib.ExitStack() as stack:
        for lk in locks:
            lk.acquire()
            stack.callback(lk.release)
        for app in (local, remote):
            lab.recover_once(app)
        prov = TunnelProvisioner({local.name: local, remote.name: remote}, plan, case.config, psk,
                                 run_id=run_id, keep=keep)
        _allure_step_text(f"provision {prov.conn}", render_masked(plan, case.config, "local"), "swanctl.conf (local, masked)")
        prov.up()
        try:
            yield ActiveTunnel(case, plan, prov, local, remote, lab)
        finally:
            prov.down()


def _allure_step_text(step: str, text: str, name: str) -> None:
    try:
        import allure

        with allure.step(step):
            allure.attach(text, name=name, attachment_type=allure.attachment_type.TEXT)
    except Exception:
        pass


# ----------------------------------------------------------------- per-test fixtures


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Iterator[TestRecord]:
    """The test's contribution to the measurement page (figures, ledgers, plots)."""
    node = request.node
    page = node.get_closest_marker("page")
    hw = tuple(m for m in MODEL_MARKERS if node.get_closest_marker(m) is not None)
    doc = (getattr(request.function, "__doc__", None) or "").strip().splitlines()
    title = doc[0].rstrip(".") if doc else node.name
    if "[" in node.name:  # which configuration: the page's tables must tell them apart
        title += f" [{node.name.split('[', 1)[1]}"
    rec = TestRecord(node.nodeid, title, page.args[0] if page and page.args else None, hw)
    case = _case_of(node)
    rec.tunnel_case = case
    with collect_checks() as checks:
        yield rec
        rec.checks = list(checks)
    node.user_properties.append((PROPERTY, rec.to_json()))


@pytest.fixture
def traffic_seconds(pytestconfig: pytest.Config):
    """``traffic_seconds(10)`` -> the page's duration scaled by ``--traffic-seconds``."""
    scale = float(pytestconfig.getoption("--traffic-seconds", 1.0))

    def scaled(seconds: float) -> float:
        return max(1.0, round(seconds * scale, 1))

    return scaled


@pytest.fixture
def meter(record: TestRecord):
    """``with meter(app_a, app_b, title=...) as m:`` settles, snapshots, runs the block,
    settles again and leaves ``m.ledger`` (recorded for the page and Allure)."""

    @contextlib.contextmanager
    def measure(*apps: Appliance, title: str = "") -> Iterator["_Metered"]:
        box = _Metered()
        before = [settle(a) for a in apps]
        yield box
        after = [settle(a) for a in apps]
        box.ledger = record.ledger(Ledger.from_snapshots(before, after, title=title))

    return measure


@dataclass
class _Metered:
    ledger: Ledger | None = None


@pytest.fixture
def bench_route(bench: BenchHost):
    """``bench_route(dst_prefix, gateway)``: a temporary bench route, removed after the test."""
    added: list[str] = []

    def add(dst: str, gateway: str) -> dict:
        res = bench.probe("route", action="add", dst=dst, gateway=gateway)
        if not res.get("existed"):
            added.append(dst)
        return res

    yield add
    for dst in reversed(added):
        try:
            bench.probe("route", action="del", dst=dst)
        except LabError as exc:
            log.error("bench route %s could not be removed: %s", dst, exc)


@pytest.fixture
def stream(record: TestRecord, pytestconfig: pytest.Config):
    """``stream(client, server, server_addr, seconds, ...)`` -> IperfResult, recorded.

    Runs one iperf3 measurement (traffic.iperf_run), fails as a lab problem when iperf3
    reported an error, and records the rate, the per-stream plot and the JSON summary.
    """
    from plugin.lab.errors import LabError as _LabError
    from plugin.lab.report import plot_iperf
    from plugin.lab.traffic import iperf_run

    plots = Path(pytestconfig.rootpath) / "reports" / "plots"

    def run(client, server, server_addr: str, seconds: float, *, streams: int = 1, reverse: bool = False,
            bind: str | None = None, port: int = 5201, label: str = "stream"):
        record.traffic_seconds += seconds
        with _step(f"traffic: {label}, {streams} stream(s), {seconds:g} s"):
            res = iperf_run(client, server, server_addr, seconds=seconds, streams=streams, reverse=reverse,
                            port=port, bind=bind)
        if not res.ok:
            raise _LabError(f"iperf3 {label}: {res.error}")
        mbit = (res.received_bps or 0.0) / 1e6
        record.figure(f"{label}, {streams} stream(s), {seconds:g} s", round(mbit, 1), "Mbit/s")
        plots.mkdir(parents=True, exist_ok=True)
        safe = "".join(ch if ch.isalnum() else "_" for ch in f"{record.nodeid}-{label}")[-150:]
        try:
            record.plot(plot_iperf(res, plots / f"{safe}.png", f"{label} ({mbit:.0f} Mbit/s)"))
        except Exception as exc:  # a plot is a nicety; the figure is recorded
            log.warning("plot of %s failed: %s", label, exc)
        return res

    return run


@contextlib.contextmanager
def _step(title: str):
    try:
        import allure

        with allure.step(title):
            yield
    except ImportError:
        yield
