"""The appliances' health around each tunnel configuration (issue 42).

Why: a driver that leaks an mbuf per packet, logs an error or reboots under a
configuration's traffic is a defect whichever test's traffic did it; one health test with
its own pings (tests_hil/test_health.py) sees only what its pings cause. So every
configuration is judged as a whole: both ends' health (boot time, the driver loaded,
kernel log lines added, netstat -m, the driver's UMA zones and malloc types; one SSH round
trip per end, ipsec_hil.lab.measuring.health) is taken right after the configuration is
brought up -- before its first test -- and again after its last test, and the diff is judged
with the tolerances of each end's model (HardwareProfile.health).

The last test of a configuration is known at collection: the plugin runs a
configuration's tests together (ipsec_hil.fixtures.pytest_collection_modifyitems), so it
is the last item of its case in the final order. A test that reboots an appliance on
purpose (Appliance.reboots moved) is followed by a new baseline: the health across that
reboot is that test's own subject.

A change beyond the tolerances fails the run: the last test's teardown raises
:class:`ConfigurationHealthDefect` with both ends' tables, and the controller
(ipsec_hil.records.Entries) marks EVERY test of the configuration failed with the tables
attached to its entry on the measurement page. The health of every configuration, healthy
or not, is attached in Allure to its last test.

``--no-config-health`` (ini ``hil_config_health = false``) leaves it out: the fault matrix
(tests/teeth) runs single nodes and judges each by its own assertion, and the snapshots
would double its SSH round trips; the project's own test of this module turns it on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import allure
import pytest

from ipsec_hil.lab.measuring.health import HealthReport, HealthSnapshot, judge, snapshots_of
from ipsec_hil.lab.sharing.holds import HOLDS

PROPERTY = "hil_config_health"
"""The user property a configuration's last test carries: {"case", "ok", "tables"}."""

OPTION, INI = "--no-config-health", "hil_config_health"


class ConfigurationHealthDefect(AssertionError):
    """An appliance's health changed beyond its model's tolerances around one configuration
    (an AssertionError: a driver defect, not a lab problem)."""


@dataclass
class _Baseline:
    """One configuration's before-snapshots and the reboot counts they were taken at."""

    apps: tuple[Any, ...]
    before: dict[str, HealthSnapshot]
    reboots: dict[str, int] = field(default_factory=dict)


@dataclass
class HealthAround:
    """This process's part of the judgement (kept in its RunContext, ipsec_hil.context):
    which test closes each configuration, and each configuration's baseline."""

    last_of_case: dict[str, str] = field(default_factory=dict)  # nodeid -> case id
    baselines: dict[str, _Baseline] = field(default_factory=dict)  # case id -> baseline


def add_options(parser: pytest.Parser, group: Any) -> None:
    group.addoption(OPTION, action="store_true", default=False,
                    help="do not judge the appliances' health around each tunnel configuration "
                    "(the fault matrix's single-node runs)")
    parser.addini(INI, "judge the appliances' health around each tunnel configuration", type="bool", default=True)


def enabled(config: pytest.Config) -> bool:
    return bool(config.getini(INI)) and not config.getoption(OPTION, False)


def note_last_items(state: HealthAround, cases: Sequence[tuple[str, str | None]]) -> None:
    """``cases``: (nodeid, case id or None) in the run's final order; the last nodeid of each case."""
    last = {case: nodeid for nodeid, case in cases if case is not None}
    state.last_of_case = {nodeid: case for case, nodeid in last.items()}


def _reboots(apps: Sequence[Any]) -> dict[str, int]:
    return {app.name: int(getattr(app, "reboots", 0)) for app in apps}


def take_baseline(config: pytest.Config, state: HealthAround, case_id: str, apps: Sequence[Any]) -> None:
    """Right after the configuration's bring-up: both ends' health, the baseline."""
    if not enabled(config):
        return
    apps = tuple(apps)
    with allure.step(f"health before {case_id}"):
        b = state.baselines[case_id] = _Baseline(apps, snapshots_of(apps), _reboots(apps))
    for app in apps:  # a reboot a test asks for on purpose starts a new baseline once it is back
        app.after_reboot.append(lambda b=b: _rebaseline_after_reboot(b))


def _rebaseline_after_reboot(b: _Baseline) -> None:
    if _reboots(b.apps) != b.reboots:
        b.before, b.reboots = snapshots_of(b.apps), _reboots(b.apps)


def after_test(item: pytest.Item, case_id: str | None, state: HealthAround) -> None:
    """After a tunnel test: a new baseline when it rebooted an end on purpose; after the
    configuration's last test, the judgement (raises ConfigurationHealthDefect). Nothing
    once this run has lost a lease or place (HOLDS): no command goes to an appliance the
    run no longer holds, and the new holder's recovery owns what is there."""
    if case_id is None or case_id not in state.baselines or HOLDS.losses:
        return
    b = state.baselines[case_id]
    if state.last_of_case.get(item.nodeid) != case_id:
        _rebaseline_after_reboot(b)
        return
    del state.baselines[case_id]
    for app in b.apps:
        app.after_reboot.clear()
    if _reboots(b.apps) != b.reboots:  # a reboot not waited for: no baseline after it to judge from
        return
    with allure.step(f"health after {case_id}"):
        reports = judge(b.apps, b.before, snapshots_of(b.apps))
        tables = [rep.table() for rep in reports]
        for app, table in zip(b.apps, tables):
            allure.attach(table, name=f"health of {app.name} around {case_id}",
                          attachment_type=allure.attachment_type.TEXT)
    ok = all(rep.ok for rep in reports)
    item.user_properties.append((PROPERTY, json.dumps({"case": case_id, "ok": ok, "tables": tables})))
    if not ok:
        raise ConfigurationHealthDefect(message(case_id, reports))


def message(case_id: str, reports: Sequence[HealthReport]) -> str:
    """The failure text: which configuration, then each sick end's table."""
    sick = [rep for rep in reports if not rep.ok]
    first = sick[0].findings[0]
    return (f"appliance health changed around configuration {case_id} (driver defect): "
            f"{sick[0].host} {first.check} {first.subject} {first.before} -> {first.after} ({first.change}, "
            f"limit {first.limit})\n" + "\n".join(rep.table() for rep in sick))


def findings_of(report_properties: Sequence[tuple[str, object]]) -> Iterator[dict[str, Any]]:
    """The configuration-health verdicts a test report carries (controller side)."""
    for name, value in report_properties:
        if name == PROPERTY:
            yield json.loads(str(value))
