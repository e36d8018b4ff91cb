"""Every run first undoes what dead runs left, and says so (issue 55; the pytest side of
ipsec_hil.lab.dead_runs).

Why a part of its own, second in the run's parts (ipsec_hil.pytest_plugin.parts_in_order:
after the bench's lease, before preflight): a run killed with ``--driver`` left its
candidate module loaded, and the next run without ``--driver`` read that module's md5 for
its page and measured it, unnoticed; a run killed mid-test left its bench route. Whatever
the options of either run, :class:`Recovery` recovers the bench's journal (under the bench's
lease, which the run holds from here on), every appliance's driver journal (under the
deployment's lease and the appliance's) and the tunnel journals of the appliances nobody
holds -- before preflight checks the driver and the hardware facts read its md5.

Said out loud, every time something was found: the report header (``recovery: ...``
lines), the page (one line on the first screen through ``pytest_hil_page_lab_state``, the
section "Recovered from dead runs" through ``pytest_hil_page_sections``), Allure's
environment (``recovery.*``). Recoveries during the run (a tunnel taking an appliance a live
run held at the start, whose holder died since: ``Lab.recover_once``) are recorded the same
way; an xdist worker sends its own to the controller (``workeroutput``). A recovery that
could not finish ends the run before anything is measured, with
:attr:`HilExitCode.RECOVERY_INCOMPLETE` and a message naming what is left.
"""

from __future__ import annotations

import os
import uuid

import pytest

from ipsec_hil.context import Part, RunContext, run_context
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab import files
from ipsec_hil.lab.dead_runs import FOUND, recover_at_start, recover_bench
from ipsec_hil.lab.reporting import sections
from ipsec_hil.lab.reporting.page import Section

__all__: list[str] = []

#: the worker -> controller key of a worker's recoveries
WORKER_KEY = "hil_recovered"


def _acceptance(config: pytest.Config) -> bool:
    from ipsec_hil.session import wants_lab  # (as lease_plugin: session imports the parts' modules' peers)

    return wants_lab(config)


class Recovery(Part):
    """A dead run's state undone at the run's start, and what was found, said."""

    name = "recovery"

    @classmethod
    def from_config(cls, config: pytest.Config) -> Recovery:
        return cls()  # FOUND is the run's: begun with the run's records (context.ProcessRecords.begin)

    def lab_ready(self, ctx: RunContext, session: pytest.Session) -> None:
        from ipsec_hil.lease_plugin import LeaseHold

        config = session.config
        if not _acceptance(config):
            return
        configured = ctx.configured
        hold = ctx.part(LeaseHold)
        bench_lock = hold.bench_lock
        bench_took_over = bench_lock.took_over if bench_lock is not None else None
        if configured is not None and configured.lab.labgrid is not None and ctx.places_in_workers:
            # as preflight: the controller holds no place, so it cannot reach the appliances;
            # each worker's tunnel recovers its appliances when it takes their leases
            # (Lab.recover_once), and what it found reaches this process at its end
            terminal = config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                terminal.write_line("recovery: at the start, the bench only -- the appliances are the xdist "
                                    "workers' labgrid places (the controller holds none): each worker recovers "
                                    "their tunnel journals when it takes them; their driver journals are not "
                                    "checked by this run")
            if hold.bench_host is not None:
                recover_bench(hold.bench_host, took_over=bench_took_over)
        else:
            run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:12] or "start-" + uuid.uuid4().hex[:8]
            lab = ctx.live_lab()
            try:
                recover_at_start(lab, holder=f"{files.whoami()}: pytest (recovery at the start)", run_id=run_id,
                                 bench_host=hold.bench_host, bench_took_over=bench_took_over)
            finally:
                lab.check_again()  # their leases are released: a tunnel that takes one checks again
        message = FOUND.stop_message()
        if message:
            pytest.exit(message, returncode=HilExitCode.RECOVERY_INCOMPLETE)

    def worker_finish(self, ctx: RunContext, session: pytest.Session, workeroutput: dict) -> None:
        if FOUND:
            workeroutput[WORKER_KEY] = FOUND.to_list()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """The controller: a worker's recoveries (a tunnel that took an appliance a dead run
    had held) join the run's record."""
    data = (getattr(node, "workeroutput", None) or {}).get(WORKER_KEY)
    if data:
        FOUND.merge(data)


def pytest_report_header(config: pytest.Config) -> list[str]:
    if not _acceptance(config) or run_context(config).worker:
        return []
    line = FOUND.line()
    return ([line] if line else []) + FOUND.terminal_lines()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The summary repeats the one line (the header scrolled away long ago), with what was
    found during the run too."""
    if not _acceptance(config) or run_context(config).worker:
        return
    line = FOUND.line()
    if line:
        terminalreporter.write_line(line, yellow=True, bold=True)


def pytest_hil_page_lab_state(config: pytest.Config) -> list[str] | None:
    line = FOUND.line() if _acceptance(config) else None
    return [line] if line else None


def pytest_hil_page_sections(config: pytest.Config) -> Section | None:
    return sections.dead_runs(FOUND) if _acceptance(config) else None


def pytest_hil_allure_environment(config: pytest.Config) -> dict[str, str] | None:
    return (FOUND.environment() or None) if _acceptance(config) else None

