"""The fault registry: every fault the twin can inject, and which acceptance test it breaks.

Why a registry: the project proves each acceptance test has teeth by switching on the
fault that must make it fail (and only that one).  The names, parameters and expected
victims live here so the CLI, the `Lab.fault()` API, the components that read
`faults.json` (engine, IKE daemon, FreeBSD commands) and the fault-matrix tests agree.

Storage: `HOST/faults.json` is `{name: {param: value}}`, written atomically; readers
re-read it when its mtime changes.  All faults are off by default (file absent or `{}`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from twin.runtime import HostDir, read_json, write_json_atomic

_REQUIRED = object()


class FaultError(ValueError):
    """Unknown fault, unknown parameter or a value of the wrong type."""


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: Any = _REQUIRED
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def describe(self) -> str:
        d = "required" if self.required else repr(self.default)
        return f"{self.name}:{self.type.__name__}={d}"


@dataclass(frozen=True)
class Fault:
    name: str
    layer: str  # engine | ike | fbsd
    params: tuple[Param, ...] = field(default_factory=tuple)
    symptom: str = ""
    breaks: str = ""

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


REGISTRY: dict[str, Fault] = {f.name: f for f in (
    Fault("drop_every", "engine", (Param("n", int, 100, "drop one encrypted frame in n after counting it"),),
          "every n-th outbound ESP frame is counted (tx_encrypt) but never reaches the wire",
          "conservation: tx_encrypt equals the peer's ESP input (FROM_WIRE_TO_IPSEC_DECR / rx_done)"),
    Fault("count_extra", "engine", (),
          "tx_encrypt counts one more than the packets actually encrypted",
          "conservation: tx_encrypt equals peer ESP input (exactly, when uncongested)"),
    Fault("corrupt_icv", "engine", (Param("every", int, 50, "flip an ICV bit in one outbound frame in every"),),
          "the peer rejects frames for authentication: rx_bad / dropped-bad-auth grow",
          "healthy tunnel: authentication failures stay 0 on both ends"),
    Fault("replay", "engine", (Param("every", int, 50, "send a duplicate of one outbound frame in every"),),
          "the peer sees duplicate sequence numbers: CRYPTO_DROP_REPLAY_OOW / possible-replay-detected grow",
          "healthy tunnel: replay drops stay 0 (or within tolerance when congested)"),
    Fault("wrong_next_header", "engine", (),
          "the ESP trailer's next header is written as 4 for IPv6 inner packets: IPv6 inside is not delivered",
          "000 page: IPv6 inside the tunnel delivered (5/5 pings, rx_v6 counts deliveries)"),
    Fault("decline_ipv6_sa", "engine", (),
          "the driver declines associations with IPv6 outer addresses: they fall back to the kernel cipher",
          "001 page: an IPv6-outer association is offloaded (driver sa_inet6 counts it, kernel ESP stays 0)"),
    Fault("fragment_instead_of_ptb", "engine", (),
          "a forwarded too-big IPv6 packet is fragmented instead of answered with Packet Too Big",
          "000 page: a too-big forwarded IPv6 packet gets ICMPv6 PTB, is not fragmented"),
    Fault("wrong_ptb_mtu", "engine", (Param("delta", int, -8, "added to the MTU reported in PTB"),),
          "the PTB announces the wrong size (path MTU - 117/137 + delta)",
          "000 page: the forwarded IPv6 gate is 1,383 (path_mtu - worst-case ESP header) to the byte"),
    Fault("own_too_big_fragmented", "engine", (),
          "the appliance's own too-big IPv6 packet is fragmented and sent instead of EMSGSIZE",
          "000 page: the appliance's own 1,402-byte ping6 is refused, not fragmented"),
    Fault("slow_first_stream", "engine",
          (Param("mbit", int, 20, "rate cap of the first stream"),
           Param("seconds", int, 15, "how long after boot the cap lasts")),
          "the first TCP stream after boot runs at `mbit` for `seconds` (issue 531 on xgs136)",
          "throughput: one stream reaches the port rate (fails on xgs136 while 531 is open)"),
    Fault("ipv4_df_gate", "engine", (),
          "the engine applies FreeBSD's forwarded-IPv4 gate to packets with DF although "
          "net.inet.ipsec.dfbit is 0: a forwarded IPv4 packet of the exact ESP limit with DF gets "
          "'fragmentation needed' instead of passing",
          "000 page: a forwarded 1,446-byte IPv4 packet with DF passes while dfbit is 0"),
    Fault("leak_sa_on_delete", "engine", (),
          "the engine answers del_sa ok but keeps the association (switching the fault off drops "
          "what it kept)",
          "teardown: no association of the tunnel left in setkey -D or the engine's sa_count"),
    Fault("child_never_up", "ike", (Param("child", str, help="child SA name that never installs"),),
          "initiating that child times out; no association appears",
          "002 page: all children come up (6 of 6) with their own identities"),
    Fault("peer_unreachable", "ike", (),
          "IKE packets to the peer get no answer: initiate fails with a timeout",
          "bring-up: the lab tunnel establishes; the suite reports the peer, not a hang"),
)}


def get_fault(name: str) -> Fault:
    try:
        return REGISTRY[name]
    except KeyError:
        raise FaultError(f"unknown fault {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


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
    """The registry as a plain-text table (for `python -m twin fault --list`).

    With `active` (one host's faults.json), an ON column shows what is switched on.
    """
    head = ("NAME", "LAYER", "PARAMS (name:type=default)") + (("ON",) if active is not None else ())
    rows = [head]
    for f in REGISTRY.values():
        row = (f.name, f.layer, " ".join(p.describe() for p in f.params) or "-")
        if active is not None:
            row += (",".join(f"{k}={v}" for k, v in active[f.name].items()) or "yes"
                    if f.name in active else "-",)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for r, f in zip(rows, [None, *REGISTRY.values()]):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if f is not None:
            lines.append(f"    symptom: {f.symptom}")
            lines.append(f"    breaks:  {f.breaks}")
    return "\n".join(lines) + "\n"
