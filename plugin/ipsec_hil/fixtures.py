"""Fixtures: the lab, its appliances, the bench, tunnels per configuration, measurements.

Thin wiring over ``ipsec_hil.lab`` (library first): every object a fixture hands out is a
library object usable from a Python prompt (ipsec_hil.lab.live_lab.Lab,
ipsec_hil.lab.tunnel.ActiveTunnel, ipsec_hil.lab.cases.TunnelCase). What is decided here:

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
- **Known issues** (``known_issue`` fixture): only the measurement a known issue is about
  runs under it; a failure there is an expected failure naming the issue, a pass is
  reported as "issue N did not reproduce: may be fixed" (not as a plain pass).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import allure
import pytest

from ipsec_hil import config_health, places
from ipsec_hil.lab.appliance import Appliance
from ipsec_hil.lab.cases import (FILTER_KEYS, TunnelCase, appliance_groups, as_set, case_marker_names,
                              tunnel_cases)
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.expectations import counters
from ipsec_hil.lab.expectations.hardware import REGISTRY, KnownIssue
from ipsec_hil.lab.inject import NoInjectionPoint, TunnelWire
from ipsec_hil.lab.live_lab import Lab
from ipsec_hil.lab.live_lab import build_appliances  # noqa: F401 -- the project's tests import it from here
from ipsec_hil.lab.measuring.measure import Ledger, collect_checks, settle_all
from ipsec_hil.lab.reporting.report import plot_iperf
from ipsec_hil.lab.timeshare import STREAM, spent
from ipsec_hil.lab.topology import Topology
from ipsec_hil.lab.traffic.bench import BenchHost, iperf_run
from ipsec_hil.lab.traffic.bench_routes import BenchRoutes
from ipsec_hil.lab.tunnel import ActiveTunnel, bring_up
from ipsec_hil.records import PROPERTY, KnownIssueVerdict, TestRecord
from ipsec_hil.context import run_context

log = logging.getLogger(__name__)

#: Registered as a plugin of its own (ipsec_hil.pytest_plugin's pytest_plugins); nothing is
#: exported for ``from ipsec_hil.fixtures import *``.
__all__: list[str] = []

# ----------------------------------------------------------------- collection


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
    config_health.note_last_items(run_context(config).health_around, [(item.nodeid, _case_of(item)) for item in items])


def _case_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "tunnel" not in callspec.params:
        return None
    case = callspec.params["tunnel"]
    return case.id if case is not None else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tunnel" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("tunnels")
    criteria = dict(marker.kwargs) if marker else {}
    topology = run_context(metafunc.config).topology()
    try:
        cases = tunnel_cases(topology, **criteria)
    except ValueError as exc:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: @pytest.mark.tunnels: {exc}") from None
    _check_counter_names(metafunc, topology, cases, criteria)
    if cases:
        # The xdist group only where xdist is loaded (it registers the marker; with plugin
        # autoload off it is not, and strict markers would refuse it).
        groups = appliance_groups(topology) if metafunc.config.pluginmanager.hasplugin("xdist") else {}
        params = [pytest.param(c, id=c.id, marks=[*(getattr(pytest.mark, m) for m in case_marker_names(c)),
                                                  *([pytest.mark.xdist_group(groups[c.tunnel])] if groups else [])])
                  for c in cases]
    else:
        models = as_set(criteria.get("model")) or set(REGISTRY.names())
        reason = f"the topology has no tunnel matching {criteria or 'any'}"
        params = [pytest.param(None, id="no-tunnel",
                               marks=[pytest.mark.skip(reason=reason)] + [getattr(pytest.mark, m) for m in sorted(models)])]
    metafunc.parametrize("tunnel", params, indirect=True, scope="session")


def _check_counter_names(metafunc: pytest.Metafunc, topology: Topology, cases: list[TunnelCase],
                         criteria: dict) -> None:
    """Every counter the test names in a ledger reference is one of its models' (both ends
    of each of its tunnels; the marker's models when the lab has none of them): else a
    collection error naming the test, the name and the profiles (expectations.counters)."""
    if cases:
        models = {m for c in cases for m in (c.model, topology.hosts[topology.tunnels[c.tunnel].remote.host].model)}
    else:
        models = as_set(criteria.get("model")) or set(REGISTRY.names())
    profiles = [REGISTRY.get(m) for m in sorted(m for m in models if m in REGISTRY.names())]
    try:
        counters.check_names(counters.referenced_names(metafunc.function), profiles, metafunc.definition.nodeid)
        return
    except counters.CounterNameError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


# ----------------------------------------------------------------- session fixtures


@pytest.fixture(scope="session")
def topology(pytestconfig: pytest.Config) -> Topology:
    """The lab the tests run against (for the virtual lab: its resolved lab file)."""
    return run_context(pytestconfig).topology()


@pytest.fixture(scope="session")
def run_id() -> str:
    return os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:12] or uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def lab(pytestconfig: pytest.Config) -> Lab:
    """Every appliance and the bench, connected.

    The run's one connected lab in this process (``RunContext.live_lab``: the controller's
    preflight, driver and hardware facts used the same one; the run closes it). A dead
    run's journal is recovered by the tunnel fixture, per appliance, once it holds that
    appliance's lock (``Lab.recover_once``): under xdist a worker must not lock appliances
    of another worker's group (it would wait for that group's tunnels to end).
    """
    return run_context(pytestconfig).live_lab()


@pytest.fixture(scope="session")
def appliances(lab: Lab) -> dict[str, Appliance]:
    return lab.appliances


@pytest.fixture(scope="session")
def bench(lab: Lab) -> BenchHost:
    if lab.bench is None:
        pytest.skip("the topology has no bench host")
    return lab.bench


@pytest.fixture(scope="session")
def start_sequence(pytestconfig: pytest.Config):
    """``start_sequence(app, spi, seq)``: the appliance's outbound association ``spi`` sends
    its next frame with sequence number ``seq + 1``.

    Why only on the virtual lab: a test must reach 2^32 (extended sequence numbers) in
    seconds; hardware needs 2^32 frames for that (hours at line rate) and no driver lets
    a test set the counter. The virtual lab's engine can (``python -m ipsec_hil_twin seq``); on any
    other lab the test is skipped and says so."""
    lab = run_context(pytestconfig).lab
    if lab is None:
        pytest.skip("this lab cannot start an association near 2^32: hardware would need 2^32 frames "
                    "(hours at line rate); the virtual lab's engine can (python -m ipsec_hil_twin seq)")

    def start(app: Appliance, spi: int, seq: int) -> None:
        r = lab.twin("seq", app.name, hex(spi), hex(seq), timeout=30)
        if r.returncode != 0:
            raise LabError(f"{app.name}: starting SPI {spi:#010x} at sequence number {seq:#x} failed: "
                           f"{(r.stderr or r.stdout).strip()[-500:]}")
    return start


@pytest.fixture(scope="session")
def tunnel(request: pytest.FixtureRequest, lab: Lab, run_id: str) -> Iterator[ActiveTunnel]:
    """The tunnel of this parameter, built on both ends (transaction) and torn down after."""
    case: TunnelCase | None = request.param
    if case is None:
        pytest.skip("no tunnel configuration for this test in the topology")
    keep = request.config.getoption("--keep-tunnels", False)
    with bring_up(lab, case, run_id=run_id, keep=keep, announce=_announce_provisioning) as active:
        config_health.take_baseline(request.config, run_context(request.config).health_around, case.id,
                                    (active.local, active.remote))
        yield active


@pytest.fixture
def wire(tunnel: ActiveTunnel) -> Iterator[TunnelWire]:
    """The tunnel's injection point for crafted ESP (``tunnels.<t>.inject``; issue 12's wire
    tests). A topology that names none skips the test saying so; after the test the
    associations are restored fresh, so its crafted sequence numbers never reach the next."""
    try:
        w = TunnelWire.of(tunnel)
    except NoInjectionPoint as exc:
        pytest.skip(str(exc))
    try:
        yield w
    finally:
        w.restore()


def _announce_provisioning(conn: str, masked_conf: str) -> None:
    with allure.step(f"provision {conn}"):
        allure.attach(masked_conf, name="swanctl.conf (local, masked)", attachment_type=allure.attachment_type.TEXT)


# ----------------------------------------------------------------- per-test fixtures


@pytest.fixture(autouse=True)
def _leases_still_ours(request: pytest.FixtureRequest) -> None:
    """Before each tunnel test: the labgrid place and both ends' leases are still this run's.

    A lease broken by an operator (``python -m ipsec_hil.lab.sharing break``) or taken over after
    it expired ends the run (LEASE_LOST). Any loss already known ends it before the test's
    fixtures (ipsec_hil.lease_plugin's pytest_runtest_setup), the renewal thread mid-test.
    """
    from ipsec_hil import lease_plugin  # a plugin of its own: imported here, after pytest registered it

    if "tunnel" in request.fixturenames:
        with lease_plugin.stops_the_run(request.config):
            places.check_place(request.config)
            active = request.getfixturevalue("tunnel")
            if isinstance(active, ActiveTunnel):  # a project test may stand a fake in for the fixture
                active.check_leases()


@pytest.fixture(autouse=True)
def _health_around_configuration(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a tunnel test: the configuration's health judged when it was the configuration's
    last test (ipsec_hil.config_health); autouse, so torn down after the test's own fixtures."""
    yield
    if "tunnel" in request.fixturenames:
        from ipsec_hil import lease_plugin  # as _leases_still_ours: a loss ends the run, sends nothing

        with lease_plugin.stops_the_run(request.config):
            config_health.after_test(request.node, _case_of(request.node), run_context(request.config).health_around)


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Iterator[TestRecord]:
    """The test's contribution to the measurement page (figures, ledgers, plots)."""
    node = request.node
    page = node.get_closest_marker("page")
    hw = tuple(m for m in REGISTRY.names() if node.get_closest_marker(m) is not None)
    doc = (getattr(request.function, "__doc__", None) or "").strip().splitlines()
    title = doc[0].rstrip(".") if doc else node.name
    if "[" in node.name:  # which configuration: the page's tables must tell them apart
        title += f" [{node.name.split('[', 1)[1]}"
    rec = TestRecord(node.nodeid, title, page.args[0] if page and page.args else None, hw)
    rec.tunnel_case = _case_of(node)
    with collect_checks() as checks:
        yield rec
        rec.checks = list(checks)
    node.user_properties.append((PROPERTY, rec.to_json()))


@pytest.fixture
def known_issue(request: pytest.FixtureRequest, record: TestRecord):
    """``with known_issue(issue):`` -- the measurement an open issue is about (None: none open).

    An assertion failing inside is the issue reproducing: an expected failure (xfail)
    naming the issue. Passing is "issue N did not reproduce: may be fixed", reported as
    such on the page, in Allure and in the terminal -- never a plain pass, never hiding
    a failure of what ran before the block (a reboot, a re-establishment).
    """

    @contextlib.contextmanager
    def measured_under(issue: KnownIssue | None) -> Iterator[None]:
        if issue is None:
            yield
            return
        allure.dynamic.issue(str(issue.number))
        try:
            yield
        except AssertionError as exc:  # InvariantError is one too
            detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            record.known_issue = KnownIssueVerdict(issue.number, issue.summary, reproduced=True, detail=detail)
            pytest.xfail(record.known_issue.text())
        record.known_issue = KnownIssueVerdict(issue.number, issue.summary, reproduced=False)
        allure.dynamic.tag("known issue did not reproduce")

    return measured_under


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A test whose known issue did not reproduce is an XPASS carrying that sentence (the
    test's record holds the verdict)."""
    report = yield
    rec = getattr(item, "funcargs", {}).get("record")
    verdict = rec.known_issue if isinstance(rec, TestRecord) else None
    if verdict is not None and not verdict.reproduced and report.when == "call" and report.passed:
        report.wasxfail = verdict.text()
    return report


@pytest.fixture
def traffic_seconds(pytestconfig: pytest.Config):
    """``traffic_seconds(10)`` -> the page's duration scaled by ``--traffic-seconds``."""
    scale = float(pytestconfig.getoption("--traffic-seconds", 1.0))

    def scaled(seconds: float) -> float:
        return max(1.0, round(seconds * scale, 1))

    return scaled


@dataclass
class Metered:
    """What ``meter`` leaves after its block: the counters' ledger."""

    ledger: Ledger | None = None


@pytest.fixture
def meter(record: TestRecord):
    """``with meter(app_a, app_b, title=...) as m:`` settles, snapshots, runs the block,
    settles again and leaves ``m.ledger`` (recorded for the page and Allure)."""

    @contextlib.contextmanager
    def measure(*apps: Appliance, title: str = "") -> Iterator[Metered]:
        box = Metered()
        before = settle_all(apps)
        yield box
        after = settle_all(apps)
        box.ledger = record.ledger(Ledger.from_snapshots(before, after, title=title))

    return measure


@pytest.fixture
def bench_route(bench: BenchHost, run_id: str):
    """``bench_route(dst_prefix, gateway)``: a temporary bench route, removed after the test;
    journalled on the bench before it is added, so a run killed in between leaves it to the
    next run's recovery (ipsec_hil.lab.traffic.bench_routes)."""
    routes = BenchRoutes(bench, run_id)
    yield routes.add
    try:
        routes.remove_all()
    except LabError as exc:
        log.error("%s", exc)


@pytest.fixture
def stream(record: TestRecord, pytestconfig: pytest.Config):
    """``stream(client, server, server_addr, seconds, ...)`` -> IperfResult, recorded.

    Runs one iperf3 measurement (traffic.iperf_run), fails as a lab problem when iperf3
    reported an error, and records the rate, the per-stream plot and the JSON summary.
    In the run's breakdown the seconds asked are "traffic", the rest of the call (the
    iperf3 server, the figure, the plot) "stream start/stop" (ipsec_hil.lab.timeshare).
    """
    plots = Path(pytestconfig.rootpath) / "reports" / "plots"

    @spent(STREAM)
    def run(client, server, server_addr: str, seconds: float, *, streams: int = 1, reverse: bool = False,
            bind: str | None = None, port: int = 5201, label: str = "stream"):
        record.traffic_seconds += seconds
        with allure.step(f"traffic: {label}, {streams} stream(s), {seconds:g} s"):
            res = iperf_run(client, server, server_addr, seconds=seconds, streams=streams, reverse=reverse,
                            port=port, bind=bind)
        if not res.ok:
            raise LabError(f"iperf3 {label}: {res.error}")
        mbit = (res.received_bps or 0.0) / 1e6
        record.figure(f"{label}, {streams} stream(s), {seconds:g} s", round(mbit, 1), "Mbit/s")
        plots.mkdir(parents=True, exist_ok=True)
        safe = "".join(ch if ch.isalnum() else "_" for ch in f"{record.nodeid}-{label}")[-150:]
        try:
            record.plot(plot_iperf(res, plots / f"{safe}.png", f"{label} ({mbit:.0f} Mbit/s)"))
        except Exception as exc:  # noqa: BLE001 -- a plot is a nicety; the figure is recorded
            log.warning("plot of %s failed: %s: %s", label, type(exc).__name__, exc)
        return res

    return run
