"""``--driver MODEL=PATH``: the run measures that build, then puts the previous one back.

Thin glue over :mod:`ipsec_hil.lab.driver` (issue 7): :class:`DriverRun` is a part of the
run's context (ipsec_hil.context.Part); the run calls its phases in the parts' order
(ipsec_hil.pytest_plugin.parts_in_order), in the controller only. Where and when, and why:

- :meth:`DriverRun.from_config` (every process, when the context is made): parse and
  check the option (a bad model or a missing file is a usage error, exit 4, before any
  lab is touched).
- :meth:`DriverRun.lab_ready` (after preflight, before xdist starts workers and before the
  hardware facts are read), so the driver is deployed exactly once per appliance of that
  model, under the appliance lock and the deployment's own lease (ipsec_hil.lab.driver.
  DRIVER_LOCK_PATH, taken first and held until the previous module is back), and the run
  reports the build under test. A dead run's driver journal was recovered at the run's
  start by any run (ipsec_hil.recovery_plugin); one whose run died since is recovered by
  the deployment, under its lease, before its own backup (said like the others). A failed
  deployment has already restored that appliance; the run stops with exit code
  :data:`DRIVER_DEPLOY_FAILED`.
- ``pytest_report_header``: what is under test (local md5/size and where it went).
- :meth:`DriverRun.finish` (after the candidate comparison, before the page): the
  previous module is restored (unless ``--keep-driver``); through
  ``pytest_hil_page_sections`` / ``pytest_hil_allure_environment`` the page gets a
  "Driver under test" section saying so and Allure's environment ``driver_under_test.*`` keys.
- :meth:`DriverRun.close` (``pytest_unconfigure``, before the virtual lab stops): restore
  again if finish never ran (a failed session start); idempotent. A failed restore makes
  the run exit :data:`DRIVER_RESTORE_FAILED` (the journal keeps the backup; the next run
  recovers it).
"""

from __future__ import annotations

import getpass
import logging
import socket
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ipsec_hil.context import Part, RunContext, run_context
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.dead_runs import FOUND, Undone, whose
from ipsec_hil.lab.driver import DeployResult, DriverDeployment, ModuleBuild, local_build
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.reporting.page import Bold, Bullets, Code, Item, Section
from ipsec_hil.lab.expectations.hardware import MODELS
from ipsec_hil.lab.remote import fence
from ipsec_hil.lab.sharing.holds import HOLDS
from ipsec_hil.lab.sharing.lock import ApplianceLock

log = logging.getLogger(__name__)

__all__: list[str] = []

#: exit codes (ipsec_hil.exitcodes)
DRIVER_DEPLOY_FAILED = HilExitCode.DRIVER_DEPLOY_FAILED
DRIVER_RESTORE_FAILED = HilExitCode.DRIVER_RESTORE_FAILED


@dataclass
class DriverRun(Part):
    """The run's driver-under-test state (controller): requested builds and deployments."""

    requested: dict[str, tuple[Path, ModuleBuild]]  # model -> (local path, md5/size)
    keep: bool = False
    deployments: list[DriverDeployment] = field(default_factory=list)
    results: list[DeployResult] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # lines for the page
    failures: list[str] = field(default_factory=list)
    session: Any = None
    finished: bool = False

    name = "driver"

    @classmethod
    def from_config(cls, config: pytest.Config) -> DriverRun:
        values = config.getoption("--driver", []) or []
        requested = parse_driver_options(values, Path(config.invocation_params.dir))
        return cls(requested, keep=bool(config.getoption("--keep-driver", False)))

    def lab_ready(self, ctx: RunContext, session: pytest.Session) -> None:
        if self.requested:
            _deploy(self, ctx, session)

    def finish(self, ctx: RunContext, session: pytest.Session) -> None:
        if self.requested and not self.finished:
            _finish(self, session)

    def close(self, ctx: RunContext) -> None:
        if not self.requested:
            return
        if self.deployments:
            _restore_all(self)
            if self.session is not None and any("restore failed" in f for f in self.failures):
                self.session.exitstatus = DRIVER_RESTORE_FAILED


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil")
    group.addoption(
        "--driver",
        action="append",
        default=[],
        metavar="MODEL=PATH",
        help="driver under test: upload and load this module on every appliance of MODEL "
        f"({', '.join(MODELS)}) before the tests, restore the previous one after (repeatable)",
    )
    group.addoption(
        "--keep-driver",
        action="store_true",
        default=False,
        help="leave the --driver build loaded after the run (the previous module is kept as "
        "<module>.previous on the appliance)",
    )


def parse_driver_options(values: list[str], base: Path, option: str = "--driver") -> dict[str, tuple[Path, ModuleBuild]]:
    """``["xgs3300=build/octep.ko", ...]`` -> {model: (absolute path, md5/size)}.

    Raises ``pytest.UsageError`` naming the option value that is wrong.
    """
    out: dict[str, tuple[Path, ModuleBuild]] = {}
    for v in values:
        model, sep, path = v.partition("=")
        if not sep or not model or not path:
            raise pytest.UsageError(f"{option} {v!r}: expected MODEL=PATH, e.g. xgs3300=build/octep.ko")
        if model not in MODELS:
            raise pytest.UsageError(f"{option} {v!r}: unknown model {model!r}; known: {', '.join(MODELS)}")
        if model in out:
            raise pytest.UsageError(f"{option} {v!r}: a second build for {model} (one per model)")
        p = Path(path)
        if not p.is_absolute():
            p = base / p
        try:
            _, build = local_build(p)
        except LabError as exc:
            raise pytest.UsageError(f"{option} {v!r}: {exc}") from None
        out[model] = (p, build)
    return out


def driver_run(config: pytest.Config) -> DriverRun | None:
    """The run's driver state, or None when no ``--driver`` was given."""
    dr = run_context(config).part(DriverRun)
    return dr if dr.requested else None


def _deploy(dr: DriverRun, ctx: RunContext, session: pytest.Session) -> None:
    dr.session = session
    topology = ctx.topology()
    missing = [m for m in dr.requested if not topology.appliances(m)]
    if missing:
        raise pytest.UsageError(f"--driver for {', '.join(missing)}: the topology {topology.lab.name} has no such "
                                "appliance")
    apps = ctx.live_lab().appliances  # the run's connected lab (ipsec_hil.context): closed by the run
    run_id = "drv-" + uuid.uuid4().hex[:8]
    holder = f"{getpass.getuser()}@{socket.gethostname()}: pytest --driver"
    for model, (path, build) in dr.requested.items():
        for host in topology.appliances(model):
            app = apps[host.name]
            dep = DriverDeployment(app, path, run_id=run_id, holder=holder)
            try:
                # the deployment's lease before the appliance's: waiting for another run's
                # build under test while holding the appliance would keep that run from it
                dep.take_lease()
                with ApplianceLock(app.host, holder, run_id=run_id, wait=600, poll=2):
                    dr.deployments.append(dep)
                    dr.results.append(dep.deploy())
                if dep.recovered:
                    _say_recovered(dep)
            except LabError as exc:
                if dep.backup is None:
                    dep.abandon()  # its lease, if taken: nothing of it is deployed
                dr.failures.append(str(exc))  # DriverError/LabError texts name the appliance
                pytest.exit(f"driver under test not deployed (previous module restored on {app.name}): {exc}",
                            returncode=DRIVER_DEPLOY_FAILED)


def _say_recovered(dep: DriverDeployment) -> None:
    """A dead run's driver that the deployment recovered before its backup (its run died
    after this run's start), in the run's record of dead runs (ipsec_hil.lab.dead_runs)."""
    run, since, dead = whose((), dep.recovered_from)
    now = dep.previous
    FOUND.add(Undone(dep.appliance.name, "driver", tuple(dep.recovered), run, since, dead,
                     "", f"{dep.module} {now.text()}" if now is not None else "",
                     (now.md5 or "") if now is not None else ""))


def pytest_report_header(config: pytest.Config) -> list[str]:
    dr = driver_run(config)
    if dr is None:
        return []
    lines = []
    for model, (path, build) in dr.requested.items():
        where = ", ".join(r.appliance for r in dr.results if r.model == model) or "not deployed yet"
        lines.append(f"driver under test: {model} = {path} (md5 {build.md5}, {build.size:,} bytes) -> {where}")
    for r in dr.results:
        lines.append(f"  {r.appliance}: loaded {r.deployed.text()}; previous {r.previous.text()}")
    return lines


def _restore_all(dr: DriverRun) -> None:
    """Restore (or keep) every deployment, newest first; collect failures."""
    lost = []
    for dep in reversed(dr.deployments):
        name = dep.appliance.name
        why = fence.fenced(dep.host.name)
        if why:  # another run holds it now: no restore there (the transport would refuse it)
            dep.abandon()  # its lease: renewals stop, nothing is sent
            lost.append(dep)
            dr.restored.append(f"{name}: previous module NOT restored: {why}")
            HOLDS.leave(f"the driver build under test on {name} (the previous module is in its journal)")
            continue
        try:
            with ApplianceLock(dep.host, f"{getpass.getuser()}@{socket.gethostname()}: pytest --driver restore",
                               run_id=dep.run_id, wait=600, poll=2):
                if dr.keep:
                    kept = dep.keep()
                    if kept is not None or dep.previous is not None:
                        dr.restored.append(f"{name}: --keep-driver: the build under test stays loaded; previous "
                                           f"module kept as {kept or '(none)'}")
                else:
                    now = dep.restore()
                    if now is not None:
                        dr.restored.append(f"{name}: previous module restored and {'loaded' if now.loaded else 'not loaded'}"
                                           f" ({now.text()})")
        except LabError as exc:
            dr.failures.append(f"{name}: restore failed: {exc}")
            sys.stderr.write(f"\n*** {name}: the previous driver could NOT be restored: {exc}\n"
                             "*** its backup stays in the appliance's journal; the next run recovers it\n")
    dr.deployments = [d for d in dr.deployments if d.backup is not None and d not in lost]


def page_section(dr: DriverRun, restored: bool) -> Section:
    items = [Item((f"{r.appliance} ({r.model}): ", Code(r.module_file), " from ", Code(r.local_path), ": md5 ",
                   Code(str(r.deployed.md5)), f", {r.deployed.size:,} bytes, loaded (kldstat), kernel log clean; "
                   "previous build md5 ", Code(r.previous.md5 or "none"))) for r in dr.results]
    if restored:
        items += [Item(line) for line in dr.restored]
    items += [Item(Bold(line)) for line in dr.failures]
    return Section("Driver under test", (Bullets(tuple(items)),))


def environment_lines(dr: DriverRun) -> dict[str, str]:
    env: dict[str, str] = {}
    for r in dr.results:
        env[f"driver_under_test.{r.appliance}.md5"] = r.deployed.md5 or "unknown"
        env[f"driver_under_test.{r.appliance}.size"] = str(r.deployed.size)
        env[f"driver_under_test.{r.appliance}.file"] = r.local_path
        env[f"driver_under_test.{r.appliance}.previous_md5"] = r.previous.md5 or "none"
    return env


def _finish(dr: DriverRun, session: pytest.Session) -> None:
    dr.finished = True
    _restore_all(dr)
    terminal = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in dr.restored + dr.failures:
        if terminal is not None:
            terminal.write_line(f"driver under test: {line}")
    if any("restore failed" in f for f in dr.failures):
        session.exitstatus = DRIVER_RESTORE_FAILED


def pytest_hil_page_sections(config: pytest.Config) -> Section | None:
    dr = driver_run(config)
    return page_section(dr, restored=True) if dr is not None and (dr.results or dr.failures) else None


def pytest_hil_allure_environment(config: pytest.Config) -> dict[str, str] | None:
    dr = driver_run(config)
    return environment_lines(dr) if dr is not None else None
