"""The suite's own exit codes, in one place (pytest's are 0-6: see ``pytest.ExitCode``).

Why an enum: a CI job branches on these numbers ("the lab did not come up" is not "the
driver regressed"); spread over modules they drifted and collided once. Values are part of
the interface: never renumber one.
"""

from __future__ import annotations

import enum


class HilExitCode(enum.IntEnum):
    #: The virtual lab could not be brought up (or its resolved lab file is invalid).
    LAB_NOT_UP = 17
    #: ``--gate`` with ``--baseline``: a rate fell below the baseline's noise band.
    GATE_REGRESSION = 18
    #: ``--driver``: the build under test could not be deployed (the previous one is back).
    DRIVER_DEPLOY_FAILED = 19
    #: ``--driver``: the previous build could not be restored (the journal keeps it).
    DRIVER_RESTORE_FAILED = 20
    #: ``--gate``: none of the baseline's rates was measured by this run (nothing compared).
    GATE_NOTHING_COMPARED = 21
    #: ``--parent-driver``: a rate figure of the candidate is a regression against its parent
    #: (the tests themselves passed; a failed test's exit status 1 takes precedence).
    CANDIDATE_REGRESSION = 22
    #: ``--parent-driver``: the comparison could not be measured (the lab broke during it,
    #: or the candidate was never deployed): no verdict, which is not a pass.
    COMPARISON_NOT_MEASURED = 23
    #: ``--parent-driver``: a figure's comparison is unresolved -- its interval crosses the
    #: threshold (the budget of pairs ended first), so neither a regression nor "no change" is
    #: proved: more trials are needed, which is not a pass. A failed test (1), a comparison
    #: not measured (23) and a regression in another figure (22) take precedence. Listed
    #: here beside 22 and 23; its number is the one that was free when it came (issue 54).
    COMPARISON_UNRESOLVED = 28
    #: preflight (every run's first phase, or ``--hil-preflight``): the lab is not ready
    #: (a module missing, charon down, a port's address or MTU wrong, a bench tool missing).
    PREFLIGHT_FAILED = 24
    #: Every selected acceptance test was skipped (the topology lacks the selected model, the
    #: lab file lacks the ports or tunnels the tests need, ...): the run measured nothing,
    #: which is not a pass. The run's last lines say why in one line.
    NOTHING_MEASURED = 25
    #: ``--gate``: some selected acceptance tests did not run (skipped): the gate did not
    #: establish everything it was asked to (the page's first screen lists what).
    GATE_INCOMPLETE = 26
    #: a lease (appliance, bench) or labgrid place of this run was taken by another run: the
    #: run stopped within one renewal period and sent nothing more to those hosts; what it
    #: had changed there is left to the new holder's recovery (docs/shared-lab.md).
    LEASE_LOST = 27
    #: a dead run's state (its driver under test, its tunnel's changes, the bench's routes)
    #: was found at the run's start and could not all be undone: the run stops before it
    #: measures anything, naming what is left; the journals keep it for the next run
    #: (ipsec_hil.lab.dead_runs, issue 55). Beside the others; its number is the one that
    #: was free when it came.
    RECOVERY_INCOMPLETE = 29
