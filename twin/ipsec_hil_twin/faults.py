"""The fault registry, and the one reader of faults.json / sysctl.json every component uses.

Why a registry: the project proves each acceptance test has teeth by switching on the
fault that must make it fail (and only that one).  The names, parameters and expected
victims live in fault_registry.toml (a table a fault), read and typed here as `REGISTRY`,
so the CLI, the `Lab.fault()` API, the components that read `faults.json` (engine, IKE
daemon, FreeBSD commands) and the fault-matrix tests agree.

Storage: `HOST/faults.json` is `{name: {param: value}}`, written atomically; readers
re-read it when its mtime changes.  All faults are off by default (file absent or `{}`).

Reading: `HostFaults(host_dir)` is how a component sees its host's faults and sysctls.
Faults are switched on and off while traffic runs, so the engine's loops must notice
within ~100 ms without a stat() per packet: a `JsonWatch` stats its file at most every
`period` seconds and re-reads only when the mtime (or size) changed.  A malformed file
is reported once on stderr and treated as "no change", so a half-written file never
flips behaviour.  Stdlib only: the FreeBSD commands import this on every invocation.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import namedtuple
from pathlib import Path

from ipsec_hil_twin.errors import FaultError
from ipsec_hil_twin.machinery.runtime import HostDir, read_json, write_json_atomic

TYPE_CHECKING = False  # typing is not imported at run time: the emulated commands import this module
if TYPE_CHECKING:
    from typing import Any

__all__ = ["REGISTRY", "Fault", "FaultError", "HostFaults", "JsonWatch", "Param", "active_faults",
           "clear_fault", "dfbit", "fault_params", "get_fault", "parse_kv", "registry_table",
           "set_fault"]

_REQUIRED = object()


class Param(namedtuple("Param", "name type default help", defaults=(_REQUIRED, ""))):
    """One parameter of a fault: name, type, default (``_REQUIRED`` when none), help.

    (A collections.namedtuple, neither a dataclass nor typing's NamedTuple: the FreeBSD
    commands import this module on every run, and dataclasses or typing cost each of them
    ~8 ms of start-up; tests/twin_shell/test_command_imports.py keeps it so.)"""

    __slots__ = ()

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def describe(self) -> str:
        d = "required" if self.required else repr(self.default)
        return f"{self.name}:{self.type.__name__}={d}"


class Fault(namedtuple("Fault", "name layer params symptom breaks", defaults=((), "", ""))):
    """A fault the twin can inject: its name, where it acts (layer: engine | ike | fbsd),
    its parameters (a tuple of Param), what it does (symptom), which test it breaks."""

    __slots__ = ()

    def coerce(self, given: dict[str, Any]) -> dict[str, Any]:
        """Validate and type `given` (strings from the CLI are converted)."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            listing = ", ".join(p.describe() for p in self.params) or "none"
            raise FaultError(
                f"fault {self.name!r}: unknown parameter(s) {', '.join(unknown)}; known: {listing}"
            )
        out: dict[str, Any] = {}
        for p in self.params:
            if p.name in given:
                out[p.name] = _convert(self.name, p, given[p.name])
            elif p.required:
                raise FaultError(f"fault {self.name!r}: parameter {p.name!r} is required ({p.help})")
            else:
                out[p.name] = p.default
        return out


def _convert(fault: str, p: Param, value: Any) -> Any:
    try:
        if p.type is int:
            if isinstance(value, bool):
                raise ValueError
            v = int(value)
        elif p.type is float:
            v = float(value)
        elif p.type is str:
            v = str(value)
        else:  # pragma: no cover - registry only uses the above
            v = p.type(value)
    except (TypeError, ValueError):
        raise FaultError(
            f"fault {fault!r}: parameter {p.name!r} expected {p.type.__name__}, found {value!r}"
        ) from None
    if p.type in (int, float) and v <= 0 and p.name not in ("delta",):
        raise FaultError(f"fault {fault!r}: parameter {p.name!r} must be > 0, found {value!r}")
    return v


#: Every fault the twin can inject, by name, in fault_registry.toml's order (read on first
#: use: see __getattr__ below).
REGISTRY: dict[str, Fault]

_REGISTRY_FILE = Path(__file__).with_name("fault_registry.toml")
_LAYERS = ("engine", "ike", "fbsd")
_TYPES: dict[str, type] = {"int": int, "float": float, "str": str}


def _load_registry(path: Path = _REGISTRY_FILE) -> dict[str, Fault]:
    """`path` as Faults, checked: a misspelt key, layer or type, or a default of the wrong
    type, fails at the first lookup naming the entry, not later as a fault that does nothing."""
    import tomllib  # here, not at the top: ~20 ms the FreeBSD commands (no lookups) do not pay

    with open(path, "rb") as fh:
        table = tomllib.load(fh)
    out: dict[str, Fault] = {}
    for name, entry in table.items():
        where = f"{path.name} [{name}]"
        unknown = sorted(set(entry) - {"layer", "params", "symptom", "breaks"})
        if unknown or entry.get("layer") not in _LAYERS or not entry.get("symptom") or not entry.get("breaks"):
            raise FaultError(f"{where}: expected layer ({' | '.join(_LAYERS)}), symptom, breaks and params, "
                             f"found {sorted(entry)}")
        params = []
        for pname, p in entry.get("params", {}).items():
            ptype = _TYPES.get(p.get("type"))
            default = p.get("default", _REQUIRED)
            if ptype is None or set(p) - {"type", "default", "help"} or (
                    default is not _REQUIRED and type(default) is not ptype):
                raise FaultError(f"{where}: parameter {pname}: expected {{ type = {' | '.join(_TYPES)}, "
                                 f"default of that type (none: required), help }}, found {p}")
            params.append(Param(pname, ptype, default, p.get("help", "")))
        out[name] = Fault(name, entry["layer"], tuple(params), entry["symptom"], entry["breaks"])
    return out


_loaded: dict[str, Fault] | None = None


def _registry() -> dict[str, Fault]:
    """The registry, read once, on first use: every FreeBSD command imports this module for
    HostFaults and would otherwise parse a registry it never consults."""
    global _loaded
    if _loaded is None:
        _loaded = _load_registry()
    return _loaded


def __getattr__(name: str) -> Any:
    """`ipsec_hil_twin.faults.REGISTRY` is `_registry()` (PEP 562: a module attribute read on first use)."""
    if name == "REGISTRY":
        return _registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_fault(name: str) -> Fault:
    registry = _registry()
    try:
        return registry[name]
    except KeyError:
        raise FaultError(f"unknown fault {name!r}; known: {', '.join(sorted(registry))}") from None


def _as_hostdir(host_dir: HostDir | str | os.PathLike[str]) -> HostDir:
    return host_dir if isinstance(host_dir, HostDir) else HostDir(host_dir)


def active_faults(host_dir: HostDir | str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The faults switched on for one host: `{name: params}` (empty when none)."""
    data = read_json(_as_hostdir(host_dir).faults_json, default={})
    if not isinstance(data, dict):
        raise FaultError(f"{_as_hostdir(host_dir).faults_json}: expected a JSON object")
    return data


def set_fault(host_dir: HostDir | str | os.PathLike[str], name: str, **params: Any) -> dict[str, Any]:
    """Switch a fault on (or change its parameters); returns the stored parameters."""
    hd = _as_hostdir(host_dir)
    fault = get_fault(name)
    values = fault.coerce(params)
    if not hd.path.is_dir():
        raise FaultError(f"host dir {hd.path} does not exist")
    current = active_faults(hd)
    current[name] = values
    write_json_atomic(hd.faults_json, current)
    return values


def clear_fault(host_dir: HostDir | str | os.PathLike[str], name: str | None = None) -> None:
    """Switch one fault off (or all of them with name=None)."""
    hd = _as_hostdir(host_dir)
    if name is not None:
        get_fault(name)
    current = active_faults(hd)
    if name is None:
        current = {}
    else:
        current.pop(name, None)
    if hd.path.is_dir():
        write_json_atomic(hd.faults_json, current)


def parse_kv(items: list[str]) -> dict[str, str]:
    """CLI `k=v` words -> dict (values converted later by the fault's types)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FaultError(f"parameter {item!r}: expected key=value")
        out[key] = value
    return out


def registry_table(active: dict[str, dict[str, Any]] | None = None) -> str:
    """The registry as a plain-text table (for `python -m ipsec_hil_twin fault --list`).

    With `active` (one host's faults.json), an ON column shows what is switched on.
    """
    head = ("NAME", "LAYER", "PARAMS (name:type=default)") + (("ON",) if active is not None else ())
    rows = [head]
    for f in _registry().values():
        row = (f.name, f.layer, " ".join(p.describe() for p in f.params) or "-")
        if active is not None:
            row += (",".join(f"{k}={v}" for k, v in active[f.name].items()) or "yes"
                    if f.name in active else "-",)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for r, f in zip(rows, [None, *_registry().values()]):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if f is not None:
            lines.append(f"    symptom: {f.symptom}")
            lines.append(f"    breaks:  {f.breaks}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- reading


class JsonWatch:
    """A JSON object file re-read when its mtime/size changes (at most every `period` s)."""

    def __init__(self, path: Path, period: float = 0.1, reader: str = "engine") -> None:
        self.path = Path(path)
        self.period = period
        self.reader = reader
        self._sig: tuple[int, int] | None = None
        self._next = 0.0
        self.data: dict[str, Any] = {}
        self.version = 0
        self.refresh(0.0, force=True)

    def refresh(self, now: float, force: bool = False) -> bool:
        """Re-read if due and changed; True when the content changed."""
        if not force and now < self._next:
            return False
        self._next = now + self.period
        try:
            st = os.stat(self.path)
            sig: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            sig = None
        if sig == self._sig and not force:
            return False
        if sig is None:
            new: dict[str, Any] = {}
        else:
            try:
                new = json.loads(self.path.read_text(encoding="utf-8") or "{}")
                if not isinstance(new, dict):
                    raise ValueError("expected a JSON object")
            except (OSError, ValueError) as exc:
                print(f"{self.reader}: {self.path}: ignored ({exc})", file=sys.stderr)
                self._sig = sig
                return False
        self._sig = sig
        changed = new != self.data
        self.data = new
        if changed:
            self.version += 1
        return changed

    def get(self, name: str) -> Any:
        return self.data.get(name)


def fault_params(watch: JsonWatch, name: str) -> dict[str, Any] | None:
    """Params of an active fault (a fault whose value is false/None is off)."""
    v = watch.data.get(name)
    if v is None or v is False:
        return None
    return v if isinstance(v, dict) else {}


def dfbit(watch: JsonWatch) -> int:
    """net.inet.ipsec.dfbit from sysctl.json (flat or nested), default 0 as on FreeBSD."""
    d = watch.data
    v = d.get("net.inet.ipsec.dfbit")
    if v is None:
        v = d.get("net", {}).get("inet", {}).get("ipsec", {}).get("dfbit", 0) if isinstance(d.get("net"), dict) else 0
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


class HostFaults:
    """One host's faults.json and sysctl.json as a component sees them.

    `period` 0 re-checks the mtime on every question (the IKE daemon: a few packets a
    second); the engine's loops use JsonWatch's default 0.1 s.  A one-shot FreeBSD
    command reads both files once, at construction.
    """

    def __init__(self, host_dir: HostDir | str | os.PathLike[str], reader: str,
                 period: float = 0.1) -> None:
        hd = _as_hostdir(host_dir)
        self.faults = JsonWatch(hd.faults_json, period, reader)
        self.sysctl = JsonWatch(hd.sysctl_json, period, reader)

    def active(self) -> dict[str, Any]:
        """`{name: params}` of the faults switched on now."""
        self.faults.refresh(time.monotonic())
        return {name: p for name in self.faults.data if (p := fault_params(self.faults, name)) is not None}

    def params(self, name: str) -> dict[str, Any] | None:
        """The parameters of fault `name` if it is on now, else None."""
        self.faults.refresh(time.monotonic())
        return fault_params(self.faults, name)

    def dfbit(self) -> int:
        self.sysctl.refresh(time.monotonic())
        return dfbit(self.sysctl)
