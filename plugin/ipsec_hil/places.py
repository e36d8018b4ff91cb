"""A shared lab's labgrid place, held for the run (the pytest side of ipsec_hil.lab.sharing.labgrid_claim).

Why here: when the lab file names a labgrid coordinator (``lab.labgrid``), the appliances'
addresses are not in the file; they come with the place the coordinator allocates. So the
place is claimed before anything talks to an appliance -- in the controller's session start
(one process) or, under xdist, in each worker's configure (every worker holds its own place:
``place: xgs-{worker}`` or tags, docs/shared-lab.md) -- and the topology the tests use is the
file with the place's access applied. The claim is kept by the run's context
(ipsec_hil.context.RunContext.place), released on every exit path (``config.add_cleanup``),
and checked before every tunnel test (``check_place``): a place taken from the run stops
it with labgrid's words.
"""

from __future__ import annotations

import getpass
import os
import socket
import uuid

import pytest

from ipsec_hil.context import run_context
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.sharing.labgrid_claim import PlaceClaim, apply_services, worker_id
from ipsec_hil.lab.topology import Topology


def claim_place(config: pytest.Config, topology: Topology) -> tuple[Topology, PlaceClaim | None]:
    """This process's place, acquired (waiting its turn): (the topology with its access, the claim).

    A topology without ``lab.labgrid`` is returned as it is (no claim). A place that cannot be had
    (coordinator unreachable, no matching place, a place missing an appliance) ends the run
    as "lab not up" with the reason.
    """
    cfg = topology.lab.labgrid
    if cfg is None:
        return topology, None
    holder = f"{getpass.getuser()}@{socket.gethostname()}: pytest"
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:12] or uuid.uuid4().hex[:12]
    try:
        claim = PlaceClaim(cfg, holder=holder, run_id=run_id, worker=worker_id()).acquire()
    except LabError as exc:
        pytest.exit(f"labgrid: {exc}", returncode=HilExitCode.LAB_NOT_UP)
    config.add_cleanup(claim.release)
    try:
        return apply_services(topology, claim.access_for(topology)), claim
    except LabError as exc:
        claim.release()
        pytest.exit(f"labgrid: {exc}", returncode=HilExitCode.LAB_NOT_UP)


def check_place(config: pytest.Config) -> None:
    """Raise LeaseLost when this process's place was taken from it (no round trip)."""
    claim = run_context(config).place
    if claim is not None:
        claim.check()
