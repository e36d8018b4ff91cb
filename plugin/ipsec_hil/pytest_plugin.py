"""The suite's pytest plugin: options, markers, topology loading, skip-by-hardware.

Loaded from the ``pytest11`` entry point ``ipsec_hil.pytest_plugin`` (pyproject.toml) when the
suite is installed -- so a driver repository that ``pip install``s it runs its own
tests_hil/ -- or, with plugin autoload disabled, by the root conftest.py. The entry
point's name is this module's name: pytest then sees the conftest's ``pytest_plugins``
entry as already registered instead of registering the module twice. It brings in the
suite's other plugins (``pytest_plugins`` below).

Thin on purpose (library first): everything that talks to a lab lives in ``ipsec_hil.lab``.

Configure, in one place and one order (no tryfirst/trylast needed between our modules):
extra model profiles -> markers -> the run's parts (:func:`parts_in_order`, each from its options) ->
the run's context (:class:`ipsec_hil.context.RunContext`): in the controller from the lab
file (parsed once here; a bad file stops the run with its ``FILE:LINE: ...`` message before
any worker starts) with :class:`ipsec_hil.session.HilSession` registered (which, at session
start, checks ``-m``, starts a virtual lab and runs the parts' lab-ready phase); in an xdist
worker from the one ``workerinput`` entry the controller wrote (:func:`pytest_configure_node`).
"""

from __future__ import annotations

import os
import secrets
import shlex
from pathlib import Path

import pytest

from ipsec_hil import config_health, hookspecs, markers, rootdir
from ipsec_hil.context import CONTEXT_KEY, WORKER_INPUT, Part, ProcessRecords, run_context
from ipsec_hil.lab.errors import ProfileError
from ipsec_hil.lab.expectations.hardware import REGISTRY
from ipsec_hil.lab.expectations.profiles_file import load_profiles_file
from ipsec_hil.lab.topology import Topology
from ipsec_hil.session import configure_controller, configure_worker

pytest_plugins = ["ipsec_hil.fixtures", "ipsec_hil.driver_plugin", "ipsec_hil.gate_plugin", "ipsec_hil.compare_plugin",
                  "ipsec_hil.preflight_plugin", "ipsec_hil.throughput_plugin", "ipsec_hil.timeshare_plugin",
                  "ipsec_hil.lease_plugin", "ipsec_hil.recovery_plugin"]

DEFAULT_TOPOLOGY = "topologies/virtual.yaml"


def parts_in_order() -> tuple[type[Part], ...]:
    """The run's parts, in the order the run calls their phases (ipsec_hil.context.Part): at lab
    ready, the bench's lease first (nothing touches the bench before the run holds it), then
    the recovery of what dead runs left (the bench's routes, every appliance's driver and
    tunnel journals: before preflight checks the driver and the run reads its md5), then
    preflight before ``--driver`` deploys (a lab that is not ready fails fast, and
    nothing is deployed onto it); at finish, the candidate comparison while the candidate is
    still loaded, then the driver restores the previous build, then the gate compares the
    run's figures (it needs neither); the time share only speaks in workers.

    Imported here, not at the top: pytest imports these modules itself (``pytest_plugins``
    above, with assertion rewriting) and warns about modules imported before it.
    """
    from ipsec_hil.compare_plugin import ParentRun
    from ipsec_hil.driver_plugin import DriverRun
    from ipsec_hil.gate_plugin import GateRun
    from ipsec_hil.lease_plugin import LeaseHold
    from ipsec_hil.preflight_plugin import Preflight
    from ipsec_hil.recovery_plugin import Recovery
    from ipsec_hil.timeshare_plugin import RunShare

    return (LeaseHold, Recovery, Preflight, ParentRun, DriverRun, GateRun, RunShare)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil", "IPsec offload hardware-in-the-loop")
    group.addoption("--topology", metavar="FILE", default=None,
                    help=f"lab topology YAML, anywhere on disk, ~ expanded (default: the ini key hil_topology, "
                    f"else {DEFAULT_TOPOLOGY} relative to the rootdir: the virtual lab)")
    group.addoption("--hil-profiles", metavar="FILE", action="append", default=[],
                    help="an extra appliance-model profiles file (repeatable; see ipsec_hil.lab.expectations.profiles_file); "
                    "also the ini key hil_profiles")
    group.addoption("--keep-tunnels", action="store_true", default=False,
                    help="leave tunnels up (and the virtual lab running) after the run, for debugging")
    group.addoption("--traffic-seconds", metavar="FLOAT", type=float, default=1.0,
                    help="scale factor for every traffic duration (1.0 = the pages' durations)")
    config_health.add_options(parser, group)
    parser.addini("hil_topology", "lab topology YAML (relative to the ini file)", default=None)
    parser.addini("hil_profiles", "extra appliance-model profiles files (relative to the ini file)",
                  type="paths", default=[])


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str], parser: pytest.Parser) -> None:
    """``--topology FILE`` (space form) must not move the rootdir to FILE's folder (see ipsec_hil.rootdir)."""
    rootdir.redetermine_setup(early_config, args, "topology")


def _user_path(value: str, base: Path) -> Path:
    """A path as a user typed it: ``~`` expanded (the shell leaves it after ``=``), relative to ``base``."""
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else base / p


def topology_path(config: pytest.Config) -> Path | None:
    """The lab file: ``--topology``, ini ``hil_topology``, the default (xdist workers are
    given theirs by the controller, ipsec_hil.context)."""
    opt = config.getoption("--topology")
    if opt is not None:
        # Relative to where pytest was started, like any file argument.
        return _user_path(opt, Path(config.invocation_params.dir))
    ini = config.getini("hil_topology")
    if ini:
        return _user_path(ini, Path(config.inipath.parent if config.inipath else config.rootpath))
    default = Path(config.rootpath) / DEFAULT_TOPOLOGY
    # A run of some other project in the same environment (the plugin autoloads) has none.
    return default if default.exists() else None


def _load_profiles(config: pytest.Config, process: ProcessRecords) -> None:
    files = [_user_path(v, Path(config.invocation_params.dir)) for v in config.getoption("--hil-profiles")]
    files += list(config.getini("hil_profiles"))
    for f in files:
        try:
            for profile in load_profiles_file(f):
                process.add_model(profile, source=str(f))
        except ProfileError as exc:
            raise pytest.UsageError(f"invalid profiles file:\n{exc}") from None


def _give_virtual_lab_psks(topology: Topology) -> None:
    """A virtual lab's tunnels use ``psk: {env: NAME}``; set a random key when unset.

    Done in the controller before workers start, so they inherit the same value.
    The value is never printed.
    """
    if not topology.lab.virtual:
        return
    for tunnel in topology.tunnels.values():
        if tunnel.psk.env and not os.environ.get(tunnel.psk.env):
            os.environ[tunnel.psk.env] = secrets.token_urlsafe(24)


def pytest_configure(config: pytest.Config) -> None:
    process = ProcessRecords.begin()  # first: the parts subscribe to these records
    _load_profiles(config, process)
    markers.register(config)
    parts = tuple(kind.from_config(config) for kind in parts_in_order())
    if hasattr(config, "workerinput"):  # the one place a process learns it is an xdist worker
        configure_worker(config, parts).process = process
        return
    ctx = configure_controller(config, topology_path(config), parts)
    ctx.process = process
    if ctx.configured is not None:
        _give_virtual_lab_psks(ctx.configured)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's process records end last (the session objects' own unconfigure ran)."""
    ctx = config.stash.get(CONTEXT_KEY, None)
    if ctx is not None and ctx.process is not None:
        ctx.process.end()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller -> worker: the run's context as one input (the lab files' paths, the
    virtual lab handle, loadgroup); called after the controller's session start put the lab up."""
    node.workerinput[WORKER_INPUT] = run_context(node.config).to_workerinput(
        loadgroup=getattr(node.config.option, "dist", None) == "loadgroup")


def _dist_given(config: pytest.Config) -> bool:
    """Did the user choose an xdist mode (--dist/-d on the command line, PYTEST_ADDOPTS, addopts)?"""
    args = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
            *config.getini("addopts")]
    return any(a == "-d" or a == "--dist" or a.startswith("--dist=") for a in args)


def pytest_cmdline_main(config: pytest.Config) -> None:
    """``-n N`` means ``--dist loadgroup`` unless the user chose a mode.

    Why: tests of one connected set of appliances carry ``xdist_group(<set>)`` (see
    ipsec_hil.lab.cases.appliance_groups); only loadgroup keeps a group on one worker, so a
    tunnel is built once and no two workers drive one appliance. Runs after xdist's own
    tryfirst hook, which turned ``-n`` into ``dist="load"``.
    """
    if getattr(config.option, "dist", None) == "load" and not _dist_given(config):
        config.option.dist = "loadgroup"
    # A worker re-parses the command line (dist "no"), so xdist's worker side would not add
    # the @group suffix the scheduler groups by: the controller's choice comes via workerinput.
    wi = getattr(config, "workerinput", None)
    if wi and (wi.get(WORKER_INPUT) or {}).get("loadgroup"):
        config.option.loadgroup = True


def get_topology(config: pytest.Config) -> Topology:
    """The loaded :class:`ipsec_hil.lab.topology.Topology` of this run (the lab file as given)."""
    ctx = run_context(config)
    return ctx.configured or ctx.topology()


def pytest_report_header(config: pytest.Config) -> list[str]:
    ctx = run_context(config)
    topology, path = ctx.configured, ctx.configured_path
    if path is None or topology is None:
        return ["topology: none (give --topology FILE or the ini key hil_topology)"]
    models = sorted({h.model for h in topology.appliances()})
    kind = "virtual" if topology.lab.virtual else "hardware"
    return [f"topology: {topology.lab.name} ({kind}) from {path}; appliances: {', '.join(models)}"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test whose hardware the topology does not have is skipped with the reason.

    Skipped rather than deselected so the report shows what did not run and why (and a run
    in which every test is skipped so exits NOTHING_MEASURED, ipsec_hil.session).
    """
    topology = run_context(config).active
    if topology is None:
        return
    present = {h.model for h in topology.appliances()}
    for item in items:
        for model in REGISTRY.names():
            if item.get_closest_marker(model) is not None and model not in present:
                item.add_marker(pytest.mark.skip(reason=f"topology {topology.lab.name} has no {model}"))
                break


__all__ = ["get_topology", "topology_path", "DEFAULT_TOPOLOGY", "parts_in_order"]
