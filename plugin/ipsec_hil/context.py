"""One run context: which lab, which lab handle, and every part's per-run state, in one object.

Why one object: the ``--topology`` value used to be parsed in four places on its way to the
appliances (and twice more in each xdist worker); "which topology is active" lived in four
stash keys and three session attributes; the virtual lab handle was rebuilt three ways;
five plugin modules kept per-run state in stash dataclasses of their own, each guarding
against worker processes by hand, and the order of their ``pytest_sessionfinish`` rested
on tryfirst/trylast. Now:

- :class:`RunContext` holds the configured topology (the lab file as given), the active one
  (the file tests run against: a virtual lab's resolved file, or the file with a labgrid
  place's access applied), the virtual lab handle (:class:`ipsec_hil.virtual_lab.VirtualLab`)
  and the parts (:class:`Part`: the driver under test, the gate, the candidate comparison,
  the time share, preflight), in the order their phases run;
- it is created once per process by ``ipsec_hil.pytest_plugin``'s ``pytest_configure``: in
  the controller from the options (the lab file parsed once), in an xdist worker from the
  one ``workerinput`` entry :data:`WORKER_INPUT` the controller wrote
  (:meth:`RunContext.to_workerinput`): the worker parses the active file once and nothing
  else;
- it is the only thing the suite keeps in ``config.stash`` (:data:`CONTEXT_KEY`);
- it begins and ends the process-wide records the library keeps (:class:`ProcessRecords`:
  the leases' losses, the fences, the time share, the dead runs found, the last load's end,
  the models a profiles file added), which stay module-level objects because library code
  reaches them without a context (from a Python prompt too);
- it owns the process's connected lab (:meth:`RunContext.live_lab`, an
  ``ipsec_hil.lab.live_lab.Lab``): connected on first use, once the active lab is settled,
  and handed to every part and fixture that talks to the appliances (the bench's lease,
  the recovery of dead runs, preflight, the driver under test, the candidate comparison,
  the hardware facts, the ``lab`` fixture); closed once (:meth:`RunContext.close_lab`) by
  the session objects when the run ends. An xdist worker is a process of its own: it
  connects its own lab, the first time one of its tests asks for it;
- it holds the run's page (:class:`ipsec_hil.lab.reporting.page.PageDocument`, the
  controller's): the run's facts and tests, and the sections the parts add, rendered and
  written once at the run's end;
- the controller (``ipsec_hil.session.HilSession``) runs the parts' phases in the parts'
  order -- :meth:`Part.lab_ready` after the lab is up, :meth:`Part.finish` after the last
  test and before the page, :meth:`Part.close` on every exit path before the lab stops; a
  worker (``ipsec_hil.session.WorkerSession``) runs only :meth:`Part.worker_finish`. Which
  process a phase runs in is decided once, by which of the two is registered, not by a
  guard in each part.

Library code: usable from a Python prompt without a pytest run (``RunContext.load(path)``).
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ipsec_hil import config_health, records
from ipsec_hil.lab import topology as topology_files
from ipsec_hil.lab.dead_runs import FOUND, Found
from ipsec_hil.lab.expectations.hardware import REGISTRY, HardwareProfile
from ipsec_hil.lab.measuring import quiet
from ipsec_hil.lab.remote import fence
from ipsec_hil.lab.sharing.holds import HOLDS, Holds
from ipsec_hil.lab.timeshare import SHARE, TimeShare
from ipsec_hil.lab.live_lab import Lab
from ipsec_hil.lab.reporting.page import PageDocument
from ipsec_hil.lab.sharing.labgrid_claim import PlaceClaim
from ipsec_hil.lab.topology import Topology
from ipsec_hil.virtual_lab import VirtualLab

#: The one ``workerinput`` entry a worker rebuilds its context from (a dict of strings).
WORKER_INPUT = "hil_context"

P = TypeVar("P", bound="Part")


class Part(abc.ABC):
    """A part of the run that keeps per-run state and takes part in the run's phases.

    The phases are called by the run's session objects (ipsec_hil.session), in the order the
    parts were given to :class:`RunContext` (ipsec_hil.pytest_plugin.parts_in_order says why
    that order). Every phase does nothing unless a part overrides it.
    """

    #: a short name for messages
    name = "part"

    @classmethod
    @abc.abstractmethod
    def from_config(cls, config: pytest.Config) -> Part:
        """The part's state from the run's options (a wrong value: ``pytest.UsageError``)."""

    def lab_ready(self, ctx: RunContext, session: pytest.Session) -> None:
        """Controller: the lab is up, no test has run (preflight checks, ``--driver`` deploys)."""

    def finish(self, ctx: RunContext, session: pytest.Session) -> None:
        """Controller: every test ran; before the page is written (it may set the exit status)."""

    def worker_finish(self, ctx: RunContext, session: pytest.Session, workeroutput: dict[str, Any]) -> None:
        """xdist worker: its last word to the controller (``workeroutput``)."""

    def close(self, ctx: RunContext) -> None:
        """Controller, every exit path (``pytest_unconfigure``), before the virtual lab stops."""


@dataclass
class ProcessRecords:
    """The process-wide records the library keeps, begun and ended by the run (issue 53).

    Why they stay module-level objects: library code reaches them without a run context,
    from a Python prompt as in a run -- a transport checks its host's fence before every
    command (``lab.remote.fence``), a lease's renewal thread records a loss
    (``lab.sharing.holds.HOLDS``), a settle waits the last load's tail
    (``lab.measuring.quiet``), a boundary charges its seconds (``lab.timeshare.SHARE``), a
    recovery notes a dead run's state (``lab.dead_runs.FOUND``); ``--hil-profiles`` adds
    models to ``lab.expectations.hardware.REGISTRY``, which the topology's checks and the
    markers read. Each process has its own (an xdist worker is a process: what it found
    travels to the controller in ``workeroutput``), so once a run has begun them they are
    that run's, in that process. :meth:`begin` runs first in ``pytest_configure`` (before
    the parts subscribe to them) and forgets an earlier run's (pytester's in-process runs);
    :meth:`end` (``pytest_unconfigure``) removes the models this run added.
    """

    holds: Holds
    found: Found
    share: TimeShare
    added_models: list[str] = field(default_factory=list)

    @classmethod
    def begin(cls) -> ProcessRecords:
        HOLDS.reset()
        fence.reset()
        quiet.reset()
        FOUND.clear()
        SHARE.restart(threading.current_thread())  # the thread that runs the tests
        return cls(HOLDS, FOUND, SHARE)

    def add_model(self, profile: HardwareProfile, *, source: str) -> None:
        """Register a profiles file's model for this run (``ProfileError`` as the registry's)."""
        new = profile.model not in REGISTRY.names()
        REGISTRY.register(profile, source=source)
        if new:
            self.added_models.append(profile.model)

    def end(self) -> None:
        for model in self.added_models:
            REGISTRY.unregister(model)
        self.added_models.clear()


@dataclass
class RunContext:
    """The run's lab and the parts' state (see the module's docstring).

    ``configured`` is the lab file as given and ``active`` the one tests run against; they
    are the same object until the controller starts a virtual lab or claims a labgrid
    place (:meth:`activate`). Both are None in a run without a lab file (another project's
    tests in the same virtualenv: the plugin autoloads). A worker parses only the active
    file: its ``configured`` is that same object when the controller tests against the
    file as given, else None (only the controller reads the file as given: the report
    header, starting the lab).
    """

    configured_path: Path | None
    configured: Topology | None
    active: Topology | None = None
    #: the virtual lab tests run against (started by this run, or given as its resolved file)
    lab: VirtualLab | None = None
    #: did this run start ``lab`` (then it stops it)
    lab_owned: bool = False
    #: this process's labgrid place, when the lab file names a coordinator
    place: PlaceClaim | None = None
    #: an xdist worker's context (rebuilt from the controller's :data:`WORKER_INPUT`)
    worker: bool = False
    #: under xdist the workers hold the labgrid places; the controller holds none
    places_in_workers: bool = False
    #: the controller asked xdist for ``--dist loadgroup`` (a worker adds the @group suffix)
    loadgroup: bool = False
    #: every acceptance test's outcome and record (the controller's; a worker's stays empty)
    entries: records.Entries = field(default_factory=records.Entries)
    parts: tuple[Part, ...] = ()
    #: the appliances' health around each configuration: baselines and closing tests (config_health)
    health_around: config_health.HealthAround = field(default_factory=config_health.HealthAround)
    #: set once the tests may start (:meth:`seal`): the active lab no longer changes
    sealed: bool = False
    #: this process's connected lab (:meth:`live_lab`), None until first asked for
    live: Lab | None = field(default=None, repr=False)
    #: the run's page (the controller's): parts add sections, the session renders and writes it once
    page: PageDocument = field(default_factory=PageDocument, repr=False)
    #: the process-wide records this run began (None: a context made outside a pytest run)
    process: ProcessRecords | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.active is None:
            self.active = self.configured
        if self.lab is None and self.active is not None:
            self.lab = VirtualLab.of_resolved_file(self.active)

    # ------------------------------------------------------------ building it

    @classmethod
    def load(cls, path: Path, *, parts: tuple[Part, ...] = (), places_in_workers: bool = False) -> RunContext:
        """The controller's context: the lab file ``path`` parsed (once, here).

        Raises the loader's ``TopologyError`` (``FILE:LINE: field: ...``) or FileNotFoundError.
        """
        configured = topology_files.load_topology(path, models=REGISTRY)
        return cls(path, configured, parts=parts, places_in_workers=places_in_workers)

    def to_workerinput(self, *, loadgroup: bool) -> dict[str, Any]:
        """What a worker needs, as one plain dict: the files' paths and the lab handle.

        The active file's path, not its contents: the worker parses that one file once.
        A labgrid lab's workers each claim their own place, so they get the file as given.
        """
        active = self.active.source if self.active is not None and self.place is None else None
        return {
            "configured": str(self.configured_path) if self.configured_path is not None else None,
            "active": str(active or self.configured_path) if self.configured_path is not None else None,
            "lab": self.lab.to_dict() if self.lab is not None else None,
            "loadgroup": loadgroup,
        }

    @classmethod
    def from_workerinput(cls, data: dict[str, Any], *, parts: tuple[Part, ...] = ()) -> RunContext:
        """A worker's context from its controller's :meth:`to_workerinput`: one file parsed."""
        configured_path = Path(data["configured"]) if data.get("configured") else None
        active = topology_files.load_topology(Path(data["active"]), models=REGISTRY) if data.get("active") else None
        same = configured_path is not None and active is not None and active.source == configured_path.resolve()
        lab = VirtualLab.from_dict(data["lab"]) if data.get("lab") else None
        return cls(configured_path, active if same else None, active=active, lab=lab, worker=True,
                   loadgroup=bool(data.get("loadgroup")), parts=parts)

    # ------------------------------------------------------------ the active lab

    def activate(self, topology: Topology, *, lab: VirtualLab | None = None, place: PlaceClaim | None = None) -> None:
        """From now on tests run against ``topology`` (a started lab's resolved file, or the
        file with a place's access); called by the controller before any worker starts, or
        by a worker that claimed its own place, never later (:meth:`seal`)."""
        if self.sealed:
            raise RuntimeError(f"the run's active lab is {self.topology().lab.name}: it cannot change once tests may "
                               f"run (a test collected against one lab file must not run against another)")
        self.active = topology
        if lab is not None:
            self.lab, self.lab_owned = lab, True
        if place is not None:
            self.place = place

    def seal(self) -> None:
        """The lab is settled (started, place claimed): tests may be collected against it."""
        self.sealed = True

    def topology(self) -> Topology:
        """The active topology; a usage error when the run has no lab file."""
        if self.active is None:
            raise pytest.UsageError("no lab topology: give --topology FILE (or the ini key hil_topology)")
        return self.active

    # ------------------------------------------------------------ the connected lab

    def live_lab(self) -> Lab:
        """This process's connected lab: the active topology's appliances and bench,
        connected the first time it is asked for (after :meth:`seal`: the lab it reaches no
        longer changes), the same object every later time."""
        if self.live is None:
            if not self.sealed:
                raise RuntimeError("the run's lab is connected once its active lab is settled (RunContext.seal)")
            self.live = Lab.connect(self.topology())
        return self.live

    def close_lab(self) -> None:
        """Close the connected lab (every exit path, after the parts' last use of it)."""
        lab, self.live = self.live, None
        if lab is not None:
            lab.close()

    # ------------------------------------------------------------ the parts

    def part(self, kind: type[P]) -> P:
        """The run's part of class ``kind`` (every part is created with the context)."""
        for p in self.parts:
            if isinstance(p, kind):
                return p
        raise LookupError(f"the run has no {kind.__name__} part (parts: {', '.join(p.name for p in self.parts)})")

    def in_order(self) -> Iterator[Part]:
        return iter(self.parts)


CONTEXT_KEY = pytest.StashKey[RunContext]()


def run_context(config: pytest.Config) -> RunContext:
    """The run's context (created in ``pytest_configure``, in every process)."""
    return config.stash[CONTEXT_KEY]


__all__ = ["CONTEXT_KEY", "WORKER_INPUT", "Part", "ProcessRecords", "RunContext", "run_context"]
