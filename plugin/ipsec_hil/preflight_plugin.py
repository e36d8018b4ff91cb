"""``pytest --hil-preflight``: check the lab and stop; and the same checks open every run.

Why first (:class:`Preflight` is the first of the run's parts, ipsec_hil.pytest_plugin.parts_in_order:
its ``lab_ready`` runs before ``--driver`` deploys anything):
a lab with a missing ipsec.ko, a stopped charon or a wrong MTU fails every test slowly
and in ways that look like the driver's fault. The checks (ipsec_hil.lab.preflight) answer
in one command each; any failure ends the run with :attr:`HilExitCode.PREFLIGHT_FAILED`
and one line per failure naming its fix. ``--hil-preflight`` ends the run after the
checks (exit 0 when all passed) and also checks the bench's addresses and MTUs.
"""

from __future__ import annotations

import pytest

from ipsec_hil.context import Part, RunContext
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.live_lab import Lab
from ipsec_hil.lab.preflight import preflight

__all__: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil")
    group.addoption("--hil-preflight", action="store_true", default=False,
                    help="check the lab (appliances reachable, ipsec.ko and the driver loaded, charon, ports, "
                         "routes, the bench's tools), print the result and stop")


class Preflight(Part):
    """The run's lab checks, first at lab-ready (ipsec_hil.context.Part)."""

    name = "preflight"

    def __init__(self, only: bool) -> None:
        self.only = only  # --hil-preflight: check, report, stop

    @classmethod
    def from_config(cls, config: pytest.Config) -> Preflight:
        return cls(bool(config.getoption("--hil-preflight", False)))

    def lab_ready(self, ctx: RunContext, session: pytest.Session) -> None:
        configured = ctx.configured
        if configured is not None and configured.lab.labgrid is not None and ctx.places_in_workers:
            # Under xdist each worker claims a labgrid place of its own; the controller holds
            # none, so its topology has no appliance addresses: connecting here was an
            # internal error that ended every `-n` run on a shared lab (exit 3; found by
            # tests/labgrid/test_under_xdist.py). Said, not hidden.
            terminal = session.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                terminal.write_line("preflight: not run -- the appliances are the xdist workers' labgrid places "
                                    "(the controller holds none); each worker's tests reach them through its own")
            return
        run_preflight(session.config, ctx.live_lab(), only=self.only)


def run_preflight(config: pytest.Config, lab: Lab, *, only: bool) -> None:
    """Check the run's connected lab; end the run (PREFLIGHT_FAILED, or 0 with
    ``--hil-preflight``) as due."""
    findings = preflight(lab.topology, lab.appliances, lab.bench, bench_ports=only)
    failed = [f for f in findings if not f.ok]
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None and (only or failed):
        terminal.section("preflight")
        for f in (findings if only else failed):
            terminal.write_line(f.text())
    if failed:
        pytest.exit(f"preflight: {len(failed)} of {len(findings)} checks failed: "
                    + "; ".join(f"{f.host}: {f.check} -- fix: {f.fix}" for f in failed),
                    returncode=HilExitCode.PREFLIGHT_FAILED)
    if only:
        pytest.exit(f"preflight: all {len(findings)} checks passed", returncode=0)
