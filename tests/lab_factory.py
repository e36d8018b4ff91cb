"""One virtual lab for a test module: the project's tests start it the way the plugin does.

Why one factory: five test folders each had their own "run ``python -m ipsec_hil_twin up``, parse
its JSON line, build Appliances, ``twin down`` in finally" -- each with its own idea of
the prefix, the run dir, the owner pid and what counts as a clean teardown. They now all
go through :func:`ipsec_hil.virtual_lab.start` / :func:`~ipsec_hil.virtual_lab.stop` (the
plugin's own path, so a test lab and a suite run's lab cannot drift apart) and
:func:`lab_fixture` below, which makes the module-scoped pytest fixture:

    lab = lab_fixture(components=("engine", "sshd"))           # in a test module
    vlab = lab_fixture(name="vlab", prepare=seed)              # in a conftest
    mini = minilab_fixture(name="mini", wan_rate_mbit=250)     # the engine alone (MiniLab)

A lab is expensive (namespaces, engines, IKE daemons, sshd: seconds of CPU each), so it
is shared by every test of the module and torn down after the last one; a teardown that
leaves a namespace of its prefix behind fails the module's last test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import pytest

from ipsec_hil import virtual_lab
from ipsec_hil.virtual_lab import VirtualLab

REPO = Path(__file__).resolve().parents[1]
VIRTUAL_TOPOLOGY = REPO / "topologies" / "virtual.yaml"
ACCEPTANCE = "tests_hil"


def namespaces_of(prefix: str) -> list[str]:
    """The network namespaces whose name starts with ``prefix`` (``ip netns list``)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith(prefix)]


@dataclass(frozen=True)
class TestLab(VirtualLab):
    """A running virtual lab as a test sees it: the plugin's :class:`VirtualLab` (its
    files, prefix and ``twin()``) plus what tests read.

    ``topo`` is the resolved lab file loaded by the suite's own loader; ``apps`` the
    appliances over SSH, made on first use and closed by :meth:`close`; ``namespaces``
    the twin's host -> namespace map (lab.json)."""

    __test__ = False  # a helper, not a test class

    _opened: dict = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def topo(self):
        from ipsec_hil.lab.topology import load_topology
        from ipsec_hil.lab.expectations.hardware import REGISTRY

        return load_topology(self.resolved, models=REGISTRY)

    @cached_property
    def namespaces(self) -> dict[str, str]:
        import json

        return json.loads((self.run_dir / "lab.json").read_text())["namespaces"]

    @cached_property
    def apps(self) -> dict:
        """Every appliance of the lab file, connected over SSH as the suite connects."""
        from ipsec_hil.lab.appliance import Appliance
        from ipsec_hil.lab.expectations.hardware import host_profile
        from ipsec_hil.lab.remote import host_from_mgmt

        topo = self.topo
        self._opened.update({n: Appliance(n, host_from_mgmt(n, h.mgmt, topo.lab.known_hosts), host_profile(h),
                                          ports=tuple(h.ports))
                             for n, h in topo.hosts.items() if h.role == "appliance"})
        return self._opened

    def root(self, host: str) -> Path:
        """The appliance's file system root inside the run dir (its /usr/local/etc, /boot...)."""
        return self.run_dir / "hosts" / host / "root"

    def attach(self):
        """The twin's own in-process handle on this lab (faults, control requests)."""
        from ipsec_hil_twin.lifecycle.lab import Lab

        return Lab.attach(run_dir=self.run_dir)

    def close(self) -> None:
        """Close the SSH connections, stop the lab, and check no namespace of it remains."""
        for app in self._opened.values():
            app.host.close()
        self._opened.clear()
        virtual_lab.stop(self)
        left = namespaces_of(self.prefix)
        assert not left, f"twin down {self.prefix} left network namespaces behind: {left}"


#: The rate of a lab whose figures must not depend on the neighbour (``lab_fixture(rate_mbit=
#: QUIET_RATE_MBIT)``): about a third of what the engine carries on a busy machine (120-150
#: Mbit/s, topologies/virtual.yaml). Used where a test compares figures or holds a healthy
#: run to its floor (parent against candidate, the gate's baseline repeats) and for the fault
#: matrix's labs, whose cells do not depend on the rate while the engines' CPU does (issue
#: 15: the XGS 3300 shard took 183 CPU-s at 40, 210 at the default 100/120). Not lower: at
#: 20 the fault matrix's ndr_pdr no longer failed on drop_every{n=50} on either model, and a
#: 20 % slower build's PDR measured x0.926, not a regression (12-04).
QUIET_RATE_MBIT = 40

#: The rate of a lab whose compared figures are TCP streams only (parent against candidate's
#: stream module): a stream is the link's figure at any rate below what the engine carries,
#: so half of :data:`QUIET_RATE_MBIT` halves the engines' per-packet CPU and changes no
#: verdict (issue 15: the 20 % slower build's run took 25.3 CPU-s at 20 against 33.4 at 40,
#: and read x0.803). Not for PDR searches or the fault matrix (the reasons above).
QUIET_STREAM_RATE_MBIT = 20


def with_rates(topology: Path, rate_mbit: int, dest: Path) -> Path:
    """A copy of ``topology`` at ``dest`` whose every port and link is ``rate_mbit``.

    Why: on the default lab a TCP stream is as fast as the twin's engines get CPU (two
    cores shared with the other xdist worker's labs), so a figure measured beside a busy
    neighbour moves by tens of percent between trials. Links well below what the engine
    carries on a busy machine (:data:`QUIET_RATE_MBIT`) make every stream the link's
    figure, not the neighbour's: a test that compares figures then sees the builds, not
    the machine."""
    import yaml

    data = yaml.safe_load(topology.read_text())
    for host in data["hosts"].values():
        for port in (host.get("ports") or {}).values():
            port["rate_mbit"] = rate_mbit
    for link in data["links"]:
        link["rate_mbit"] = rate_mbit
    dest.write_text(f"# {topology.name} with every port and link at {rate_mbit} Mbit/s (tests/lab_factory.py)\n"
                    + yaml.safe_dump(data, sort_keys=False))
    return dest


def start_lab(tmp_path_factory: pytest.TempPathFactory, *, topology: Path = VIRTUAL_TOPOLOGY,
              components: Sequence[str] | None = None, rate_mbit: int | None = None) -> TestLab:
    """Start a lab owned by this pytest process, its run dir under pytest's basetemp.

    ``rate_mbit``: every port and link of the topology at that rate (:func:`with_rates`)."""
    base = tmp_path_factory.mktemp("lab")
    run_dir = base / "run"
    if rate_mbit is not None:
        topology = with_rates(topology, rate_mbit, base / topology.name)
    try:
        vl = virtual_lab.start(topology, owner_pid=os.getpid(), components=components, run_dir=run_dir)
    except virtual_lab.VirtualLabError as exc:
        pytest.fail(f"virtual lab did not come up: {exc}", pytrace=False)
    return TestLab(**asdict(vl))


def lab_fixture(*, name: str = "lab", topology: Path = VIRTUAL_TOPOLOGY,
                components: Sequence[str] | None = None,
                prepare: Callable[[TestLab], None] | None = None, rate_mbit: int | None = None):
    """A module-scoped fixture ``name`` yielding a :class:`TestLab` of ``topology``.

    ``components`` limits the twin's components (default: all); ``prepare(lab)`` runs once
    after bring-up (seed an operator's files) before the first test sees the lab;
    ``rate_mbit`` sets every port and link to that rate (:func:`with_rates`)."""

    @pytest.fixture(scope="module", name=name)
    def _lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestLab]:
        if os.geteuid() != 0:
            pytest.skip("needs root (the virtual lab: network namespaces, TUN)")
        lab = start_lab(tmp_path_factory, topology=topology, components=components, rate_mbit=rate_mbit)
        try:
            if prepare is not None:
                prepare(lab)
            yield lab
        finally:
            lab.close()

    return _lab


def minilab_fixture(*, name: str = "lab", engines: bool = True, **minilab: object):
    """A module-scoped fixture ``name`` yielding a built ``ipsec_hil_twin.engine.minilab.MiniLab``
    (hostA | gwA | gwB | hostB, two engines unless ``engines`` is False; ``minilab`` are
    its constructor's keywords),
    its files under pytest's basetemp; closed after the module, and a namespace of its
    prefix left behind fails the module's last test."""

    @pytest.fixture(scope="module", name=name)
    def _minilab(tmp_path_factory: pytest.TempPathFactory):
        from ipsec_hil_twin.engine.minilab import MiniLab

        why = MiniLab.unavailable()
        if why:
            pytest.skip(why)

        lab = MiniLab(base=tmp_path_factory.mktemp("minilab"), **minilab)
        lab.build(engines=engines)  # closes what it built if it fails
        try:
            yield lab
        finally:
            lab.close()
            left = namespaces_of(lab.prefix)
            assert not left, f"MiniLab {lab.prefix} left network namespaces behind: {left}"

    return _minilab


# ------------------------------------------------------------------ the suite in a subprocess


#: what a checkout holds that an acceptance run reads: linked into a scratch rootdir
CHECKOUT_LINKS = ("tests_hil", "conftest.py", "pytest.ini", "topologies")


def scratch_rootdir(path: Path) -> Path:
    """A rootdir of its own for one acceptance run: its reports/ (measurement page, plots,
    baseline comparison) land here, not in the repository's reports/, which other runs
    (a parallel worker's, a user's) write at the same time.

    It looks like a checkout to pytest and the plugin -- ``tests_hil``, ``conftest.py``,
    ``pytest.ini`` and ``topologies`` are links to the repository's -- so node ids, Allure
    suites and the plugin's "this run selects acceptance tests, start a lab" read as in
    the repository itself."""
    path.mkdir(parents=True, exist_ok=True)
    for name in CHECKOUT_LINKS:
        link = path / name
        try:
            link.symlink_to(REPO / name)
        except FileExistsError:
            # made already: by an earlier run in this rootdir, or at the same moment by a
            # parallel part of the fault matrix sharing it (a CI run failed on that race)
            if not (link.is_symlink() and link.resolve() == (REPO / name).resolve()):
                raise
    return path


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of an inner pytest: this repository importable, and nothing of the
    outer run's xdist worker or addopts (an inner run would think it is a worker)."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("PYTEST_XDIST") or k in ("PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def suite_run(args: Sequence[str], rootdir: Path, *, lab: TestLab | None = None, timeout: float = 600.0,
              env: dict[str, str] | None = None, text: bool = True) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS`` on the acceptance suite as a user runs it from a checkout,
    the checkout being ``rootdir`` (made by :func:`scratch_rootdir`): ``tests_hil/...``
    arguments and the default topology resolve there, and so does reports/.

    ``lab``: run on that already running lab (``--topology=`` its resolved file) instead of
    letting the plugin start one of its own, as in any run."""
    cmd = [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "--rootdir", str(rootdir)]
    if lab is not None:
        cmd.append(f"--topology={lab.resolved}")
    return subprocess.run(cmd, cwd=scratch_rootdir(rootdir), env=env if env is not None else subprocess_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=text, timeout=timeout)
