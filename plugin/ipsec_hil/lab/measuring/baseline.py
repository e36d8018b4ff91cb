"""Baselines: what a run measured, saved as JSON, and a later run compared against it.

Why: a driver change must not make the appliance slower. A baseline file holds one or more
*repeats* of a reference run (same topology, same driver build): every figure the tests
recorded, the counter ledgers, and the environment (driver md5/size per appliance, kernel,
topology, virtual or not). The spread across the repeats is the run-to-run noise; a later
run's rate below the baseline's mean by more than that noise is a regression.

The rule (documented in docs/ci/README.md, used by ``--gate``):

- only *rates* are compared (figures whose unit is bit/s, kbit/s, Mbit/s or Gbit/s;
  values are normalised to Mbit/s); other figures are stored for the reader;
- ``noise = max(3 x sample stdev of the repeats, 2 % of their mean)`` -- with a single
  repeat the stdev is unknown, so only the 2 % floor applies (save more repeats);
- ``regression`` when ``this run < mean - noise``; ``improved`` when ``> mean + noise``;
  ``ok`` in between; ``new`` for a figure the baseline lacks; ``not measured`` for a
  baseline figure this run did not record (its test failed or was skipped -- the test's
  own verdict says why, so it is not counted twice as a regression).

Pure: plain data in, plain data out, files read and written only by :func:`load` and
:func:`save`. No pytest, no lab access. Errors name the file and the field.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ipsec_hil.lab.errors import LabError

SCHEMA = "ipsec-hil-baseline/1"

#: noise = max(NOISE_STDEVS x stdev, NOISE_FLOOR x mean)
NOISE_STDEVS = 3.0
NOISE_FLOOR = 0.02

#: rate units and their factor to Mbit/s
RATE_UNITS: dict[str, float] = {"bit/s": 1e-6, "kbit/s": 1e-3, "Mbit/s": 1.0, "Gbit/s": 1e3}

VERDICTS = ("regression", "ok", "improved", "new", "not measured")


class BaselineError(LabError):
    """A baseline file is unreadable, malformed, or does not fit this run."""


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class FigureValue:
    """One recorded figure of one test: ``key`` is ``nodeid :: label`` (unique per run)."""

    nodeid: str
    label: str
    value: Any
    unit: str = ""

    @property
    def key(self) -> str:
        return figure_key(self.nodeid, self.label)

    @property
    def is_rate(self) -> bool:
        return self.unit in RATE_UNITS and _is_number(self.value)

    @property
    def mbit(self) -> float | None:
        return float(self.value) * RATE_UNITS[self.unit] if self.is_rate else None


@dataclass(frozen=True)
class ApplianceEnv:
    """One appliance as the run found it: the driver build is what a gate compares."""

    appliance: str
    model: str
    driver: str
    module_md5: str | None = None
    module_size: int | None = None
    kernel: str | None = None


@dataclass(frozen=True)
class HardwareInfo(ApplianceEnv):
    """One appliance as the run found it: what a baseline keeps of it (the driver build,
    the kernel) and, for the page, whether the module was loaded. Read by
    ``ipsec_hil.lab.live_lab.hardware_info``; shown by ``ipsec_hil.lab.reporting.report``."""

    module_loaded: bool | None = None


@dataclass
class Repeat:
    """One run saved into a baseline."""

    date: str
    environment: dict[str, Any]
    figures: list[FigureValue] = field(default_factory=list)
    counters: dict[str, list[str]] = field(default_factory=dict)  # nodeid -> ledger tables
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> passed/failed/...

    def to_dict(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "environment": self.environment,
            "figures": [
                {"nodeid": f.nodeid, "label": f.label, "value": f.value, "unit": f.unit} for f in self.figures
            ],
            "counters": self.counters,
            "outcomes": self.outcomes,
        }


@dataclass
class Baseline:
    """A baseline file: its repeats (oldest first) and where it came from."""

    repeats: list[Repeat]
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "repeats": [r.to_dict() for r in self.repeats]}

    @property
    def environment(self) -> dict[str, Any]:
        return self.repeats[-1].environment if self.repeats else {}

    def rate_samples(self) -> dict[str, tuple[FigureValue, list[float]]]:
        """key -> (the latest figure, Mbit/s of every repeat that recorded it)."""
        out: dict[str, tuple[FigureValue, list[float]]] = {}
        for r in self.repeats:
            for f in r.figures:
                if f.is_rate:
                    prev = out.get(f.key)
                    vals = (prev[1] if prev else []) + [float(f.mbit)]  # type: ignore[arg-type]
                    out[f.key] = (f, vals)
        return out


_XDIST_GROUP = re.compile(r"@[^\]\[/:@]+$")


def canonical_nodeid(nodeid: str) -> str:
    """The node id without xdist's ``@group`` suffix (``--dist loadgroup`` appends the
    group to the id), so a parallel run compares with a serial baseline and back."""
    return _XDIST_GROUP.sub("", nodeid)


def figure_key(nodeid: str, label: str) -> str:
    return f"{canonical_nodeid(nodeid)} :: {label}"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def environment(
    *,
    topology: str,
    virtual: bool,
    appliances: Iterable[ApplianceEnv],
    traffic_seconds: float | None = None,
    command: str = "",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``environment`` object of a repeat (JSON-safe)."""
    env: dict[str, Any] = {
        "topology": topology,
        "virtual": bool(virtual),
        "appliances": {
            a.appliance: {
                "model": a.model,
                "driver": a.driver,
                "module_md5": a.module_md5,
                "module_size": a.module_size,
                "kernel": a.kernel,
            }
            for a in appliances
        },
    }
    if traffic_seconds is not None:
        env["traffic_seconds"] = traffic_seconds
    if command:
        env["command"] = command
    if extra:
        env.update(dict(extra))
    return env


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- load / save


_MISSING = object()


def _err(source: str, path: str, want: str, found: Any) -> BaselineError:
    shown = "nothing (missing)" if found is _MISSING else repr(found)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return BaselineError(f"{source}: {path}: expected {want}, found {shown}")


def _want(d: Any, key: str, typ: type | tuple[type, ...], source: str, path: str, want: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise _err(source, f"{path}.{key}" if path else key, want, _MISSING)
    v = d[key]
    if not isinstance(v, typ):
        raise _err(source, f"{path}.{key}" if path else key, want, v)
    return v


def from_dict(data: Any, source: str = "<baseline>") -> Baseline:
    """Validate a decoded baseline; every problem names ``source`` and the field path."""
    if not isinstance(data, dict):
        raise _err(source, "(top level)", "an object", data)
    schema = data.get("schema")
    if schema != SCHEMA:
        raise _err(source, "schema", repr(SCHEMA), schema)
    reps = _want(data, "repeats", list, source, "", "a list of repeats")
    if not reps:
        raise _err(source, "repeats", "at least one repeat", reps)
    repeats: list[Repeat] = []
    for i, r in enumerate(reps):
        p = f"repeats[{i}]"
        if not isinstance(r, dict):
            raise _err(source, p, "an object", r)
        date = _want(r, "date", str, source, p, "an ISO date string")
        env = _want(r, "environment", dict, source, p, "an object")
        apps = env.get("appliances", {})
        if not isinstance(apps, dict):
            raise _err(source, f"{p}.environment.appliances", "an object", apps)
        for name, a in apps.items():
            if not isinstance(a, dict):
                raise _err(source, f"{p}.environment.appliances.{name}", "an object", a)
            md5 = a.get("module_md5")
            if md5 is not None and not isinstance(md5, str):
                raise _err(source, f"{p}.environment.appliances.{name}.module_md5", "a string or null", md5)
        figs_raw = _want(r, "figures", list, source, p, "a list of figures")
        figs: list[FigureValue] = []
        for j, f in enumerate(figs_raw):
            fp = f"{p}.figures[{j}]"
            nodeid = _want(f, "nodeid", str, source, fp, "a test node id")
            label = _want(f, "label", str, source, fp, "a label")
            unit = _want(f, "unit", str, source, fp, "a unit string")
            if "value" not in f:
                raise _err(source, f"{fp}.value", "a value", _MISSING)
            value = f["value"]
            if unit in RATE_UNITS and not _is_number(value):
                raise _err(source, f"{fp}.value", f"a finite number (unit {unit})", value)
            figs.append(FigureValue(nodeid, label, value, unit))
        counters = r.get("counters", {})
        if not isinstance(counters, dict) or not all(
            isinstance(v, list) and all(isinstance(t, str) for t in v) for v in counters.values()
        ):
            raise _err(source, f"{p}.counters", "an object of nodeid -> list of ledger tables", counters)
        outcomes = r.get("outcomes", {})
        if not isinstance(outcomes, dict) or not all(isinstance(v, str) for v in outcomes.values()):
            raise _err(source, f"{p}.outcomes", "an object of nodeid -> outcome", outcomes)
        repeats.append(Repeat(date, env, figs, dict(counters), dict(outcomes)))
    return Baseline(repeats, source)


def load(path: str | os.PathLike[str]) -> Baseline:
    """Read and validate a baseline file (``BaselineError`` names the file, line or field)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(f"{p}: baseline file not found") from None
    except OSError as exc:
        raise BaselineError(f"{p}: cannot read baseline: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{p}:{exc.lineno}: not JSON: {exc.msg}") from None
    return from_dict(data, str(p))


def _build_signature(env: Mapping[str, Any]) -> dict[str, str | None]:
    return {name: (a or {}).get("module_md5") for name, a in (env.get("appliances") or {}).items()}


def add_repeat(base: Baseline | None, repeat: Repeat) -> Baseline:
    """A baseline with ``repeat`` appended (a new one if ``base`` is None).

    Repeats must describe the same thing: the same topology, virtual or not, and the same
    driver builds (md5 per appliance) -- noise measured across two builds would hide the
    very difference a gate looks for. A mismatch raises ``BaselineError`` naming the field.
    """
    if base is None:
        return Baseline([repeat])
    first = base.repeats[0].environment
    new = repeat.environment
    src = base.source or "<baseline>"
    for key in ("topology", "virtual"):
        if first.get(key) != new.get(key):
            raise BaselineError(
                f"{src}: repeats[0].environment.{key}: this run has {new.get(key)!r}, the baseline "
                f"{first.get(key)!r}; a baseline's repeats must come from one lab (use another file)"
            )
    a, b = _build_signature(first), _build_signature(new)
    if a != b:
        diff = ", ".join(f"{n}: {a.get(n)} -> {b.get(n)}" for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n))
        raise BaselineError(
            f"{src}: repeats[0].environment.appliances.*.module_md5: this run's driver builds differ "
            f"({diff}); a baseline's repeats must be of one build (use another file)"
        )
    return Baseline([*base.repeats, repeat], base.source)


def save(path: str | os.PathLike[str], repeat: Repeat) -> Baseline:
    """Write ``repeat`` to ``path``: a new file, or one more repeat of an existing baseline."""
    p = Path(path)
    base = load(p) if p.exists() else None
    out = add_repeat(base, repeat)
    out.source = str(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(out.to_dict(), indent=1, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return out


# --------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class Row:
    """One figure compared: baseline mean +- noise against this run (Mbit/s)."""

    key: str
    nodeid: str
    label: str
    verdict: str
    current: float | None
    mean: float | None
    noise: float | None
    repeats: int
    samples: tuple[float, ...] = ()

    @property
    def change_pct(self) -> float | None:
        if self.current is None or not self.mean:
            return None
        return (self.current - self.mean) / self.mean * 100.0


@dataclass
class Comparison:
    """This run against a baseline: one row per rate, plus the builds compared."""

    source: str
    rows: list[Row]
    baseline_builds: dict[str, str | None]
    current_builds: dict[str, str | None]
    repeats: int
    warnings: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "regression"]

    @property
    def passed(self) -> bool:
        return not self.regressions

    def builds_line(self) -> str:
        """'dut3300: baseline 1a2b... -> this run 3c4d...' per appliance (the gate says which builds)."""
        names = sorted(set(self.baseline_builds) | set(self.current_builds))
        parts = []
        for n in names:
            a, b = self.baseline_builds.get(n), self.current_builds.get(n)
            same = " (same build)" if a and a == b else ""
            parts.append(f"{n}: baseline {a or 'unknown'} -> this run {b or 'unknown'}{same}")
        return "; ".join(parts) or "no appliance recorded"

    def counts(self) -> dict[str, int]:
        return {v: sum(1 for r in self.rows if r.verdict == v) for v in VERDICTS}

    def summary(self) -> str:
        c = self.counts()
        head = "REGRESSION" if self.regressions else "no regression"
        return (
            f"{head}: {c['regression']} regressed, {c['ok']} within noise, {c['improved']} improved, "
            f"{c['new']} new, {c['not measured']} not measured; {self.repeats} baseline repeat(s)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.source,
            "repeats": self.repeats,
            "passed": self.passed,
            "summary": self.summary(),
            "builds": {"baseline": self.baseline_builds, "this_run": self.current_builds},
            "warnings": self.warnings,
            "rule": f"noise = max({NOISE_STDEVS:g} x stdev, {NOISE_FLOOR * 100:g} % of mean); "
            "regression when this run < mean - noise",
            "rows": [
                {
                    "figure": r.key,
                    "nodeid": r.nodeid,
                    "label": r.label,
                    "verdict": r.verdict,
                    "this_run_mbit": r.current,
                    "baseline_mean_mbit": r.mean,
                    "noise_mbit": r.noise,
                    "baseline_samples_mbit": list(r.samples),
                    "change_pct": r.change_pct,
                }
                for r in self.rows
            ],
        }


def noise_of(samples: Sequence[float]) -> tuple[float, float]:
    """(mean, noise) of a figure's repeats by the documented rule."""
    if not samples:
        raise ValueError("noise_of: no samples")
    mean = statistics.fmean(samples)
    sd = statistics.stdev(samples) if len(samples) >= 2 else 0.0
    return mean, max(NOISE_STDEVS * sd, NOISE_FLOOR * abs(mean))


def compare(base: Baseline, figures: Iterable[FigureValue], environment: Mapping[str, Any]) -> Comparison:
    """Compare this run's figures (and environment) with ``base``."""
    samples = base.rate_samples()
    current: dict[str, FigureValue] = {}
    for f in figures:
        if f.is_rate:
            current[f.key] = f
    rows: list[Row] = []
    for key in sorted(set(samples) | set(current)):
        cur = current.get(key)
        if key not in samples:
            assert cur is not None
            rows.append(Row(key, cur.nodeid, cur.label, "new", cur.mbit, None, None, 0))
            continue
        fig, vals = samples[key]
        mean, noise = noise_of(vals)
        if cur is None:
            rows.append(Row(key, fig.nodeid, fig.label, "not measured", None, mean, noise, len(vals), tuple(vals)))
            continue
        value = float(cur.mbit)  # type: ignore[arg-type]
        if value < mean - noise:
            verdict = "regression"
        elif value > mean + noise:
            verdict = "improved"
        else:
            verdict = "ok"
        rows.append(Row(key, cur.nodeid, cur.label, verdict, value, mean, noise, len(vals), tuple(vals)))
    benv = base.environment
    warnings: list[str] = []
    for k in ("topology", "virtual", "traffic_seconds"):
        if k in benv and k in environment and benv.get(k) != environment.get(k):
            warnings.append(f"the baseline's {k} is {benv.get(k)!r}, this run's {environment.get(k)!r}")
    if len(base.repeats) < 2:
        warnings.append("the baseline has one repeat: its noise is only the 2 % floor "
                        "(save the reference run again into the same file to measure the spread)")
    return Comparison(
        source=base.source or "<baseline>",
        rows=rows,
        baseline_builds=_build_signature(benv),
        current_builds=_build_signature(environment),
        repeats=len(base.repeats),
        warnings=warnings,
    )
