"""The appliance's health around each tunnel configuration (issue 13).

Before and after the configuration's traffic, on both ends: kern.boottime (no reboot
nobody asked for), kldstat (the driver still loaded), dmesg lines added (panic, witness
or lock-order messages, the driver's own errors), netstat -m (mbufs and clusters back to
the baseline within the slack of the end's model, HardwareProfile.health: the XGS 136's
is a quarter of the XGS 3300's; no denied or delayed requests) and the driver's UMA zones
and malloc types. One snapshot is one SSH round trip (ipsec_hil.lab.measuring.health); the
before/after diff is on the measurement page and in Allure, and it is the failure text.

An appliance that reboots under the test's pings takes their SSH session with it: that is
the finding this test exists for, not a lab error, so the lost session is noted and the
after snapshots wait (up to BACK_S, as Appliance.reboot waits) for every end to answer
again; the comparison then says REBOOTED in its boot-time row.
"""

from __future__ import annotations


import allure
import pytest

from ipsec_hil.lab.errors import TransportError
from ipsec_hil.lab.measuring.health import HealthReport, HealthSnapshot, judge, snapshots_of, take_snapshot
from ipsec_hil.lab.remote.together import each_at_once
from ipsec_hil.lab.timeshare import TRAFFIC, spent


pytestmark = [pytest.mark.tunnels(encap=[True, False], children="one")]

PINGS = 500
PING_INTERVAL = 0.01
"""Own pings through the tunnel between the snapshots: 1,000 packets per end, enough
that a per-packet leak clears any slack of the policy, short (0.01 s apart)."""
BACK_S = 600.0
"""How long an end that dropped its SSH session may take to answer again (a FreeBSD reboot
on hardware: minutes; Appliance.reboot's own default)."""


def snapshot_when_back(app, timeout: float) -> HealthSnapshot:
    """The after snapshot of ``app``, once it answers over SSH again (Appliance.when_back)."""
    return app.when_back(lambda: take_snapshot(app.host), timeout=timeout, poll=1.0, what="the pings lost their session")


def test_health_around_the_configuration(tunnel, record):
    """Both ends' health before and after traffic through the configuration: no change."""
    ends = (tunnel.local, tunnel.remote)
    with allure.step("health before"):
        before = snapshots_of(ends)
    lost = ""
    with allure.step(f"traffic: {PINGS} own pings each way"):
        record.traffic_seconds += PINGS * PING_INTERVAL  # the pings are the traffic asked
        try:
            with spent(TRAFFIC, cap=PINGS * PING_INTERVAL):
                r = tunnel.local.ping(tunnel.inner_address("remote"), size=200, count=PINGS, interval=PING_INTERVAL,
                                      source=tunnel.inner_address("local"))
            record.figure("pings answered between the snapshots", f"{r.received}/{r.transmitted}")
        except TransportError as exc:  # the appliance went away under them: the snapshots say why
            lost = f"{tunnel.local.name}: the pings' SSH session was lost ({exc})"
            record.figure("pings answered between the snapshots", lost)
    reports: list[HealthReport] = []
    with allure.step("health after"):
        after = each_at_once(lambda app: snapshot_when_back(app, BACK_S), ends, name="hil-health")
        # each end judged with its own model's tolerances (the XGS 136's pools are smaller)
        for app, report in zip(ends, judge(ends, before, {app.name: snap for app, snap in zip(ends, after)})):
            table = report.table()
            record.ledgers.append(table)
            allure.attach(table, name=f"health {app.name}", attachment_type=allure.attachment_type.TEXT)
            reports.append(report)
    sick = [rep for rep in reports if not rep.ok]
    assert not sick, ("appliance health changed around the configuration (driver defect):\n"
                      + (f"{lost}\n" if lost else "") + "\n".join(rep.table() for rep in sick))
    assert not lost, f"{lost}, yet both ends' health is unchanged (boot time the same): a lab or network fault"
