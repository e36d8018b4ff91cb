"""The run's time breakdown on the page and in the terminal (issue 15).

Thin glue over :mod:`ipsec_hil.lab.timeshare` (the accounting, and where each category is
charged): why a run took as long as it did must be on the page it wrote, so a slower run
shows which part grew.

- :meth:`RunShare.from_config` (every process, when the run's context is made, before the
  session starts): the accumulator starts again, accounting the thread that runs the tests.
- :meth:`RunShare.worker_finish` (xdist workers): their totals go to the controller in
  ``workeroutput`` (the channel xdist gives a worker's last word); the controller takes
  them in ``pytest_testnodedown``.
- ``pytest_hil_page_sections`` (ipsec_hil.hookspecs; called by the controller when it writes
  the page, after every other plugin's ``pytest_sessionfinish``): the section "Where the
  time went", with the ratio wall / traffic asked (the records' ``traffic_seconds``); the
  terminal summary prints the same table, from the same figures.

Without xdist the one process's breakdown is the run's. With it, the workers' breakdowns
are summed (their wall times too: they ran side by side) and the controller's own
categorised work (e.g. the hardware facts it read over SSH before the workers started) is
added as seconds of its own; the controller's waiting for workers is not counted.
Nothing is shown for a run that executed no acceptance test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ipsec_hil.lab import timeshare
from ipsec_hil.lab.reporting import sections
from ipsec_hil.lab.reporting.page import Section
from ipsec_hil.lab.timeshare import Breakdown
from ipsec_hil.context import Part, RunContext, run_context

__all__: list[str] = []

#: The key of a worker's totals in ``workeroutput``.
WORKER_KEY = "hil_timeshare"


@dataclass
class RunShare(Part):
    """What the controller gathers: the workers' totals, and the run's figures once frozen."""

    workers: list[Breakdown] = field(default_factory=list)
    frozen: tuple[Breakdown, float] | None = None  # (breakdown, the run's wall time)

    name = "timeshare"

    @classmethod
    def from_config(cls, config: pytest.Config) -> RunShare:
        return cls()  # the run's SHARE was restarted with the run's records (context.ProcessRecords.begin)

    def worker_finish(self, ctx: RunContext, session: pytest.Session, workeroutput: dict) -> None:
        workeroutput[WORKER_KEY] = timeshare.SHARE.snapshot().to_dict()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: a worker finished; keep its totals (a crashed worker sent none)."""
    data = getattr(node, "workeroutput", {}).get(WORKER_KEY)
    if data:
        run_context(node.config).part(RunShare).workers.append(Breakdown.from_dict(data))


def run_breakdown(config: pytest.Config) -> tuple[Breakdown, float]:
    """(the breakdown, the run's wall time), taken the first time it is asked for, so the
    page and the terminal show the same figures."""
    run = run_context(config).part(RunShare)
    if run.frozen is None:
        own = timeshare.SHARE.snapshot()
        if run.workers:
            mine = Breakdown(sum(own.seconds.values()), own.seconds, own.inclusive, own.calls, processes=0)
            run.frozen = (Breakdown.total([*run.workers, mine]), own.wall)
        else:
            run.frozen = (own, own.wall)
    return run.frozen


def _traffic_asked(config: pytest.Config) -> float | None:
    """Seconds of traffic the tests asked for; None when the run executed no acceptance test."""
    entries = run_context(config).entries
    if not entries:
        return None
    return entries.traffic_seconds()


def pytest_hil_page_sections(config: pytest.Config) -> Section | None:
    traffic = _traffic_asked(config)
    if traffic is None:
        return None
    b, wall = run_breakdown(config)
    return sections.time_share(b, run_wall=wall, traffic_asked=traffic)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    traffic = _traffic_asked(config)
    if traffic is None:
        return
    b, wall = run_breakdown(config)
    terminalreporter.section("where the time went")
    for line in timeshare.terminal_lines(b, run_wall=wall, traffic_asked=traffic):
        terminalreporter.write_line(line)
