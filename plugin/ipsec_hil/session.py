"""The run's controller: one :class:`HilSession` object, registered with pytest's plugin manager.

Why one object (as pytest-xdist registers its DSession): what happens once per run belongs
to the controller (pytest without xdist, or xdist's controller) and must stay out of the
workers -- the virtual lab's life, the hardware facts, every test's record and the page.
Held by one object, that state has one owner, and its hooks run only where it is
registered:

- created by ``ipsec_hil.pytest_plugin``'s ``pytest_configure`` (after the topology loaded);
- ``pytest_sessionstart`` (tryfirst), in this order: a ``-m`` naming an unknown marker is
  a usage error (before any lab is touched); if the run executes acceptance tests and the
  topology is a virtual lab, start it (exit :attr:`HilExitCode.LAB_NOT_UP` when it does
  not come up) and from then on use its resolved lab file (xdist workers get its path
  through ``workerinput``); ``pytest_hil_lab_ready`` (``--driver`` deploys the build
  under test); then read every appliance's driver build and kernel once
  (:func:`ipsec_hil.lab.live_lab.read_hardware`) -- the report header, the page and the
  gate's comparison use these facts;
- ``pytest_runtest_logreport``: every acceptance test's outcome and record (carried from
  workers in the reports' user_properties, see ipsec_hil.records);
- ``pytest_sessionfinish`` (trylast: after the gate compared and the driver was restored):
  the page, with the sections plugins give through ``pytest_hil_page_sections``, and
  Allure's run-level files (controller-side, after the workers: see the reference on
  ``--clean-alluredir`` wiping files written earlier);
- ``pytest_unconfigure``: stop the virtual lab (unless ``--keep-tunnels``).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shlex
import sys
from pathlib import Path

import pytest

from ipsec_hil import markers, places, records, virtual_lab
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.errors import LabError, TopologyError
from ipsec_hil.lab.live_lab import HardwareFacts, read_hardware
from ipsec_hil.lab.reporting.report import RunInfo, write_allure_files, write_page
from ipsec_hil.lab.topology import Topology, load_topology

log = logging.getLogger(__name__)

#: The lab file as given (``--topology``) and where it is; set in every process.
TOPOLOGY_KEY = pytest.StashKey[Topology]()
TOPOLOGY_PATH_KEY = pytest.StashKey[Path]()
#: The topology tests run against (a virtual lab's resolved file); set in every process.
ACTIVE_TOPOLOGY_KEY = pytest.StashKey[Topology]()
#: The running virtual lab (controller), for plugins that inject faults or reboot it.
VIRTUAL_LAB_KEY = pytest.StashKey["virtual_lab.VirtualLab | None"]()

#: The name HilSession is registered under (``config.pluginmanager.get_plugin(PLUGIN_NAME)``).
PLUGIN_NAME = "hil_session"
ACCEPTANCE_DIR = "tests_hil"
#: The acceptance tests' import package (tests_hil/ in a checkout, shipped in the wheel).
ACCEPTANCE_PACKAGE = "ipsec_hil_acceptance"
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


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


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


def is_running_lab(topology: Topology) -> bool:
    """A virtual lab file whose appliances all have management access filled in is the
    resolved file of a lab that is already running (``python -m ipsec_hil_twin up`` wrote it): use it
    as it is, like a hardware lab, instead of starting another one."""
    apps = topology.appliances()
    return bool(apps) and all(h.mgmt.address for h in apps)


def active_topology(config: pytest.Config) -> Topology:
    """The topology tests run against (for a virtual lab: its resolved lab file)."""
    topology = config.stash.get(ACTIVE_TOPOLOGY_KEY, None) or config.stash.get(TOPOLOGY_KEY, None)
    if topology is None:
        raise pytest.UsageError("no lab topology: give --topology FILE (or the ini key hil_topology)")
    return topology


def hil_session(config: pytest.Config) -> HilSession | None:
    """The controller's HilSession (None in an xdist worker, or before configure)."""
    return config.pluginmanager.get_plugin(PLUGIN_NAME)


def virtual_lab_of(config: pytest.Config) -> virtual_lab.VirtualLab | None:
    """The running virtual lab, known to the controller and (by its resolved file) workers."""
    lab = config.stash.get(VIRTUAL_LAB_KEY, None)
    if lab is not None:
        return lab
    wi = getattr(config, "workerinput", None)
    if wi and wi.get("hil_resolved"):
        resolved = Path(wi["hil_resolved"])
        run_dir = resolved.parent
        return virtual_lab.VirtualLab(Path(""), resolved, run_dir.name, run_dir)
    # a lab started by hand (python -m ipsec_hil_twin up) and given as --topology RESOLVED: its run
    # directory holds the file, so lab controls (faults, twin seq) reach it the same way
    topology = config.stash.get(ACTIVE_TOPOLOGY_KEY, None)
    source = getattr(topology, "source", None)
    if (topology is not None and topology.lab.virtual and is_running_lab(topology) and source is not None
            and source.name == virtual_lab.RESOLVED_NAME):
        return virtual_lab.VirtualLab(Path(""), source, source.parent.name, source.parent)
    return None


def configure_worker(config: pytest.Config, topology: Topology) -> None:
    """An xdist worker tests against the lab its controller started (the resolved file)."""
    resolved = config.workerinput.get("hil_resolved")
    active = load_topology(Path(resolved)) if resolved else topology
    if active.lab.labgrid is not None and wants_lab(config):
        active = places.claim_place(config, active)  # every worker holds its own place
    config.stash[ACTIVE_TOPOLOGY_KEY] = active
    config.stash[VIRTUAL_LAB_KEY] = None


class HilSession:
    """Controller-only state of one run (see the module's docstring for its hooks)."""

    def __init__(self, config: pytest.Config, topology: Topology, path: Path) -> None:
        self.config = config
        self.configured = topology
        self.path = path
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self.lab: virtual_lab.VirtualLab | None = None
        self.topology = topology
        self.entries = records.Entries()
        self._facts: HardwareFacts | None = None
        self.page_path: Path | None = None
        config.stash[VIRTUAL_LAB_KEY] = None
        config.stash[ACTIVE_TOPOLOGY_KEY] = topology

    # ------------------------------------------------------------ the lab

    def start_lab_if_virtual(self) -> None:
        """Start the virtual lab when the topology is one; exit LAB_NOT_UP when it does not come up."""
        config = self.config
        if self.configured.lab.labgrid is not None:  # the coordinator hands out running appliances
            if not places.holds_places_per_worker(config):
                self.topology = places.claim_place(config, self.configured)
        elif self.configured.lab.virtual and not is_running_lab(self.configured):
            try:
                self.lab = virtual_lab.start(self.path, owner_pid=os.getpid())
            except LabError as exc:
                pytest.exit(f"virtual lab: {exc}", returncode=HilExitCode.LAB_NOT_UP)
            config.stash[VIRTUAL_LAB_KEY] = self.lab
            try:
                self.topology = load_topology(self.lab.resolved)
            except TopologyError as exc:
                virtual_lab.stop(self.lab)
                pytest.exit(f"virtual lab: its resolved lab file is invalid:\n{exc}", returncode=HilExitCode.LAB_NOT_UP)
        config.stash[ACTIVE_TOPOLOGY_KEY] = self.topology

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        if self.lab is not None:
            node.workerinput["hil_resolved"] = str(self.lab.resolved)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.lab is None:
            return
        if config.getoption("--keep-tunnels", False):
            sys.stderr.write(
                f"\n*** --keep-tunnels: the virtual lab {self.lab.prefix} keeps running "
                f"(run dir {self.lab.run_dir}); remove it with: python -m ipsec_hil_twin down --prefix {self.lab.prefix}\n"
            )
            return
        try:
            virtual_lab.stop(self.lab)
        except LabError as exc:
            sys.stderr.write(f"\nvirtual lab teardown failed: {exc}\n")

    # ------------------------------------------------------------ hardware facts, read once

    def hardware_facts(self) -> HardwareFacts:
        """Every appliance's driver build and kernel, read the first time they are asked for."""
        if self._facts is None and self.configured.lab.labgrid is not None and places.holds_places_per_worker(self.config):
            self._facts = HardwareFacts(unreadable=(("appliances", "held by the xdist workers' labgrid places; "
                                                     "each worker's tests read them"),))
        if self._facts is None:
            try:
                self._facts = read_hardware(self.topology)
            except LabError as exc:
                self._facts = HardwareFacts(unreadable=(("appliances", f"not reachable ({exc})"),))
        return self._facts

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Marker check, lab up, build under test deployed, hardware facts read -- in this order."""
        config = session.config
        markers.check_expression(config)
        if not wants_lab(config):
            return
        self.start_lab_if_virtual()
        config.hook.pytest_hil_lab_ready(session=session)
        self.hardware_facts()

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """Which lab, and on each appliance the driver module (name, md5, size) and kernel."""
        lines = []
        if self.lab is not None:
            lines.append(f"virtual lab: {self.lab.prefix} (run dir {self.lab.run_dir})")
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

    def pytest_hil_page_sections(self, config: pytest.Config) -> str | None:
        return self.entries.known_issues_section()

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        lines = self.entries.known_issue_lines()
        if lines:
            terminalreporter.section("known issues")
            for line in lines:
                terminalreporter.write_line(line)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        try:
            self.write_page_and_allure_files()
        except Exception as exc:  # the run's verdict stands; the page's failure is said loudly
            sys.stderr.write(f"\nmeasurement page not written: {type(exc).__name__}: {exc}\n")

    def write_page_and_allure_files(self) -> Path | None:
        """The measurement page (with the plugins' sections) and Allure's run-level files."""
        config = self.config
        if not self.entries:
            return None
        facts = self.hardware_facts()
        finished = _dt.datetime.now(_dt.timezone.utc)
        notes = ([f"virtual lab {self.lab.prefix}: every figure was counted from packets that crossed its namespaces"]
                 if self.lab else [])
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
            verdict=[line for lines in config.hook.pytest_hil_page_verdict(config=config) for line in (lines or [])],
        )
        path = write_page(run, self.entries.page_entries(), reports_dir(config), name=PAGE_NAME,
                          allure_results=getattr(config.option, "allure_report_dir", None))
        sections = [s for s in config.hook.pytest_hil_page_sections(config=config) if s]
        if sections:
            records.append_sections(path, sections)
        self.page_path = path
        alluredir = getattr(config.option, "allure_report_dir", None)
        if alluredir:
            write_allure_files(alluredir, run)
            extra: dict[str, str] = {}
            for values in config.hook.pytest_hil_allure_environment(config=config):
                extra.update(values or {})
            records.append_allure_environment(Path(alluredir), extra)
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(f"measurement page: {path}")
        return path
