"""Run-level glue: the virtual lab's life, the active topology, the page and Allure files.

Why a module of its own: these are the hooks that run once per run in the controller
(pytest without xdist, or xdist's controller), and they must stay out of the workers:
- ``pytest_configure``: if the topology is a virtual lab, start it (once, also under xdist)
  and from then on use its resolved lab file; hand that path to xdist workers.
- ``pytest_unconfigure``: stop it (unless ``--keep-tunnels``).
- ``pytest_sessionfinish``: turn every test's record (carried from the workers in the
  reports' user_properties, see plugin.records) into the measurement page in ``reports/``, and write Allure's environment, executor and
  categories files (controller-side, after the workers: see the reference on
  ``--clean-alluredir`` wiping files written earlier).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shlex
import sys
from pathlib import Path

import pytest

from plugin import virtual_lab
from plugin.lab.errors import LabError, TopologyError
from plugin.lab.topology import Topology, load_topology

log = logging.getLogger(__name__)

ACTIVE_TOPOLOGY_KEY = pytest.StashKey[Topology]()
VIRTUAL_LAB_KEY = pytest.StashKey["virtual_lab.VirtualLab | None"]()
STARTED_KEY = pytest.StashKey[_dt.datetime]()

#: Exit code when the lab cannot be brought up (pytest uses 0-6).
LAB_UP_FAILED = 17


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


ACCEPTANCE_DIR = "tests_hil"


def _wants_lab(config: pytest.Config) -> bool:
    """Only a run that executes acceptance tests needs a lab: not --help, --markers or
    --collect-only, and not a run of the project's own tests (``pytest tests/``). The
    paths pytest was given (or ``testpaths``) tell: one inside tests_hil/, or a folder
    that contains it, selects acceptance tests."""
    opt = config.option
    if any(getattr(opt, name, False) for name in ("help", "markers", "collectonly", "showfixtures", "version")):
        return False
    acceptance = (Path(config.rootpath) / ACCEPTANCE_DIR).resolve()
    for arg in config.args or [str(config.invocation_params.dir)]:
        path = (Path(config.invocation_params.dir) / arg.split("::", 1)[0]).resolve()
        if path == acceptance or acceptance in path.parents or path in acceptance.parents:
            return True
    return False


def reports_dir(config: pytest.Config) -> Path:
    return Path(config.rootpath) / "reports"


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    from plugin.pytest_plugin import TOPOLOGY_KEY, TOPOLOGY_PATH_KEY

    config.stash[STARTED_KEY] = _dt.datetime.now(_dt.timezone.utc)
    config.stash[VIRTUAL_LAB_KEY] = None
    topology = config.stash.get(TOPOLOGY_KEY, None)
    if topology is None:
        return
    if _is_worker(config):
        resolved = config.workerinput.get("hil_resolved")
        config.stash[ACTIVE_TOPOLOGY_KEY] = load_topology(Path(resolved)) if resolved else topology
        return
    active = topology
    if topology.lab.virtual and _wants_lab(config) and not is_running_lab(topology):
        try:
            lab = virtual_lab.start(config.stash[TOPOLOGY_PATH_KEY], owner_pid=os.getpid())
        except LabError as exc:
            pytest.exit(f"virtual lab: {exc}", returncode=LAB_UP_FAILED)
        config.stash[VIRTUAL_LAB_KEY] = lab
        try:
            active = load_topology(lab.resolved)
        except TopologyError as exc:
            virtual_lab.stop(lab)
            pytest.exit(f"virtual lab: its resolved lab file is invalid:\n{exc}", returncode=LAB_UP_FAILED)
    config.stash[ACTIVE_TOPOLOGY_KEY] = active


def is_running_lab(topology: Topology) -> bool:
    """A virtual lab file whose appliances all have management access filled in is the
    resolved file of a lab that is already running (``python -m twin up`` wrote it): use it
    as it is, like a hardware lab, instead of starting another one."""
    apps = topology.appliances()
    return bool(apps) and all(h.mgmt.address for h in apps)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    lab = node.config.stash.get(VIRTUAL_LAB_KEY, None)
    if lab is not None:
        node.workerinput["hil_resolved"] = str(lab.resolved)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_worker(config):
        return
    lab = config.stash.get(VIRTUAL_LAB_KEY, None)
    if lab is None:
        return
    if config.getoption("--keep-tunnels", False):
        sys.stderr.write(
            f"\n*** --keep-tunnels: the virtual lab {lab.prefix} keeps running "
            f"(run dir {lab.run_dir}); remove it with: python -m twin down --prefix {lab.prefix}\n"
        )
        return
    try:
        virtual_lab.stop(lab)
    except LabError as exc:
        sys.stderr.write(f"\nvirtual lab teardown failed: {exc}\n")


def active_topology(config: pytest.Config) -> Topology:
    """The topology tests run against (for a virtual lab: its resolved lab file)."""
    from plugin.pytest_plugin import TOPOLOGY_KEY

    return config.stash.get(ACTIVE_TOPOLOGY_KEY, None) or config.stash[TOPOLOGY_KEY]


def virtual_lab_of(config: pytest.Config) -> "virtual_lab.VirtualLab | None":
    """The running virtual lab, known to the controller and (by its resolved file) workers."""
    lab = config.stash.get(VIRTUAL_LAB_KEY, None)
    if lab is not None:
        return lab
    wi = getattr(config, "workerinput", None)
    if wi and wi.get("hil_resolved"):
        resolved = Path(wi["hil_resolved"])
        run_dir = resolved.parent
        return virtual_lab.VirtualLab(Path(""), resolved, run_dir.name, run_dir)
    return None


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which lab, and on each appliance the driver module (name, md5, size) and kernel."""
    lines = []
    lab = config.stash.get(VIRTUAL_LAB_KEY, None)
    if lab is not None:
        lines.append(f"virtual lab: {lab.prefix} (run dir {lab.run_dir})")
    if ACTIVE_TOPOLOGY_KEY not in config.stash or not _wants_lab(config):
        return lines
    from plugin.fixtures import build_appliances
    from plugin.lab.report import hardware_info

    try:
        apps, hosts = build_appliances(active_topology(config))
    except LabError as exc:
        return lines + [f"appliances: not reachable ({exc})"]
    try:
        for app in apps.values():
            try:
                hw = hardware_info(app)
                size = f"{hw.module_size:,} bytes" if hw.module_size is not None else "size ?"
                state = "loaded" if hw.module_loaded else "NOT loaded"
                lines.append(f"{app.name} ({hw.model}): {hw.driver} md5 {hw.module_md5 or '?'}, {size}, "
                             f"{state}; kernel {hw.kernel}")
            except LabError as exc:
                lines.append(f"{app.name}: cannot read the driver build: {exc}")
    finally:
        for h in hosts.values():
            h.close()
    return lines


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _is_worker(config):
        return
    from plugin import records

    try:
        records.write_page_and_allure_files(config, config.stash[STARTED_KEY])
    except Exception as exc:  # the run's verdict stands; the page's failure is said loudly
        sys.stderr.write(f"\nmeasurement page not written: {type(exc).__name__}: {exc}\n")


def command_line(config: pytest.Config) -> str:
    return " ".join(shlex.quote(a) for a in ["pytest", *config.invocation_params.args])
