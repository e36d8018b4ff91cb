"""``--save-baseline FILE`` / ``--baseline FILE`` / ``--gate``: the merge gate's hooks.

Thin hooks over :mod:`plugin.lab.baseline` (pure). Controller only; the figures come from
what plugin.records gathered in the controller (``config.stash[records.ENTRIES_KEY]``:
every test's record, carried from xdist workers in the reports' user_properties).

- ``pytest_configure``: ``--gate`` needs ``--baseline``; the baseline file is loaded and
  validated at once (a bad file is a usage error, exit 4, naming the file and field --
  before an hour of measurements).
- ``pytest_sessionfinish`` (``trylast``: after plugin.session wrote the page and Allure's
  files): read the appliances' driver builds and kernel (environment), compare with the
  baseline (a "Compared with baseline" section appended to the page, ``baseline-comparison.json``
  beside it, an Allure result "Compared with baseline" with the table attached plus
  ``baseline.*`` environment keys), then save this run as a repeat if asked. With
  ``--gate`` a regression sets the exit code :data:`GATE_REGRESSION` (18).
- ``pytest_terminal_summary``: the verdict and the driver builds compared.

Saving refuses a run whose exit status is not 0: a baseline is a reference, and a run with
failed or broken tests is not one (its figures are still on the page).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from plugin.lab import baseline as bl

log = logging.getLogger(__name__)

__all__: list[str] = []

#: ``--gate`` and a regression: the run's exit code (pytest's are 0-6; 17 lab not up,
#: 19/20 driver deploy/restore failed -- see plugin.driver_plugin)
GATE_REGRESSION = 18

PAGE_NAME = "measurement-page.md"
COMPARISON_JSON = "baseline-comparison.json"


@dataclass
class GateRun:
    save: Path | None = None
    against: Path | None = None
    gate: bool = False
    base: bl.Baseline | None = None
    comparison: bl.Comparison | None = None
    saved: bl.Baseline | None = None
    messages: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)


GATE_RUN_KEY = pytest.StashKey[GateRun]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil")
    group.addoption("--save-baseline", metavar="FILE", default=None,
                    help="save this run's figures, counters and environment as a baseline (a file that "
                    "exists gets one more repeat: the spread of the repeats is the noise)")
    group.addoption("--baseline", metavar="FILE", default=None,
                    help="compare this run's rates with a baseline: below mean - max(3 x stdev, 2 %% of "
                    "mean) is a regression (page section 'Compared with baseline')")
    group.addoption("--gate", action="store_true", default=False,
                    help=f"with --baseline: any regression makes the run exit {GATE_REGRESSION}")


def _path(config: pytest.Config, value: str | None) -> Path | None:
    if not value:
        return None
    p = Path(value)
    return p if p.is_absolute() else Path(config.invocation_params.dir) / p


def pytest_configure(config: pytest.Config) -> None:
    g = GateRun(save=_path(config, config.getoption("--save-baseline", None)),
                against=_path(config, config.getoption("--baseline", None)),
                gate=bool(config.getoption("--gate", False)))
    config.stash[GATE_RUN_KEY] = g
    if g.gate and g.against is None:
        raise pytest.UsageError("--gate needs --baseline FILE (the run to compare with)")
    if hasattr(config, "workerinput"):
        return
    if g.against is not None:
        try:
            g.base = bl.load(g.against)
        except bl.BaselineError as exc:
            raise pytest.UsageError(f"--baseline: {exc}") from None
    if g.save is not None and g.save.exists():
        try:
            bl.load(g.save)
        except bl.BaselineError as exc:
            raise pytest.UsageError(f"--save-baseline: the file exists but is not a baseline: {exc}") from None


# ----------------------------------------------------------------- helpers shared with driver_plugin


def page_path(config: pytest.Config) -> Path:
    from plugin.session import reports_dir

    return reports_dir(config) / PAGE_NAME


def append_to_page(config: pytest.Config, section: str) -> Path | None:
    """Append a Markdown section to this run's page, atomically.

    Only to a page this run wrote: the page's path is shared by every run started from the
    same checkout (``reports/``), so a page without this run's command line on it belongs
    to another run and is left alone (the section is then only in the terminal/JSON).
    """
    from plugin.session import command_line

    p = page_path(config)
    if not p.exists():
        return None
    old = p.read_text(encoding="utf-8")
    if f"Command: `{command_line(config)}`" not in old:
        log.warning("page %s is not this run's (another run wrote it since); section not appended", p)
        return None
    text = old.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
    return p


def _prop(s: str) -> str:
    return str(s).replace("\\", "\\\\").replace("\n", "\\n").replace("=", "\\=").replace(":", "\\:")


def append_allure_environment(config: pytest.Config, values: dict[str, str]) -> Path | None:
    """Add ``key=value`` lines to Allure's environment.properties (written by plugin.session)."""
    alluredir = getattr(config.option, "allure_report_dir", None)
    if not alluredir or not values:
        return None
    p = Path(alluredir) / "environment.properties"
    old = p.read_text(encoding="utf-8") if p.exists() else ""
    text = old + "".join(f"{_prop(k)}={_prop(v)}\n" for k, v in values.items())
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.gate-tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
    return p


def write_allure_result(config: pytest.Config, comparison: bl.Comparison) -> Path | None:
    """One Allure result, "Compared with baseline", failed on a regression, with the table
    (Markdown) and the comparison (JSON) attached -- run-level facts have no test of their own."""
    alluredir = getattr(config.option, "allure_report_dir", None)
    if not alluredir:
        return None
    d = Path(alluredir)
    d.mkdir(parents=True, exist_ok=True)
    now = int(time.time() * 1000)
    md_src = f"{uuid.uuid4()}-attachment.md"
    js_src = f"{uuid.uuid4()}-attachment.json"
    (d / md_src).write_text(comparison.markdown(), encoding="utf-8")
    (d / js_src).write_text(json.dumps(comparison.to_dict(), indent=1) + "\n", encoding="utf-8")
    status = "passed" if comparison.passed else "failed"
    result = {
        "uuid": str(uuid.uuid4()),
        "historyId": "ipsec-hil-gate-baseline",
        "name": "Compared with baseline",
        "fullName": "gate::compared_with_baseline",
        "status": status,
        "statusDetails": {"message": comparison.summary() + ". Builds: " + comparison.builds_line()},
        "stage": "finished",
        "start": now,
        "stop": now,
        "description": f"Baseline {comparison.source}; builds compared: {comparison.builds_line()}",
        "attachments": [
            {"name": "baseline comparison", "source": md_src, "type": "text/markdown"},
            {"name": "baseline comparison.json", "source": js_src, "type": "application/json"},
        ],
        "labels": [{"name": "suite", "value": "gate"}, {"name": "framework", "value": "pytest"}],
    }
    out = d / f"{result['uuid']}-result.json"
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return out


# ----------------------------------------------------------------- what the run recorded


def run_figures(config: pytest.Config) -> tuple[list[bl.FigureValue], dict[str, list[str]], dict[str, str]]:
    """(figures, ledger tables per test, outcome per test) from plugin.records' entries."""
    from plugin.records import ENTRIES_KEY

    entries = config.stash.get(ENTRIES_KEY, {}) or {}
    figures: list[bl.FigureValue] = []
    counters: dict[str, list[str]] = {}
    outcomes: dict[str, str] = {}
    for raw_id, e in sorted(entries.items()):
        nodeid = bl.canonical_nodeid(raw_id)  # without xdist's @group: serial and -n runs compare
        outcomes[nodeid] = str(e.get("outcome", "passed"))
        rec = e.get("record") or {}
        for f in rec.get("figures", []) or []:
            figures.append(bl.FigureValue(nodeid, str(f.get("label", "")), f.get("value"), str(f.get("unit", ""))))
        if rec.get("ledgers"):
            counters[nodeid] = [str(t) for t in rec["ledgers"]]
    return figures, counters, outcomes


def run_environment(config: pytest.Config) -> dict[str, Any]:
    """Topology, virtual or not, and every appliance's driver build and kernel, read now."""
    from plugin.fixtures import build_appliances
    from plugin.lab.report import hardware_info
    from plugin.session import active_topology, command_line

    topology = active_topology(config)
    apps_env: list[bl.ApplianceEnv] = []
    apps, hosts = build_appliances(topology)
    try:
        for app in apps.values():
            h = hardware_info(app)
            apps_env.append(bl.ApplianceEnv(h.appliance, h.model, h.driver, h.module_md5, h.module_size, h.kernel))
    finally:
        for h in hosts.values():
            try:
                h.close()
            except Exception:  # noqa: BLE001
                pass
    return bl.environment(topology=topology.lab.name, virtual=bool(topology.lab.virtual), appliances=apps_env,
                          traffic_seconds=config.getoption("--traffic-seconds", None),
                          command=command_line(config))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    g = config.stash.get(GATE_RUN_KEY, None)
    if g is None or hasattr(config, "workerinput") or (g.save is None and g.base is None):
        return
    figures, counters, outcomes = run_figures(config)
    try:
        g.environment = run_environment(config)
    except Exception as exc:  # noqa: BLE001 -- the comparison still runs; builds are "unknown"
        g.messages.append(f"could not read the appliances' driver builds: {type(exc).__name__}: {exc}")
        from plugin.session import active_topology

        topo = active_topology(config)
        g.environment = bl.environment(topology=topo.lab.name, virtual=bool(topo.lab.virtual), appliances=[])
    if g.base is not None:
        c = bl.compare(g.base, figures, g.environment)
        g.comparison = c
        append_to_page(config, c.markdown())
        from plugin.session import reports_dir

        out = reports_dir(config)
        out.mkdir(parents=True, exist_ok=True)
        (out / COMPARISON_JSON).write_text(json.dumps(c.to_dict(), indent=1) + "\n", encoding="utf-8")
        env = {"baseline.file": c.source, "baseline.repeats": str(c.repeats), "baseline.verdict": c.summary()}
        for name, md5 in c.baseline_builds.items():
            env[f"baseline.{name}.module.md5"] = md5 or "unknown"
        append_allure_environment(config, env)
        write_allure_result(config, c)
        g.messages.append(f"baseline {c.source}: {c.summary()}")
        g.messages.append(f"driver builds compared: {c.builds_line()}")
        for r in c.regressions:
            g.messages.append(f"  REGRESSION {r.key}: {r.current:.1f} Mbit/s < {r.mean:.1f} - {r.noise:.1f}")
        if g.gate and c.regressions and session.exitstatus in (0, 1):
            session.exitstatus = GATE_REGRESSION
            g.messages.append(f"--gate: {len(c.regressions)} regression(s): exit {GATE_REGRESSION}")
    if g.save is not None:
        if session.exitstatus != 0:
            g.messages.append(f"--save-baseline {g.save}: NOT saved, the run's exit status is "
                              f"{int(session.exitstatus)} (a baseline must be a passing run)")
        elif not any(f.is_rate for f in figures):
            g.messages.append(f"--save-baseline {g.save}: NOT saved, the run recorded no rate")
        else:
            rep = bl.Repeat(date=bl.now_iso(), environment=g.environment, figures=figures, counters=counters,
                            outcomes=outcomes)
            try:
                g.saved = bl.save(g.save, rep)
                g.messages.append(f"baseline saved: {g.save} (repeat {len(g.saved.repeats)}, "
                                  f"{sum(1 for f in figures if f.is_rate)} rates)")
            except bl.BaselineError as exc:
                g.messages.append(f"--save-baseline: NOT saved: {exc}")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    g = config.stash.get(GATE_RUN_KEY, None)
    if g is None or not g.messages:
        return
    terminalreporter.section("baseline and gate")
    for m in g.messages:
        terminalreporter.write_line(m)
