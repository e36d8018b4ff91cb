"""The merge decision's power, measured on a lab (issue 41): a benchmark that prints figures.

Why: the decision's simulation (``python -m ipsec_hil.lab.decision.sequential``) says what
the rule does with the noise it assumes; this says what the whole comparison phase does on
a lab -- build swaps, warm-up streams, TCP, the DUT's CPU ticks, the lab's own noise. It
runs :func:`ipsec_hil.lab.comparing.build_comparison.compare_builds` (the code the gate
runs) again and again on one tunnel, with candidates built to differ from the parent by a
known factor, and counts the verdicts. No assert: the table is the result.

Scenarios, each a candidate of the XGS 136's driver against a parent:

- ``identical``: the same file contents (own md5 each: a random tail);
- ``rate x F``: the twin's marker ``twin-rate-factor=F`` -- an engine paced to F of the port;
- ``cpu x F``: ``twin-cpu-factor=1/F`` -- the same rate, 1/F the kernel CPU per packet (a
  build that still fills the link and costs more: "F of the parent" in efficiency).

Identical builds are judged on both figures (``up``, ``cpu``): a regression or progression
on either is a false alarm, an unresolved figure is neither a false alarm nor a pass (its own
column). A regression scenario's changed figure is detected only as a regression; an
unresolved one is counted in the unresolved column, never as "no change" or silently as
not detected (issue 54: a CPU x0.95 decision ended unresolved at x1.041 [1.019, 1.063]). A
regression scenario measures only the figure its
build changes (the CPU figure still rides on an up stream): the gate's sequential design
stops when every figure it measures is decided, and an unchanged figure proving itself
within +-2.5 % would hold each decision to the budget -- the identical builds measure that.
Each decision is judged twice, on the same trials: by the sequential design (the gate's
default: pairs until each figure decides against +-2.5 %, budget ``budget``) and by the
fixed design it replaced (compare_trials' +-5 % bootstrap rule on the first
``FIXED_PAIRS`` pairs, or on all when the sequential design stopped earlier). The
fixed design had no CPU figure: its CPU rows show what the rule would have said, and its
rate rows what a gate of that design saw of a costlier build.

Replay (issue 54, ``--replay RUNS``): every decision is recorded with its trials (``trials``:
figure -> [role, value] in measurement order); the replay re-decides RUNS times by drawing
pairs from the identical builds' recorded pairs, shifted to each level from 0.90 to 1.00
(ipsec_hil.lab.decision.replay): the power curve and the false alarms to a percent, each
with its Wilson interval, a decision's lab time (pairs x the live seconds a pair), and each
live scenario's count against the curve. ``--kinds``, ``--levels``, ``--append`` run a
bounded live set into the same file; ``--table-only --replay`` re-reads it.

The lab should carry its noise model (``noise:`` on the DUT in the lab file): the twin's
paced engine is otherwise nearly deterministic and the figures would say nothing of a real
lab. ``tools/decision-power`` writes such a copy of the lab file and runs this.

The lab: ``--topology``'s file, a virtual lab's template started here (and torn down), a
running virtual lab's lab.resolved.yaml or a hardware lab used as it is. Exit status: 0 the
table printed; 2 a lab file that is missing or invalid, an option it cannot take, no
``--out`` to read for ``--table-only`` (one line: ipsec_hil.cli); 17 the virtual lab did
not come up (ipsec_hil.exitcodes LAB_NOT_UP).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ipsec_hil.cli import ArgumentParser, InputError, load_lab_file, unreadable
from ipsec_hil.exitcodes import HilExitCode
from ipsec_hil.lab.cases import tunnel_cases
from ipsec_hil.lab.decision.compare import FigureTrials, Rule, compare_trials
from ipsec_hil.lab.decision.sequential import FIXED_PAIRS, SequentialRule
from ipsec_hil.lab.driver import DriverDeployment
from ipsec_hil.lab.live_lab import Lab
from ipsec_hil.lab.comparing.build_comparison import (CPU, DEFAULT_SECONDS, DEFAULT_WARMUP_S, FIGURES,
                                                      RATE_CONFIGURATION, Builds, compare_builds,
                                                      direction_of, figure_name, unit_of)
from ipsec_hil.lab.tunnel import bring_up
from ipsec_hil.virtual_lab import VirtualLabError

LEVELS = (0.98, 0.95, 0.90, 0.80)


@dataclass(frozen=True)
class Scenario:
    """A candidate: which figure it changes (None: identical) and by what factor of the parent."""

    kind: str | None  # "up" (rate) or "cpu", None for identical builds
    level: float = 1.0

    @property
    def name(self) -> str:
        return "identical" if self.kind is None else f"{'rate' if self.kind == 'up' else 'cpu'} x{self.level:g}"

    def marker(self) -> bytes:
        if self.kind == "up":
            return f"twin-rate-factor={self.level:g}\n".encode()
        if self.kind == "cpu":
            return f"twin-cpu-factor={1.0 / self.level:.4f}\n".encode()
        return b""


def scenarios(levels: Sequence[float] = LEVELS) -> list[Scenario]:
    return [Scenario(None)] + [Scenario(k, lv) for k in FIGURES for lv in levels]


@dataclass
class Decision:
    """One comparison's outcome under both designs."""

    scenario: str
    kind: str | None
    level: float
    pairs: int
    wall_seconds: float
    fixed_seconds: float  # the phase's time up to the fixed design's last trial
    sequential: dict[str, dict] = field(default_factory=dict)  # figure -> verdict, ratio, ci, equivalence
    fixed: dict[str, dict] = field(default_factory=dict)
    error: str | None = None
    #: figure -> [[role, value], ...] in measurement order: what ``--replay`` resamples
    trials: dict[str, list] = field(default_factory=dict)


def _fake_build(path: Path, driver: str, tag: str, marker: bytes) -> Path:
    """A module file the twin loads: it reads only the marker lines; the random tail gives
    every build its own md5 (identical builds are different files, as two builds are)."""
    path.write_bytes(b"\x7fELF " + driver.encode() + b" " + tag.encode() + b"\n" + marker + os.urandom(2048))
    return path


def _summary(c) -> dict:
    return {"verdict": c.verdict.value, "ratio": round(c.ratio, 4), "ci": [round(c.ci_low, 4), round(c.ci_high, 4)],
            "equivalence_proved": c.equivalence_proved, "pairs": c.n_parent}


def _unresolved(row: dict) -> bool:
    """A figure left unresolved. Records written before issue 54 (``--table-only`` on an old
    file) called it "no change" without ``equivalence_proved``."""
    return row["verdict"] == "unresolved" or (row["verdict"] == "no change" and not row["equivalence_proved"])


def decide(active, dep: DriverDeployment, scenario: Scenario, workdir: Path, *, seconds: float,
           rule: SequentialRule, warmup: float | None = None) -> Decision:
    """One comparison of a fresh parent and candidate on ``active`` (the candidate loaded
    first, as after ``--driver``), judged by both designs."""
    driver = active.local.profile.driver
    tag = uuid.uuid4().hex[:8]
    parent = _fake_build(workdir / f"{driver}-parent-{tag}.ko", driver, "parent", b"")
    candidate = _fake_build(workdir / f"{driver}-cand-{tag}.ko", driver, "candidate", scenario.marker())
    dep.switch_to(candidate)
    figures = FIGURES if scenario.kind is None else (scenario.kind,)
    r = compare_builds(active, [dep], Builds(active.local.profile.model, parent, candidate), pairs=rule.max_pairs,
                       seconds=seconds, figures=figures, sequential=rule, warmup=warmup)
    fixed_end = [t.started for t in r.trials if t.index < 2 * FIXED_PAIRS]
    d = Decision(scenario.name, scenario.kind, scenario.level, r.pairs, round(r.wall_seconds, 1),
                 round(max(fixed_end, default=0.0) + seconds, 1), error=r.error)
    if r.error:
        return d
    for figure, c in zip(figures, r.comparisons):
        d.sequential[figure] = _summary(c)
        name = figure_name(figure, seconds)
        d.trials[figure] = [[t.role, t.value] for t in r.trials if t.figure == name]
        trials = [(t.role, t.value) for t in r.trials if t.figure == name and t.index < 2 * FIXED_PAIRS]
        if len(trials) % 2:
            trials = trials[:-1]
        d.fixed[figure] = _summary(compare_trials(
            FigureTrials(name, trials, direction=direction_of(figure), unit=unit_of(figure)), rule=Rule()))
    return d


def _rates(decisions: list[Decision], design: str, figure: str) -> dict:
    rows = [getattr(d, design)[figure] for d in decisions if not d.error]
    n = len(rows)
    if not n:
        return {"n": 0}
    width = [r["ci"][1] - r["ci"][0] for r in rows]
    return {"n": n,
            "regression": sum(r["verdict"] == "regression" for r in rows) / n,
            "progression": sum(r["verdict"] == "progression" for r in rows) / n,
            "unresolved": sum(_unresolved(r) for r in rows) / n,
            "equivalent": sum(r["equivalence_proved"] for r in rows) / n,
            "median_ratio": statistics.median(r["ratio"] for r in rows),
            "median_width": statistics.median(width),
            "median_pairs": statistics.median(r["pairs"] for r in rows)}


def table(decisions: list[Decision]) -> list[str]:
    """The printed table: per scenario and design, what the changed figure's verdicts were
    (detection), what the unchanged figure's were (false alarms), how many of the figures
    shown were unresolved (the changed one's when there is one, else the unchanged ones'),
    and the time it took."""
    out = ["| scenario | design | N | detected (changed figure: regression) | false alarms (unchanged figure "
           "called different) | unresolved | median ratio [median interval width] | median pairs | "
           "median s / decision |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    by: dict[str, list[Decision]] = {}
    for d in decisions:
        by.setdefault(d.scenario, []).append(d)
    for name, ds in by.items():
        kind = ds[0].kind
        ok = [d for d in ds if not d.error]
        for design in ("sequential", "fixed"):
            changed = _rates(ok, design, kind) if kind else None
            others = [f for f in FIGURES if f != kind and all(f in getattr(d, design) for d in ok)]
            alarms = [_rates(ok, design, f) for f in others]
            false = round(sum((a.get("regression", 0) + a.get("progression", 0)) * a.get("n", 0) for a in alarms))
            count = sum(a.get("n", 0) for a in alarms)
            shown = [(kind, changed)] if changed else list(zip(others, alarms))
            unresolved = round(sum(r.get("unresolved", 0) * r.get("n", 0) for _, r in shown))
            judged = sum(r.get("n", 0) for _, r in shown)
            secs = statistics.median(d.wall_seconds if design == "sequential" else d.fixed_seconds for d in ok) if ok else 0
            out.append(
                f"| {name} | {design} | {len(ok)}{f' ({len(ds) - len(ok)} failed)' if len(ok) < len(ds) else ''} | "
                f"{'-' if not changed else format(changed['regression'], '.0%')} | "
                f"{f'{false}/{count} ({false / count:.0%})' if count else '-'} | "
                f"{f'{unresolved}/{judged} ({unresolved / judged:.0%})' if judged else '-'} | "
                + ", ".join(f"{'' if changed else f + ' '}{r.get('median_ratio', 0):.3f} [{r.get('median_width', 0):.3f}]"
                            for f, r in shown) + " | "
                + ", ".join(f"{r.get('median_pairs', 0):g}" for _, r in shown) + f" | {secs:.0f} |")
    return out


def pairs_needed(sd: float, rule: SequentialRule, effect: float, power: float = 0.95) -> int | None:
    """The fewest pairs at which a figure whose per-pair log ratio has spread ``sd`` decides
    as wanted with probability ``power`` under ``rule``'s per-look level: for ``effect`` 1.0
    identical builds proved within the margin, else a ``effect`` (e.g. 0.95) regression
    found (its interval wholly past the margin). None: not within 1,000 pairs."""
    import math

    from ipsec_hil.lab.decision.sequential import t_quantile

    z = statistics.NormalDist().inv_cdf(power)
    room = math.log(1 + rule.margin) if effect == 1.0 else abs(math.log(effect)) - abs(math.log(1 - rule.margin))
    if room <= 0:
        return None
    for k in range(max(2, rule.min_pairs), 1001):
        t = t_quantile(0.5 + rule.level_per_look() / 2, k - 1)
        if (t + (z if effect != 1.0 else 0.0)) * sd / math.sqrt(k) < room:
            return k
    return None


def measured_noise(decisions: list[Decision], rule: SequentialRule) -> list[str]:
    """What the identical builds' intervals say of each figure's noise, and the pairs it asks
    for: the spread of a pair's log ratio is recovered from each interval (half width x
    sqrt(pairs) / t), its median taken; from it, the pairs that prove +-margin for identical
    builds (half the time: the interval's expected width) and that find a 5 % regression in
    95 % of runs. The trial length and budget to choose follow from these lines."""
    import math

    from ipsec_hil.lab.decision.sequential import t_quantile

    out = []
    for figure in FIGURES:
        sds = []
        for d in decisions:
            v = d.sequential.get(figure) if d.kind is None and not d.error else None
            if v and v["pairs"] >= 3 and v["ci"][0] > 0:
                t = t_quantile(0.5 + rule.level_per_look() / 2, v["pairs"] - 1)
                sds.append((math.log(v["ci"][1]) - math.log(v["ci"][0])) / 2 * math.sqrt(v["pairs"]) / t)
        if not sds:
            continue
        sd = statistics.median(sds)
        eq, find = pairs_needed(sd, rule, 1.0, power=0.5), pairs_needed(sd, rule, 0.95)
        out.append(f"- {figure}: per-pair log-ratio spread {100 * sd:.2f} % (median of {len(sds)} identical-build "
                   f"intervals); pairs to prove +-{100 * rule.margin:g} % half the time: {eq or '>1000'}; to find a 5 % "
                   f"regression in 95 % of runs: {find or '>1000'} (budget {rule.max_pairs})")
    return out


def run(topology_path: Path, *, model: str, runs: int, identical_runs: int, levels: Sequence[float], seconds: float,
        rule: SequentialRule, out: Path, log=print, warmup: float | None = None,
        kinds: Sequence[str | None] = (None, *FIGURES)) -> list[Decision]:
    """Every scenario of ``kinds`` (None: identical builds) on the lab of ``topology_path``
    (already up), one tunnel of ``model`` in the rate configuration; the decisions appended
    to ``out`` (JSON lines, with their trials) as they end."""
    from ipsec_hil.lab.expectations.hardware import REGISTRY
    from ipsec_hil.lab.topology import load_topology

    topology = load_topology(topology_path, models=REGISTRY)
    cases = tunnel_cases(topology, model=model, **RATE_CONFIGURATION)
    if not cases:
        raise SystemExit(f"{topology_path}: no tunnel from a {model} in the rate configuration {RATE_CONFIGURATION}")
    workdir = out.parent / f"decision-power-builds-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    decisions: list[Decision] = []
    with Lab.connect(topology) as lab, bring_up(lab, cases[0], run_id="power-" + uuid.uuid4().hex[:6]) as active:
        route = active.bench.probe("route", action="add", dst=active.inner_prefix("remote"),
                                   gateway=active.inner_address("local"))
        dep = DriverDeployment(active.local, _fake_build(workdir / "first.ko", active.local.profile.driver, "first", b""),
                               run_id="power")
        dep.deploy()
        try:
            for sc in [sc for sc in scenarios(levels) if sc.kind in kinds]:
                for i in range(identical_runs if sc.kind is None else runs):
                    t0 = time.monotonic()
                    d = decide(active, dep, sc, workdir, seconds=seconds, rule=rule, warmup=warmup)
                    decisions.append(d)
                    with out.open("a") as fh:
                        fh.write(json.dumps(asdict(d)) + "\n")
                    log(f"{sc.name} #{i + 1}: {d.pairs} pairs, {time.monotonic() - t0:.0f} s; "
                        + (d.error or "; ".join(f"{f} {v['verdict']} x{v['ratio']:.3f} [{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]"
                                                for f, v in d.sequential.items())))
        finally:
            dep.restore()
            if not route.get("existed"):
                active.bench.probe("route", action="del", dst=active.inner_prefix("remote"))
    return decisions


def trial_spread(topology_path: Path, *, model: str, trials: int, seconds: float,
                 figures: Sequence[str] = FIGURES) -> list[dict]:
    """The suite's own trials (build_comparison._measure_trial, the code a comparison runs)
    of one build, back to back on one tunnel of ``model`` in the rate configuration, after
    one discarded warm-up stream: per trial its figures' values, ``ticks`` (the CPU figure's
    statclock ticks of sys + intr), ``started`` (s) and ``wall`` (time.time() before and
    after the trial: the twin's noise epochs are the wall clock's). What identical builds would show
    pair by pair, without the swaps: the lab's noise on each figure (issue 54)."""
    from ipsec_hil.lab.comparing import build_comparison as bc
    from ipsec_hil.lab.expectations.hardware import REGISTRY
    from ipsec_hil.lab.topology import load_topology

    topology = load_topology(topology_path, models=REGISTRY)
    cases = tunnel_cases(topology, model=model, **RATE_CONFIGURATION)
    if not cases:
        raise SystemExit(f"{topology_path}: no tunnel from a {model} in the rate configuration {RATE_CONFIGURATION}")
    rows: list[dict] = []
    with Lab.connect(topology) as lab, bring_up(lab, cases[0], run_id="spread-" + uuid.uuid4().hex[:6]) as active:
        route = active.bench.probe("route", action="add", dst=active.inner_prefix("remote"),
                                   gateway=active.inner_address("local"))
        try:
            bc._measure(active, "up", seconds)  # the warm-up a comparison discards after a swap
            t0 = time.monotonic()
            for _ in range(trials):
                costs: list = []
                started, wall0 = time.monotonic() - t0, time.time()
                values = bc._measure_trial(active, figures, seconds, costs)
                rows.append({**values, "ticks": sum(round(c.kernel_seconds * c.stathz) for c in costs),
                             "started": round(started, 2), "wall": [wall0, time.time()]})
        finally:
            if not route.get("existed"):
                active.bench.probe("route", action="del", dst=active.inner_prefix("remote"))
    return rows


def noisy_copy(lab_file: Path, out: Path) -> Path:
    """``lab_file`` with the twin's noise model on every appliance (``noise: {}``: the
    defaults the twin states), written to ``out``; a file that already sets ``noise`` on a
    host keeps it."""
    import yaml

    data = yaml.safe_load(lab_file.read_text())
    for host in (data.get("hosts") or {}).values():
        if isinstance(host, dict) and host.get("role") == "appliance":
            host.setdefault("noise", {})
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _with_lab(lab_file: Path, noise: bool, work: Path, body) -> None:
    """Run ``body(resolved lab file)`` on the lab of ``lab_file``: a virtual lab's template is
    started (with the noise model when asked) and torn down after; a running virtual lab's
    resolved file, or a hardware lab's, is used as it is."""
    import secrets

    from ipsec_hil import virtual_lab
    from ipsec_hil.lab.expectations.hardware import REGISTRY
    from ipsec_hil.lab.topology import load_topology

    topology = load_topology(lab_file, models=REGISTRY)
    for tunnel in topology.tunnels.values():  # a virtual lab's keys, as the plugin sets them
        if topology.lab.virtual and tunnel.psk.env and not os.environ.get(tunnel.psk.env):
            os.environ[tunnel.psk.env] = secrets.token_urlsafe(24)
    if not topology.lab.virtual or virtual_lab.is_running_lab(topology):
        body(lab_file)
        return
    source = noisy_copy(lab_file, work / f"{lab_file.stem}-noise.yaml") if noise else lab_file
    vl = virtual_lab.start(source, owner_pid=os.getpid())
    try:
        body(vl.resolved)
    finally:
        virtual_lab.stop(vl)


def _kinds(text: str) -> list[str | None]:
    """``--kinds identical,cpu``: which scenarios run."""
    names = {"identical": None, "up": "up", "rate": "up", "cpu": CPU}
    try:
        return [names[x.strip()] for x in text.split(",") if x.strip()]
    except KeyError as exc:
        raise argparse.ArgumentTypeError(f"expected identical, up or cpu, found {exc.args[0]!r}") from None


def _levels(text: str) -> list[float]:
    """``--levels 0.98,0.95``: fractions of the parent (argparse says which text it refused)."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected fractions like 0.98,0.95, found {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m ipsec_hil.lab.comparing.decision_power", description=__doc__.split("\n")[0])
    ap.add_argument("--topology", type=Path, default=Path("topologies/virtual.yaml"),
                    help="the lab file (default: the virtual lab, started and torn down here)")
    ap.add_argument("--no-noise", action="store_true", help="a virtual lab without the twin's noise model")
    ap.add_argument("--model", default="xgs136")
    ap.add_argument("--runs", type=int, default=5, help="decisions per regression scenario (default 5)")
    ap.add_argument("--identical-runs", type=int, default=20, help="decisions of identical builds (default 20)")
    ap.add_argument("--levels", type=_levels, default=list(LEVELS), help="fractions of the parent, comma-separated")
    ap.add_argument("--seconds", type=float, default=DEFAULT_SECONDS,
                    help=f"seconds per trial (default {DEFAULT_SECONDS:g}: build_comparison.DEFAULT_SECONDS)")
    ap.add_argument("--budget", type=int, default=SequentialRule().max_pairs, help="the sequential design's budget of pairs")
    ap.add_argument("--warmup", type=float, default=None, help="seconds of the discarded stream after each swap "
                    f"(default {DEFAULT_WARMUP_S:g}, at most --seconds: build_comparison.DEFAULT_WARMUP_S)")
    ap.add_argument("--kinds", type=_kinds, default=[None, *FIGURES],
                    help="scenarios to run: identical,up,cpu (default all)")
    ap.add_argument("--out", type=Path, default=Path("reports/decision-power.jsonl"))
    ap.add_argument("--append", action="store_true", help="add to --out's decisions instead of starting it afresh")
    ap.add_argument("--table-only", action="store_true", help="print the table of --out's decisions, measure nothing")
    ap.add_argument("--replay", type=int, default=0, metavar="RUNS",
                    help="also re-decide RUNS times by resampling --out's recorded pairs: the power curve 0.90-1.00, "
                         "false alarms, and the live runs against it (ipsec_hil.lab.decision.replay)")
    args = ap.parse_args(argv)
    try:
        if not args.table_only:
            load_lab_file(ap.prog, args.topology, then=None)  # refused in one line before any lab starts
            args.out.parent.mkdir(parents=True, exist_ok=True)
            if not args.append:
                args.out.unlink(missing_ok=True)
            t0 = time.monotonic()
            _with_lab(args.topology, not args.no_noise, args.out.parent, lambda resolved: run(
                resolved, model=args.model, runs=args.runs, identical_runs=args.identical_runs,
                levels=args.levels, seconds=args.seconds, warmup=args.warmup, kinds=args.kinds,
                rule=SequentialRule(max_pairs=args.budget), out=args.out, log=lambda s: print(s, flush=True)))
            print(f"measured in {time.monotonic() - t0:.0f} s", flush=True)
        try:
            lines = args.out.read_text().splitlines()
        except OSError as exc:
            raise unreadable(ap.prog, args.out, exc) from None
    except InputError as exc:
        return exc.report()
    except VirtualLabError as exc:
        print(f"{ap.prog}: virtual lab: {exc}", file=sys.stderr)
        return HilExitCode.LAB_NOT_UP
    decisions = [Decision(**json.loads(line)) for line in lines if line.strip()]
    print(f"\n{len(decisions)} decisions, {args.seconds:g} s trials, sequential: {SequentialRule(max_pairs=args.budget).describe()}; "
          f"fixed: {Rule().describe()}, first {FIXED_PAIRS} pairs\n")
    print("\n".join(table(decisions)))
    noise = measured_noise(decisions, SequentialRule(max_pairs=args.budget))
    if noise:
        print(f"\nthe noise the identical builds measured ({args.seconds:g} s trials):")
        print("\n".join(noise))
    if args.replay:
        print_replay(decisions, SequentialRule(max_pairs=args.budget), args.replay)
    return 0


def print_replay(decisions: list[Decision], rule: SequentialRule, runs: int) -> None:
    """The replayed power curve and the live runs against it (ipsec_hil.lab.decision.replay)."""
    from ipsec_hil.lab.decision import replay

    records = [asdict(d) for d in decisions]
    directions = {f: direction_of(f) for f in FIGURES}
    try:
        curve = replay.power_curve(records, rule, directions, runs=runs)
    except ValueError as exc:
        print(f"\nreplay: {exc}")
        return
    print(f"\nreplayed: {runs} decisions a row, pairs drawn from the recorded identical builds' pairs and "
          f"shifted to the level; a decision's lab time at {replay.seconds_per_pair(records):.1f} s a pair (the live "
          "runs' median)")
    print("\n".join(replay.curve_lines(curve)))
    print("\nthe live runs against the replay:")
    print("\n".join(replay.live_check(records, rule, directions, runs=runs)))


if __name__ == "__main__":
    sys.exit(main())
