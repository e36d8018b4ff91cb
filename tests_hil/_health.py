"""What the tests that read the appliance's health share (issue 13): the one tolerance
policy and the driver as the health checks see it.

Why shared: test_health.py judges a whole configuration, test_rekey.py the mbufs around
rekeys; both must use the same slack, or a leak small enough for one would fail the other
for no reason anyone could name.
"""
from __future__ import annotations

from pathlib import PurePosixPath

from ipsec_hil.lab.measuring.health import DriverScope, HealthPolicy

POLICY = HealthPolicy()
"""The tolerances of every health comparison in tests_hil (ipsec_hil.lab.measuring.health says why each)."""


def driver_scope(app) -> DriverScope:
    """The driver as the health checks see it: its name, module file, zones and malloc types."""
    return DriverScope(name=app.profile.driver, module=PurePosixPath(app.profile.module_file).name)
