"""Interruption at every step of a run: the steps, the four kinds, and one scenario each.

What a scenario is (issue 40): a recording pass runs one configuration's whole run as the
suite makes it (_lab.scenario: the bench's and both appliances' leases, the DUT's driver
swapped, the tunnel brought up, a test body under a twin fault set and cleared, all undone)
through :class:`_inject.InterruptingHost` with a trigger that never fires, and names every
remote call by what it is (_inject.StepNames). Then, for each named step and each kind,
the run is made again and interrupted there:

- ``ctrl-c``: KeyboardInterrupt right after the step's command ran;
- ``cut``: the connection cut just before the step's command (it never reaches the host);
- ``cut-running``: the connection cut while the command runs (the host did it, its answer
  never came back);
- ``sigkill``: the run's process (tests/safety/_driver.py) killed right after the step ran.

After each: the NEXT run's own recovery -- a run WITHOUT ``--driver`` (_lab.next_run: the
bench's lease, then the start recovery every run makes, dead_runs.recover_at_start: the
bench's journal, every appliance's driver journal under the deployment's lease, the tunnel
journals; nothing done by the test) -- and then both appliances and the bench must be as
recorded before (_lab.restored_differences: files anywhere with their modes, routes,
addresses, connections, SAs, SPD, the module and its md5, the bench's namespaces, routes,
addresses, lease and journal). And it must say so (:func:`said`): a DUT left with another
module, or a bench left with the suite's route, is named in that run's record with the
original module's md5 in the page's line and section. So the SIGKILL kind is issue 55's
"a run with ``--driver`` killed at each step, then a run without ``--driver``". A Ctrl-C
must also leave everything restored by the run ITSELF, before any next run (its teardown
finishes through the interrupt).

The twin's fault is the world's state, not the suite's: the harness switches it off after
a scenario, as the hardware's condition would end on its own.
"""

from __future__ import annotations

import ast
import os
import random
import re
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from tests.safety._inject import (Armed, InterruptingHost, Step, after_then_raise, at_step, cut_before, cut_mid_command,
                            describe, recorder, unwrap_hosts)
from tests.safety._lab import (FAULT, PY, bench_host, next_run, reaped, restored_differences, scenario, snapshot,
                         swap_build, wait_for_line)

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.reporting import sections
from ipsec_hil.lab.reporting.page import render_section
from ipsec_hil.lab.topology import TunnelConfig

#: the exhaustive configuration: the lab tunnel with inner IPv6 (the one that also adds
#: routes, an address and the ifdisabled flag), AES-GCM
CONFIG = TunnelConfig("ipv4", "ipv6", "aes-gcm-16", 1)
#: the other configurations of the lab tunnel, each at a sample of its own steps
OTHERS = (TunnelConfig("ipv6", "ipv4", "aes-cbc-hmac-sha256", 1), TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 1))
#: the sample's seed and size (steps per other configuration; each step with all four kinds)
SEED = 40
SAMPLE = 3
KINDS = ("ctrl-c", "cut", "cut-running", "sigkill")
#: each kind's steps are split into this many parts, every PARTS-th step from the part's own
#: first: each part is an xdist work unit with a lab of its own (tests/file_order.py
#: SHARDED_FILES), so the stage's workers share a kind as they share the fault matrix
PARTS = 2
PART_IDS = tuple(f"part{i + 1}of{PARTS}" for i in range(PARTS))
RUN_ID = "safety-every"
DRIVER = os.path.join(os.path.dirname(__file__), "_driver.py")


def config_from_id(text: str) -> TunnelConfig:
    for c in (CONFIG, *OTHERS):
        if c.id == text:
            return c
    raise ValueError(f"no configuration {text!r} here; known: {[c.id for c in (CONFIG, *OTHERS)]}")


@dataclass
class Run:
    """One lab's objects for the scenarios: appliances, bench host, plan, build, fault switch."""

    vlab: Any
    apps: dict
    bench: Any
    plan: Any
    module: str
    twin: Any
    before: dict = field(default_factory=dict)

    @classmethod
    def open(cls, vlab: Any, workdir: str) -> "Run":
        from ipsec_hil.fixtures import build_appliances
        from ipsec_hil.lab.provision import TunnelPlan

        apps, _ = build_appliances(vlab.topo)
        return cls(vlab, apps, bench_host(vlab.topo), TunnelPlan.from_topology(vlab.topo, "lab"),
                   swap_build(workdir), vlab.attach())

    def close(self) -> None:
        for a in self.apps.values():
            a.host.close()
        self.bench.close()

    def fault(self, on: bool) -> None:
        name, params = FAULT
        if on:
            self.twin.fault(self.plan.local.host, name, **params)
        else:
            self.twin.clear_fault(self.plan.local.host, name)

    def wrap(self, armed: Armed) -> None:
        for a in self.apps.values():
            a.host = InterruptingHost(a.host, armed)
        self.bench = InterruptingHost(self.bench, armed)

    def unwrap(self) -> None:
        unwrap_hosts(self.apps)
        while isinstance(self.bench, InterruptingHost):
            self.bench = self.bench.inner

    def run(self, config: TunnelConfig, log: list[str] | None = None) -> None:
        scenario(self.apps, self.bench, self.plan, config, secrets.token_hex(16), RUN_ID, self.module,
                 self.fault, log)

    def record(self, config: TunnelConfig) -> list[Step]:
        steps: list[Step] = []
        self.wrap(Armed(recorder(RUN_ID, steps), lambda *a: None))
        try:
            self.run(config)
        finally:
            self.unwrap()
        return steps

    def differences(self) -> list[str]:
        return restored_differences(self.vlab, self.apps, self.before)

    def settle(self) -> None:
        """The state every scenario must come back to: taken after a first clean run (the
        recording), so what a first run makes once and rightly keeps -- the journal's empty
        directories -- is part of it."""
        self.before = snapshot(self.vlab, self.apps)


def sample(steps: list[Step], k: int, seed: int = SEED) -> list[Step]:
    """``k`` of ``steps`` chosen with ``seed`` (in their order); all of them if fewer."""
    return steps if len(steps) <= k else sorted(random.Random(seed).sample(steps, k), key=steps.index)


_IN_PROCESS: dict[str, tuple[Callable[[], Any], tuple[type[BaseException], ...], bool]] = {
    # kind: (action factory, what the run may raise, may the run complete)
    "ctrl-c": (lambda: after_then_raise(KeyboardInterrupt), (KeyboardInterrupt,), False),
    # the library reconnects once over SSH, so a run may survive a cut before a command
    "cut": (cut_before, (LabError,), True),
    # a lost answer is a failed command (LabError); a teardown step is done again and survives
    "cut-running": (lambda: cut_mid_command(delay=0.2, hold=0.6), (LabError,), True),
}


def interrupt(r: Run, config: TunnelConfig, step: Step, kind: str) -> list[str]:
    """One scenario: the run interrupted at ``step`` in ``kind``'s way, then the next run's
    recovery; what is not restored (empty: all is)."""
    problems: list[str] = []
    if kind == "sigkill":
        problems += _killed(r, config, step)
    else:
        action, expected, may_complete = _IN_PROCESS[kind]
        match = at_step(RUN_ID, step)
        armed = Armed(match, action())
        r.wrap(armed)
        try:
            r.run(config)
            if not may_complete:
                problems.append("the run was not interrupted")
        except expected:
            pass
        except BaseException as exc:  # noqa: BLE001 -- named in the failure, the next scenario still runs
            problems.append(f"raised {type(exc).__name__}: {str(exc)[:200]}")
        finally:
            r.unwrap()
        if not armed.fired.is_set():
            problems.append(f"the step was never reached (the recording and this run differ; {match.nearest()})")
        if kind == "ctrl-c":
            problems += [f"after the run's own teardown: {d}" for d in r.differences()]
    r.twin.clear_faults()  # the world's state (see the module's doc), not the suite's
    left = left_behind(r)
    try:
        found = next_run(r.vlab.topo)
    except LabError as exc:
        problems.append(f"the next run's recovery failed: {str(exc)[:300]}")
    else:
        problems += said(found, left, r.before["dut3300"]["module"])
    problems += r.differences()
    return problems


def left_behind(r: Run) -> dict[str, bool]:
    """What the interrupted run left that the next run must say it undid: another module on
    the DUT (its md5 or its loaded state differ), the suite's route on the bench."""
    from tests.safety._lab import module

    bench = r.vlab.namespaces["bench"]
    routes = subprocess.run(["ip", "-n", bench, "route", "show", "table", "all", "proto", "147"],
                            capture_output=True, text=True, timeout=10).stdout
    return {"driver": module(r.apps["dut3300"]) != r.before["dut3300"]["module"], "bench": bool(routes.strip())}


def said(found: Any, left: dict[str, bool], original: tuple) -> list[str]:
    """The next run's record names what it undid: the DUT's driver with the original
    module's md5 (in the first screen's line by its first 8 digits, in the section whole),
    the bench's route."""
    problems = []
    if left["driver"]:
        u = next((u for u in found.undone if u.host == "dut3300" and u.journal == "driver"), None)
        on_page = sections.dead_runs(found)
        line, section = found.line() or "", render_section(on_page) if on_page else ""
        if u is None:
            problems.append(f"the DUT's module was {'another build' if original else '?'} and the next run did not say "
                            f"it restored it: {found.terminal_lines()}")
        elif u.md5 != original[0] or original[0][:8] not in line or original[0] not in section:
            problems.append(f"the next run's record does not name the original module md5 {original[0]}: "
                            f"{u.md5!r}, line {line[:200]!r}")
    if left["bench"] and not any(u.journal == "bench" for u in found.undone):
        problems.append(f"the bench's route was left and the next run did not say it removed it: "
                        f"{found.terminal_lines()}")
    return problems


def _killed(r: Run, config: TunnelConfig, step: Step) -> list[str]:
    env = dict(os.environ, HIL_SAFETY_PSK=secrets.token_hex(16))
    proc = subprocess.Popen([PY, DRIVER, "pause-at", str(r.vlab.resolved), RUN_ID, repr(step), config.id,
                             r.module, str(r.vlab.run_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with reaped(proc):
        try:
            wait_for_line(proc, "AT ", 60)
        except AssertionError as exc:
            proc.kill()
            return [f"the driver never reached it ({exc}); stderr {proc.stderr.read()[-400:]!r}; "
                    f"the peer's IPv6 routes then: {_routes6(r)}"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    return []


def _routes6(r: Run) -> str:
    """The peer's ``netstat -rn -f inet6`` (why a run could not add its route)."""
    try:
        out = r.apps["peer3300"].host.run("netstat -rn -f inet6").stdout
    except LabError as exc:
        return f"unreadable: {exc}"
    return " | ".join(line for line in out.splitlines() if "fd00" in line)


def run_all(r: Run, config: TunnelConfig, steps: list[Step], kinds: tuple[str, ...], what: str,
            total: int) -> None:
    """Every (step, kind) of ``steps`` x ``kinds``; prints the count and seconds; fails
    naming every scenario not restored (all still run, so one run shows them all).

    ``SAFETY_STEPS=REGEX`` keeps only the steps whose description matches (debugging one
    fix; the count printed says how many of all ran)."""
    only = os.environ.get("SAFETY_STEPS")
    if only:
        steps = [s for s in steps if re.search(only, describe(s))]
        what += f" (only SAFETY_STEPS={only!r})"
    failures: list[str] = []
    t0 = time.monotonic()
    for step in steps:
        for kind in kinds:
            problems = interrupt(r, config, step, kind)
            if problems:
                failures.append(f"{kind} at {describe(step)}: {'; '.join(problems)}")
                print(f"NOT RESTORED {failures[-1]}", flush=True)
    n = len(steps) * len(kinds)
    seconds = time.monotonic() - t0
    print(f"\n{what}: {len(steps)} steps (of {total}) x {len(kinds)} kinds ({', '.join(kinds)}) = {n} scenarios "
          f"in {seconds:.1f} s ({seconds / max(1, n):.1f} s each), {len(failures)} not restored")
    assert not failures, f"{what}: {len(failures)} of {n} scenarios not restored:\n" + "\n".join(failures)


def part_of(steps: list[Step], part: str) -> list[Step]:
    """The steps of ``part`` (one of :data:`PART_IDS`): every PARTS-th, from its own first."""
    i = PART_IDS.index(part)
    return steps[i::PARTS]


def run_kind(r: Run, kind: str, part: str) -> None:
    """Every step of :data:`CONFIG`'s part ``part``, interrupted in ``kind``'s way."""
    steps = r.record(CONFIG)
    r.settle()
    mine = part_of(steps, part)
    run_all(r, CONFIG, mine, (kind,), f"{kind}, {CONFIG.id}, {part} (steps {PART_IDS.index(part) + 1}, "
            f"{PART_IDS.index(part) + 1 + PARTS}, ... of {len(steps)})", len(steps))


#: the marks of every every-step file (its own CI stage: tests/safety/conftest.py)
MARKS = [pytest.mark.needs_root, pytest.mark.safety_exhaustive]


def kind_test(kind: str) -> Callable[..., None]:
    """``kind``'s test, one case a part. Each kind is a file of its own (test_every_step*.py,
    each part an xdist unit with its own lab: tests/file_order.py SHARDED_FILES); the test is
    the same in each, so it is made here and the file only names it."""

    @pytest.mark.parametrize("part", PART_IDS)
    def test(every: Run, part: str) -> None:
        run_kind(every, kind, part)

    test.__name__ = test.__qualname__ = f"test_{kind.replace('-', '_')}_at_every_step"
    test.__doc__ = f"Every step of {CONFIG.id}'s part ``part``, interrupted by {kind}."
    return test


def parse_step(text: str) -> Step:
    return tuple(ast.literal_eval(text))  # type: ignore[return-value]
