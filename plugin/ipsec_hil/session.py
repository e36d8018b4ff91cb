"""The run's session objects: :class:`HilSession` (controller) and :class:`WorkerSession` (xdist worker).

Why two objects (as pytest-xdist registers its DSession): what happens once per run belongs
to the controller (pytest without xdist, or xdist's controller) and must stay out of the
workers -- the virtual lab's life, the hardware facts, every test's record, the parts'
``finish`` and the page. Which of the two is registered is decided once, in
``ipsec_hil.pytest_plugin``'s ``pytest_configure``; their hooks run only where they are
registered, so no part guards against worker processes itself. Both run the parts of the
run's context (:class:`ipsec_hil.context.RunContext`) in the parts' order.

:class:`HilSession`:

- ``pytest_sessionstart`` (tryfirst: before xdist's, which starts the workers), in this
  order: a ``-m`` naming an unknown marker is a usage error (before any lab is touched);
  if the run executes acceptance tests: a labgrid place is claimed, or a virtual lab
  started (exit :attr:`HilExitCode.LAB_NOT_UP` when it does not come up) and its resolved
  lab file made the context's active topology; every part's ``lab_ready`` (preflight,
  then ``--driver`` deploys the build under test), then ``pytest_hil_lab_ready`` for a
  driver repository's conftest; then every appliance's driver build and kernel are read
  once (:func:`ipsec_hil.lab.live_lab.read_hardware`, over the context's connected lab,
  :meth:`~ipsec_hil.context.RunContext.live_lab`) -- the report header, the page and
  the gate's comparison use these facts;
- (the worker's one input, the context's :meth:`~ipsec_hil.context.RunContext.to_workerinput`,
  is written by ``ipsec_hil.pytest_plugin.pytest_configure_node``, once);
- ``pytest_runtest_logreport``: every acceptance test's outcome and record (carried from
  workers in the reports' user_properties, see ipsec_hil.records) into the context's entries;
- ``pytest_sessionfinish``: a run whose acceptance tests were all skipped measured
  nothing (exit :attr:`HilExitCode.NOTHING_MEASURED`, one line saying why); every part's
  ``finish`` in the parts' order (the comparison measures, the driver is restored, the
  gate compares); then the page, with the sections plugins give through
  ``pytest_hil_page_sections``, and Allure's run-level files (controller-side, after the
  workers: see the reference on ``--clean-alluredir`` wiping files written earlier);
- ``pytest_unconfigure``: every part's ``close`` (a driver never restored is restored),
  the connected lab closed, then the virtual lab stops (unless ``--keep-tunnels``).

:class:`WorkerSession`: ``pytest_sessionfinish``, every part's ``worker_finish`` (its
last word to the controller in ``workeroutput``); ``pytest_unconfigure``, its connected
lab closed.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shlex
import sys
from collections import Counter
from pathlib import Path

import pytest

from ipsec_hil import markers, places, records, virtual_lab
from ipsec_hil.acceptance import ACCEPTANCE_PACKAGE  # tests_hil/'s import package, named once
from ipsec_hil.context import CONTEXT_KEY, WORKER_INPUT, Part, RunContext
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.sharing.holds import HOLDS
from ipsec_hil.lab.errors import LabError, TopologyError
from ipsec_hil.lab.live_lab import HardwareFacts, read_hardware
from ipsec_hil.lab.reporting import history
from ipsec_hil.lab.reporting.page import Section
from ipsec_hil.lab.reporting.report import RunInfo, write_allure_files
from ipsec_hil.lab.topology import Topology, load_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY

log = logging.getLogger(__name__)

#: The name HilSession is registered under (``config.pluginmanager.get_plugin(PLUGIN_NAME)``).
PLUGIN_NAME = "hil_session"
WORKER_PLUGIN_NAME = "hil_worker_session"
ACCEPTANCE_DIR = "tests_hil"
PAGE_NAME = "measurement-page.md"


def acceptance_dirs(config: pytest.Config) -> tuple[Path, ...]:
    """Where acceptance tests live: the rootdir's tests_hil/ (a checkout, or a copy of one)
    and the installed ``ipsec_hil_acceptance`` package (a driver repository runs it by
    module name, ``ipsec-hil-acceptance``: its files are outside the rootdir)."""
    import importlib.util

    dirs = [(Path(config.rootpath) / ACCEPTANCE_DIR).resolve()]
    spec = importlib.util.find_spec(ACCEPTANCE_PACKAGE)  # locates it; runs no code of it
    for loc in (spec.submodule_search_locations or []) if spec else []:
        if Path(loc).resolve() not in dirs:
            dirs.append(Path(loc).resolve())
    return tuple(dirs)


def _inside(path: Path, dirs: tuple[Path, ...]) -> bool:
    return any(path == d or d in path.parents for d in dirs)


def is_acceptance_report(config: pytest.Config, report: pytest.TestReport) -> bool:
    """A report of an acceptance test, by its file (``location`` is rootdir-relative, also
    for files outside it), not by its node id: an installed suite's node ids carry no
    tests_hil/ prefix."""
    if report.nodeid.startswith(ACCEPTANCE_DIR):
        return True
    return _inside((Path(config.rootpath) / report.location[0]).resolve(), acceptance_dirs(config))


def wants_lab(config: pytest.Config) -> bool:
    """Only a run that executes acceptance tests needs a lab: not --help, --markers or
    --collect-only, and not a run of the project's own tests (``pytest tests/``). The
    paths pytest was given (or ``testpaths``) tell: one inside tests_hil/, or a folder
    that contains it, selects acceptance tests."""
    opt = config.option
    if any(getattr(opt, name, False) for name in ("help", "markers", "collectonly", "showfixtures", "version")):
        return False
    dirs = acceptance_dirs(config)
    for arg in config.args or [str(config.invocation_params.dir)]:
        name = arg.split("::", 1)[0]
        if opt.pyargs and (name == ACCEPTANCE_PACKAGE or name.startswith(ACCEPTANCE_PACKAGE + ".")):
            return True
        path = (Path(config.invocation_params.dir) / name).resolve()
        # a folder that holds a checkout's tests_hil/ selects it (`pytest .`); a folder that
        # holds the installed package (a driver repository with its .venv inside) does not
        if _inside(path, dirs) or (dirs[0].is_dir() and path in dirs[0].parents):
            return True
    return False


def reports_dir(config: pytest.Config) -> Path:
    return Path(config.rootpath) / "reports"


def command_line(config: pytest.Config) -> str:
    return " ".join(shlex.quote(a) for a in ["pytest", *config.invocation_params.args])


def hil_session(config: pytest.Config) -> HilSession | None:
    """The controller's HilSession (None in an xdist worker, or in a run without a lab file)."""
    return config.pluginmanager.get_plugin(PLUGIN_NAME)


def configure_controller(config: pytest.Config, path: Path | None, parts: tuple[Part, ...]) -> RunContext:
    """The controller's context (the lab file parsed once) and, with a lab file, its HilSession."""
    in_workers = bool(getattr(config.option, "numprocesses", None))
    if path is None:
        ctx = RunContext(None, None, parts=parts)
    else:
        try:
            ctx = RunContext.load(path, parts=parts, places_in_workers=in_workers)
        except TopologyError as exc:
            raise pytest.UsageError(f"invalid topology:\n{exc}") from None
        except FileNotFoundError:
            raise pytest.UsageError(f"topology file not found: {path}") from None
    config.stash[CONTEXT_KEY] = ctx
    if ctx.configured is not None:
        config.pluginmanager.register(HilSession(config, ctx), PLUGIN_NAME)
    return ctx


def configure_worker(config: pytest.Config, parts: tuple[Part, ...]) -> RunContext:
    """An xdist worker's context, from the controller's one input; a labgrid lab's worker
    claims its own place (every worker holds one)."""
    ctx = RunContext.from_workerinput(config.workerinput.get(WORKER_INPUT) or {}, parts=parts)
    config.stash[CONTEXT_KEY] = ctx
    if ctx.active is not None and ctx.active.lab.labgrid is not None and wants_lab(config):
        topology, claim = places.claim_place(config, ctx.active)
        ctx.activate(topology, place=claim)
    ctx.seal()
    if ctx.active is not None:
        config.pluginmanager.register(WorkerSession(ctx), WORKER_PLUGIN_NAME)
    return ctx


class WorkerSession:
    """An xdist worker's part of the run: the parts' last word to the controller."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        for part in self.ctx.in_order():
            part.worker_finish(self.ctx, session, session.config.workeroutput)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.ctx.close_lab()


class HilSession:
    """The controller's part of the run (see the module's docstring for its hooks)."""

    def __init__(self, config: pytest.Config, ctx: RunContext) -> None:
        self.config = config
        self.ctx = ctx
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self._facts: HardwareFacts | None = None
        self.page_path: Path | None = None
        #: the one line of a run that measured nothing (exit NOTHING_MEASURED), else None
        self.nothing_measured: str | None = None

    @property
    def entries(self) -> records.Entries:
        return self.ctx.entries

    @property
    def topology(self) -> Topology:
        """The active topology (for a virtual lab the run started: its resolved file)."""
        return self.ctx.topology()

    # ------------------------------------------------------------ the lab

    def start_lab_if_virtual(self) -> None:
        """Claim the labgrid place, or start the virtual lab when the topology is one (exit
        LAB_NOT_UP when it does not come up); the context's active topology follows."""
        ctx, configured = self.ctx, self.ctx.configured
        assert configured is not None and ctx.configured_path is not None
        if configured.lab.labgrid is not None:  # the coordinator hands out running appliances
            if not ctx.places_in_workers:
                topology, claim = places.claim_place(self.config, configured)
                ctx.activate(topology, place=claim)
        elif configured.lab.virtual and not virtual_lab.is_running_lab(configured):
            try:
                lab = virtual_lab.start(ctx.configured_path, owner_pid=os.getpid())
            except LabError as exc:
                pytest.exit(f"virtual lab: {exc}", returncode=HilExitCode.LAB_NOT_UP)
            try:
                resolved = load_topology(lab.resolved, models=REGISTRY)
            except TopologyError as exc:
                virtual_lab.stop(lab)
                pytest.exit(f"virtual lab: its resolved lab file is invalid:\n{exc}", returncode=HilExitCode.LAB_NOT_UP)
            ctx.activate(resolved, lab=lab)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        for part in self.ctx.in_order():
            part.close(self.ctx)
        self.ctx.close_lab()  # after the parts' last use (a driver restored), before the lab stops
        lab = self.ctx.lab if self.ctx.lab_owned else None
        if lab is None:
            return
        if config.getoption("--keep-tunnels", False):
            sys.stderr.write(
                f"\n*** --keep-tunnels: the virtual lab {lab.prefix} keeps running "
                f"(run dir {lab.run_dir}); remove it with: python -m ipsec_hil_twin down --prefix {lab.prefix}\n"
            )
            return
        try:
            virtual_lab.stop(lab)
        except LabError as exc:
            sys.stderr.write(f"\nvirtual lab teardown failed: {exc}\n")

    # ------------------------------------------------------------ hardware facts, read once

    def hardware_facts(self) -> HardwareFacts:
        """Every appliance's driver build and kernel, read the first time they are asked for."""
        configured = self.ctx.configured
        if self._facts is None and configured is not None and configured.lab.labgrid is not None \
                and self.ctx.places_in_workers:
            self._facts = HardwareFacts(unreadable=(("appliances", "held by the xdist workers' labgrid places; "
                                                     "each worker's tests read them"),))
        if self._facts is None:
            try:
                self._facts = read_hardware(self.ctx.live_lab())
            except LabError as exc:
                self._facts = HardwareFacts(unreadable=(("appliances", f"not reachable ({exc})"),))
        return self._facts

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Marker check, lab up, parts' lab_ready (preflight, build under test deployed),
        hardware facts read -- in this order."""
        config = session.config
        markers.check_expression(config)
        if wants_lab(config):
            self.start_lab_if_virtual()
        self.ctx.seal()
        if not wants_lab(config):
            return
        for part in self.ctx.in_order():
            part.lab_ready(self.ctx, session)
        config.hook.pytest_hil_lab_ready(session=session)
        self.hardware_facts()

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """Which lab, and on each appliance the driver module (name, md5, size) and kernel."""
        lines = []
        lab = self.ctx.lab
        if lab is not None and self.ctx.lab_owned:
            lines.append(f"virtual lab: {lab.prefix} (run dir {lab.run_dir})")
        if not wants_lab(config):
            return lines
        facts = self.hardware_facts()
        for hw in facts.appliances:
            size = f"{hw.module_size:,} bytes" if hw.module_size is not None else "size ?"
            state = "loaded" if hw.module_loaded else "NOT loaded"
            lines.append(f"{hw.appliance} ({hw.model}): {hw.driver} md5 {hw.module_md5 or '?'}, {size}, "
                         f"{state}; kernel {hw.kernel}")
        lines += [f"{name}: cannot read the driver build: {why}" for name, why in facts.unreadable]
        return lines

    # ------------------------------------------------------------ records and the page

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if is_acceptance_report(self.config, report):
            self.entries.add(report)

    def pytest_hil_page_sections(self, config: pytest.Config) -> list[Section]:
        return [s for s in (self.entries.known_issues_section(), self.entries.config_health_section()) if s]

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        lines = self.entries.known_issue_lines()
        if lines:
            terminalreporter.section("known issues")
            for line in lines:
                terminalreporter.write_line(line)
        if self.nothing_measured:
            terminalreporter.write_line(self.nothing_measured, red=True, bold=True)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Nothing measured is judged first (a gate must not count it as a failure to
        compare), then the parts finish in their order, then the page is written.

        trylast, relative to pytest itself: after a run ended early (``pytest.exit``: a lost
        lease, ``-x``) the session-scoped tunnels are torn down by pytest's runner in its
        own ``pytest_sessionfinish``; the driver restore and the page come after them, so the
        page says what the teardowns did or left."""
        self.judge_nothing_measured(session)
        for part in self.ctx.in_order():
            part.finish(self.ctx, session)
        try:
            self.write_page_and_allure_files()
        except Exception as exc:  # the run's verdict stands; the page's failure is said loudly
            sys.stderr.write(f"\nmeasurement page not written: {type(exc).__name__}: {exc}\n")

    def judge_nothing_measured(self, session: pytest.Session) -> None:
        """A run whose selected acceptance tests were ALL skipped (the model missing, the
        lab file lacking a port or tunnel they need, ...) measured nothing: it exits
        NOTHING_MEASURED, not 0, and says why in one line. A run that already failed keeps
        its status."""
        skipped = self.entries.not_run()
        if not self.entries or len(skipped) != len(self.entries.by_nodeid) or session.exitstatus != 0:
            return
        reasons = Counter(str(e.get("reason") or "no reason given") for e in skipped)
        why = "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common(2))
        more = f"; and {len(reasons) - 2} other reason(s)" if len(reasons) > 2 else ""
        code = int(HilExitCode.NOTHING_MEASURED)
        self.nothing_measured = (f"nothing measured: all {len(skipped)} selected acceptance test(s) were skipped "
                                 f"({why}{more}): exit {code}")
        session.exitstatus = code

    def write_page_and_allure_files(self) -> Path | None:
        """The measurement page (the context's page document: the run's facts, its tests, the
        plugins' sections; rendered and written once) and Allure's run-level files."""
        config = self.config
        if not self.entries and not HOLDS.losses:  # a run stopped by a lost lease still says so
            return None
        facts = self.hardware_facts()
        finished = _dt.datetime.now(_dt.timezone.utc)
        lab = self.ctx.lab
        notes = ([f"virtual lab {lab.prefix}: every figure was counted from packets that crossed its namespaces"]
                 if lab is not None and self.ctx.lab_owned else [])
        notes += [f"{name}: driver build not read: {why}" for name, why in facts.unreadable]
        notes.append(self.entries.timing_note((finished - self.started).total_seconds()))
        run = RunInfo(
            title=f"IPsec offload acceptance, {self.topology.lab.name} lab",
            topology=str(self.topology.source or ""),
            virtual=bool(self.topology.lab.virtual),
            started=self.started,
            finished=finished,
            command=command_line(config),
            hardware=list(facts.appliances),
            notes=notes,
            verdict=([self.nothing_measured] if self.nothing_measured else [])
            + [line for lines in config.hook.pytest_hil_page_verdict(config=config) for line in (lines or [])],
            lab_state=[line for lines in config.hook.pytest_hil_page_lab_state(config=config) for line in (lines or [])],
        )
        page = self.ctx.page
        page.run, page.entries = run, self.entries.page_entries()
        notes.append(history.annotate(reports_dir(config), self.topology.lab.name, page.entries, self.started.isoformat()))
        for section in config.hook.pytest_hil_page_sections(config=config):
            page.add(section)
        alluredir = getattr(config.option, "allure_report_dir", None)
        path = page.write(reports_dir(config), name=PAGE_NAME, allure_results=alluredir)
        self.page_path = path
        if alluredir:
            extra: dict[str, str] = {}
            for values in config.hook.pytest_hil_allure_environment(config=config):
                extra.update(values or {})
            write_allure_files(alluredir, run, environment=extra)
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(f"measurement page: {path}")
        return path
