"""The suite's pytest glue: options, markers, topology loading, skip-by-hardware.

Thin on purpose (library first): everything that talks to a lab lives in ``plugin.lab``;
this module only registers what pytest needs and decides which tests the topology can
run. Fixtures live in ``plugin.fixtures`` (imported at the bottom of this module).

Topology: loaded once per process from ``--topology`` (default ``topologies/virtual.yaml``
relative to the rootdir). The xdist controller loads and validates it first (a bad file
stops the run with its ``FILE:LINE: ...`` message before any worker starts) and hands the
path to workers through ``workerinput``. Retrieve it with :func:`get_topology`.
"""

from __future__ import annotations

import os
import secrets
import shlex
from pathlib import Path

import pytest

from plugin.lab.errors import TopologyError
from plugin.lab.topology import Topology, load_topology

TOPOLOGY_KEY = pytest.StashKey[Topology]()
TOPOLOGY_PATH_KEY = pytest.StashKey[Path]()

#: Hardware markers: a test carrying one needs an appliance of that model in the topology.
HARDWARE_MARKERS = ("xgs136", "xgs3300")

MARKERS = (
    "xgs136: needs an XGS 136 (driver npuep) in the topology; `pytest -m xgs136` runs what applies to it",
    "xgs3300: needs an XGS 3300 (driver octep) in the topology",
    "outer_v6: the tunnel's outer header is IPv6",
    "inner_v6: IPv6 packets inside the tunnel",
    "gcm: AES-GCM-16-256 (aes-gcm-16)",
    "cbc: AES-CBC-256 with HMAC-SHA-256-128 (aes-cbc-hmac-sha256)",
    "forwarded: traffic forwarded through the appliance (from the bench), not its own",
    "six_children: a connection with six children, one per TCP port",
    "throughput: a throughput measurement (slow; floors, not exact values)",
    "page(name): the measurement page (seed) a test reproduces, e.g. page('000')",
)

DEFAULT_TOPOLOGY = "topologies/virtual.yaml"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil", "IPsec offload hardware-in-the-loop")
    group.addoption(
        "--topology",
        metavar="FILE",
        default=None,
        help=f"lab topology YAML (default: {DEFAULT_TOPOLOGY} relative to the rootdir, "
        "the virtual lab)",
    )
    group.addoption(
        "--keep-tunnels",
        action="store_true",
        default=False,
        help="leave tunnels up (and the virtual lab running) after the run, for debugging",
    )
    group.addoption(
        "--traffic-seconds",
        metavar="FLOAT",
        type=float,
        default=1.0,
        help="scale factor for every traffic duration (1.0 = the pages' durations)",
    )


def _topology_path(config: pytest.Config) -> Path:
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "hil_topology" in workerinput:
        return Path(workerinput["hil_topology"])
    opt = config.getoption("--topology")
    if opt is None:
        return Path(config.rootpath) / DEFAULT_TOPOLOGY
    p = Path(opt)
    if not p.is_absolute():
        # Relative to where pytest was started, like any file argument; the default is
        # relative to the rootdir so it works from any directory.
        p = Path(config.invocation_params.dir) / p
    return p


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
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    path = _topology_path(config)
    config.stash[TOPOLOGY_PATH_KEY] = path
    try:
        topology = load_topology(path)
    except TopologyError as exc:
        raise pytest.UsageError(f"invalid topology:\n{exc}") from None
    except FileNotFoundError:
        raise pytest.UsageError(f"topology file not found: {path}") from None
    config.stash[TOPOLOGY_KEY] = topology
    _give_virtual_lab_psks(topology)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller -> worker: the topology file the controller validated, and loadgroup."""
    path = node.config.stash.get(TOPOLOGY_PATH_KEY, None)
    if path is not None:
        node.workerinput["hil_topology"] = str(path)
    node.workerinput["hil_loadgroup"] = getattr(node.config.option, "dist", None) == "loadgroup"


def _dist_given(config: pytest.Config) -> bool:
    """Did the user choose an xdist mode (--dist/-d on the command line, PYTEST_ADDOPTS, addopts)?"""
    args = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
            *config.getini("addopts")]
    return any(a == "-d" or a == "--dist" or a.startswith("--dist=") for a in args)


def pytest_cmdline_main(config: pytest.Config) -> None:
    """``-n N`` means ``--dist loadgroup`` unless the user chose a mode.

    Why: tests of one connected set of appliances carry ``xdist_group(<set>)`` (see
    plugin.fixtures.appliance_groups); only loadgroup keeps a group on one worker, so a
    tunnel is built once and no two workers drive one appliance. Runs after xdist's own
    tryfirst hook, which turned ``-n`` into ``dist="load"``.
    """
    if getattr(config.option, "dist", None) == "load" and not _dist_given(config):
        config.option.dist = "loadgroup"
    # A worker re-parses the command line (dist "no"), so xdist's worker side would not add
    # the @group suffix the scheduler groups by: the controller's choice comes via workerinput.
    wi = getattr(config, "workerinput", None)
    if wi and wi.get("hil_loadgroup"):
        config.option.loadgroup = True


def get_topology(config: pytest.Config) -> Topology:
    """The loaded :class:`plugin.lab.topology.Topology` of this run."""
    return config.stash[TOPOLOGY_KEY]


def pytest_report_header(config: pytest.Config) -> list[str]:
    topology = config.stash.get(TOPOLOGY_KEY, None)
    path = config.stash.get(TOPOLOGY_PATH_KEY, None)
    if topology is None:
        return [f"topology: {path} (not loaded)"]
    models = sorted({h.model for h in topology.appliances()})
    kind = "virtual" if topology.lab.virtual else "hardware"
    return [f"topology: {topology.lab.name} ({kind}) from {path}; appliances: {', '.join(models)}"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, with the reason, a test whose hardware the topology does not have.

    Skipped rather than deselected so the report shows what did not run and why.
    """
    topology = config.stash.get(TOPOLOGY_KEY, None)
    if topology is None:
        return
    present = {h.model for h in topology.appliances()}
    for item in items:
        for model in HARDWARE_MARKERS:
            if item.get_closest_marker(model) is not None and model not in present:
                item.add_marker(
                    pytest.mark.skip(reason=f"topology {topology.lab.name} has no {model}")
                )
                break


# Fixtures and run-level glue are plugins of their own (root conftest's pytest_plugins):
# plugin.fixtures (lab, appliances, bench, tunnels), plugin.session (the virtual lab's life,
# the page), plugin.records (what each test measured).
