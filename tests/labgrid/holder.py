"""A run that holds a place until killed: ``python holder.py COORD TAGS|PLACE LEASE HOSTNAME``.

Prints ``ACQUIRED <place>`` once it holds it, then keeps renewing (its claim thread) until
it is killed or its stdin closes; releases on a normal exit. Used by the tests to have a
separate process (a run on another machine, or one that is SIGKILLed)."""

import sys

from ipsec_hil.lab.sharing.labgrid_claim import PlaceClaim
from ipsec_hil.lab.topology import LabgridInfo

coord, which, lease, hostname = sys.argv[1:5]
cfg = LabgridInfo(coordinator=coord, **({"tags": dict([which.split("=")])} if "=" in which else {"place": which}))
with PlaceClaim(cfg, holder="holder.py", run_id="run-killed", worker="gw9", lease=float(lease),
                renew_every=float(lease) / 4, hostname=hostname, wait=60) as claim:
    print("ACQUIRED", claim.place, flush=True)
    sys.stdin.read()
