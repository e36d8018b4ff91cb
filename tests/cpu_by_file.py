"""CPU by test file, its labs and subprocesses included: ``SELFTESTS_CPU_BY_FILE=1 tools/run-selftests``.

Why: the own tests' budget is CPU (issue 15: at four workers the two cores are about 93 %
busy, so only less work makes the run shorter). tools/selftest-times gives each file's
worker seconds -- how long it held a worker, waits included -- and tools/cpu-profile the
whole run's CPU by process name; neither says which test file costs the CPU. Here each
test file gets a cgroup of its own: the worker moves itself into it before the file's
first test, so everything it starts from then on -- the module's virtual lab (engines,
SSH servers, IKE daemons), pytest subprocesses, every SSH command's shells -- is counted
there, including the kernel's work done in their context (packets through veths and TUN
devices). Measured this way at stop 30 (12-04, three workers): the XGS 136 fault-matrix
shard 260 CPU-s, the parent/candidate comparison 231, the XGS 3300 shard 209.

The counts: cgroup v1 ``cpuacct.usage`` or v2 ``cpu.stat`` ``usage_usec``. The run's
cgroups are ``ipsec-hil-cpu-<pid>/<file>`` under the hierarchy's root; they are removed
at the end (a process still in one -- something a test left running -- is named and its
cgroup kept). The table goes to the terminal, the figures to
reports/selftests/cpu-by-file.json. Needs root; without it, or without a cpu-accounting
hierarchy, the run stops at once with the reason (a run asked to measure does not pass
unmeasured).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

ENV = "SELFTESTS_CPU_BY_FILE"
"""Set to 1 to measure (tests/conftest.py registers this plugin then)."""
ROOT_ENV = "SELFTESTS_CPU_CGROUP"
"""The run's cgroup directory, handed from the controller to the xdist workers."""
OWNER_ENV = "SELFTESTS_CPU_OWNER"
"""The measuring controller's pid: only its own workers (its children) move between cgroups."""
CGROUP_FS = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Hierarchy:
    """Where a cgroup's CPU count is read: v1 cpuacct or the v2 unified tree."""

    root: Path
    version: int

    def usage_s(self, cgroup: Path) -> float:
        """CPU seconds used by the cgroup's processes so far (exited ones included)."""
        if self.version == 1:
            return int((cgroup / "cpuacct.usage").read_text()) / 1e9
        return parse_cpu_stat((cgroup / "cpu.stat").read_text(), cgroup / "cpu.stat") / 1e6


def parse_cpu_stat(text: str, path: Path) -> int:
    """``usage_usec`` of a v2 cpu.stat; a file without it is an error naming the file."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value)
    raise ValueError(f"{path}: no usage_usec line")


def find_hierarchy(base: Path = CGROUP_FS) -> Hierarchy:
    """The cpu-accounting hierarchy of this machine, or RuntimeError saying what is missing."""
    if (base / "cpuacct" / "cpuacct.usage").is_file():
        return Hierarchy(base / "cpuacct", 1)
    if (base / "cgroup.controllers").is_file():
        return Hierarchy(base, 2)
    raise RuntimeError(f"no cgroup cpu accounting under {base} (neither cpuacct/cpuacct.usage of v1 "
                       "nor the v2 unified tree's cgroup.controllers)")


def file_key(nodeid: str) -> str:
    """A test id's file as a cgroup name, reversibly (:func:`file_of`):
    ``tests/a/b.py::t`` -> ``tests%2Fa%2Fb.py``."""
    return quote(nodeid.split("::", 1)[0], safe="")


def file_of(key: str) -> str:
    return unquote(key)


def enter(cgroup: Path, pid: int) -> None:
    cgroup.mkdir(exist_ok=True)
    (cgroup / "cgroup.procs").write_text(str(pid))


def own_cgroup(hier: Hierarchy) -> Path:
    """The cgroup this process started in (to go back to before the run's are removed)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (hier.version == 1 and "cpuacct" in controllers.split(",")) or (hier.version == 2 and controllers == ""):
            return hier.root / path.lstrip("/")
    return hier.root


def register(config: pytest.Config) -> None:
    """Register the plugin when this process measures: the run's top pytest (its ENV set,
    no run under way) or one of that run's xdist workers. A pytest that a test starts
    (an inner suite run, a tool's test) inherits the environment but stays out: moving
    itself would take its CPU out of the file that started it."""
    if os.environ.get(ENV) != "1":
        return
    worker = hasattr(config, "workerinput")
    if worker and os.environ.get(OWNER_ENV) != str(os.getppid()):
        return
    if not worker and ROOT_ENV in os.environ:
        return
    config.pluginmanager.register(CpuByFile(config), "cpu_by_file")


class CpuByFile:
    """The plugin: the controller (or the only process) creates and reads the run's cgroups;
    whoever runs tests moves itself into the file's cgroup."""

    def __init__(self, config: pytest.Config) -> None:
        if os.geteuid() != 0:
            raise pytest.UsageError(f"{ENV}=1: measuring CPU by test file needs root (cgroups)")
        try:
            self.hier = find_hierarchy()
        except RuntimeError as exc:
            raise pytest.UsageError(f"{ENV}=1: {exc}") from None
        self.worker = hasattr(config, "workerinput")
        self.home = own_cgroup(self.hier)
        if self.worker:
            self.run = Path(os.environ[ROOT_ENV])
        else:
            self.run = self.hier.root / f"ipsec-hil-cpu-{os.getpid()}"
            self.run.mkdir()
            os.environ[ROOT_ENV] = str(self.run)  # the workers, started after configure, inherit it
            os.environ[OWNER_ENV] = str(os.getpid())
        self.current: str | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        key = file_key(item.nodeid)
        if key != self.current:
            enter(self.run / key, os.getpid())
            self.current = key

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.current is not None:
            (self.home / "cgroup.procs").write_text(str(os.getpid()))
            self.current = None
        if self.worker:
            return
        rows = sorted(((self.hier.usage_s(d), file_of(d.name)) for d in self.run.iterdir() if d.is_dir()),
                      reverse=True)
        kept = []
        for d in [d for d in self.run.iterdir() if d.is_dir()]:
            try:
                d.rmdir()
            except OSError:
                pids = (d / "cgroup.procs").read_text().split()
                kept.append(f"{d} (processes still in it: {' '.join(pids)})")
        if not kept:
            self.run.rmdir()
        out = Path(session.config.rootpath) / "reports" / "selftests" / "cpu-by-file.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"source": f"{ENV}=1 (tests/cpu_by_file.py), cgroup v{self.hier.version}",
                                   "cpu_seconds": {name: round(s, 2) for s, name in rows}}, indent=1) + "\n")
        self.rows, self.kept, self.out = rows, kept, out

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.worker or not hasattr(self, "rows"):
            return
        tr = terminalreporter
        total = sum(s for s, _ in self.rows)
        tr.write_line(f"own tests' CPU by file (cgroups, labs and subprocesses included; {total:,.1f} CPU-s "
                      f"over {len(self.rows)} files; all of them in {self.out}):")
        for s, name in self.rows[:15]:
            tr.write_line(f"  {s:8.1f} CPU-s {100 * s / total if total else 0:5.1f} %  {name}")
        for k in self.kept:
            tr.write_line(f"cpu-by-file: cgroup kept, {k}")
