"""Per-model hardware profiles: driver, counter OIDs, limits, known issues.

Why a profile: tests must not hard-code which sysctl holds which counter or which module
file is the driver. The suite asks the profile, and a lab file may override any OID
(``hosts.<name>.profile``) when the real appliance names it differently.

OID scheme (the real OIDs are not published; each may be overridden per lab):

- driver counters: ``dev.<driver>.<unit>.ipsec.<name>``, e.g. ``dev.npuep.0.ipsec.rx_v6``;
- coprocessor counters (octep only): ``dev.octep.<unit>.cop.<NAME>``, e.g.
  ``dev.octep.0.cop.FROM_KN_TO_IPSEC_ENCR`` (upper-case names are the coprocessor's);
- association counts: ``dev.<driver>.<unit>.ipsec.sa_count``, per family ``sa_inet`` and
  ``sa_inet6``.

Kernel ESP statistics are not in the profile: they are FreeBSD's own
(``netstat -s -p esp --libxo json``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from plugin.lab.errors import ProfileError

MODELS = ("xgs3300", "xgs136")

OCTEP_DRIVER_COUNTERS = (
    "tx_encrypt", "out_taken", "out_orig",
    "rx_v6", "rx_done", "rx_queuefail", "rx_bad", "rx_blocked",
)  # fmt: skip
OCTEP_COP_COUNTERS = (
    "FROM_KN_TO_IPSEC_ENCR", "FROM_WIRE_TO_IPSEC_DECR",
    "CRYPTO_DROP_REPLAY_OOW", "TX_DROP_QUEUE_FULL",
)  # fmt: skip
NPUEP_DRIVER_COUNTERS = (
    "tx_taken", "tx_accel", "rx_done", "rx_v6", "rx_bad", "rx_nosa", "tx_nonhop", "tx_drop",
)  # fmt: skip
SA_COUNTERS = ("sa_count", "sa_inet", "sa_inet6")

#: Counters that must not move on a healthy run (deltas asserted 0 on a link that drops nothing).
OCTEP_ERROR_COUNTERS = ("out_orig", "rx_bad", "rx_blocked")
NPUEP_ERROR_COUNTERS = ("rx_bad", "rx_nosa", "tx_nonhop", "tx_drop")


def _oids(driver: str, unit: int, names: tuple[str, ...], cop: tuple[str, ...] = ()) -> dict[str, str]:
    oids = {n: f"dev.{driver}.{unit}.ipsec.{n}" for n in names + SA_COUNTERS}
    oids.update({n: f"dev.{driver}.{unit}.cop.{n}" for n in cop})
    return oids


@dataclass(frozen=True)
class HardwareProfile:
    """What the suite knows about one appliance model.

    ``counters`` maps the logical counter name (as in DESIGN.md) to its sysctl OID.
    ``floor_margin`` is the fraction of a link's rate a throughput test demands
    (the pages measured 951..985 Mbit/s on a gigabit link: the envelope costs ~5 %).
    ``first_stream_issue`` is the open issue number of "the first stream after a boot is
    slow" (531 on the XGS 136), None when the model does not have it.
    """

    model: str
    driver: str
    module_file: str
    counters: Mapping[str, str]
    error_counters: tuple[str, ...]
    replay_window: int = 32
    kernel_esp_worst_case_block: int = 64
    first_stream_issue: int | None = None
    accepts_ipv6_sa: bool = True
    floor_margin: float = 0.85
    unit: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "counters", MappingProxyType(dict(self.counters)))

    @property
    def counter_names(self) -> tuple[str, ...]:
        return tuple(self.counters)

    def oid(self, name: str) -> str:
        """The OID of counter ``name``; ProfileError naming the known ones otherwise."""
        try:
            return self.counters[name]
        except KeyError:
            raise ProfileError(
                f"{self.model}: no counter {name!r}; known: {', '.join(self.counters)}"
            ) from None

    def throughput_floor_mbit(self, link_rate_mbit: float) -> float:
        """Least acceptable rate through a tunnel on a link of ``link_rate_mbit``."""
        return self.floor_margin * link_rate_mbit

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> HardwareProfile:
        """A copy with a lab file's overrides applied.

        Accepted keys: ``counters`` (or its alias ``oids``): ``{logical_name: oid}`` for
        counters the model has; and the scalar fields ``module_file``, ``replay_window``,
        ``kernel_esp_worst_case_block``, ``first_stream_issue``, ``accepts_ipv6_sa``,
        ``floor_margin``, ``unit`` (a new unit renumbers the default OIDs). Anything else,
        or an unknown counter name, is a ProfileError naming it.
        """
        if not overrides:
            return self
        if not isinstance(overrides, Mapping):
            raise ProfileError(f"profile overrides must be a mapping, found {type(overrides).__name__}")
        scalar = {
            "module_file": str,
            "replay_window": int,
            "kernel_esp_worst_case_block": int,
            "first_stream_issue": (int, type(None)),
            "accepts_ipv6_sa": bool,
            "floor_margin": (float, int),
            "unit": int,
        }
        changes: dict[str, Any] = {}
        counters = dict(self.counters)
        for key, value in overrides.items():
            if key in ("counters", "oids"):
                if not isinstance(value, Mapping):
                    raise ProfileError(f"profile.{key}: expected a mapping of counter name to OID, found {value!r}")
                for name, oid in value.items():
                    if name not in counters:
                        raise ProfileError(
                            f"profile.{key}.{name}: unknown counter {name!r} for {self.model} "
                            f"({self.driver}); known: {', '.join(self.counters)}"
                        )
                    if not isinstance(oid, str) or not oid or " " in oid:
                        raise ProfileError(f"profile.{key}.{name}: expected a sysctl OID, found {oid!r}")
                    counters[name] = oid
            elif key in scalar:
                kind = scalar[key]
                if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
                    raise ProfileError(f"profile.{key}: expected {_kind_name(kind)}, found {value!r}")
                if key == "floor_margin" and not 0 < value <= 1:
                    raise ProfileError(f"profile.floor_margin: expected a fraction in (0, 1], found {value!r}")
                if key in ("replay_window", "kernel_esp_worst_case_block", "unit") and value < 0:
                    raise ProfileError(f"profile.{key}: expected a non-negative integer, found {value!r}")
                changes[key] = value
            else:
                allowed = ["counters", "oids", *scalar]
                raise ProfileError(f"profile.{key}: unknown key; expected one of {', '.join(allowed)}")
        if "unit" in changes and changes["unit"] != self.unit:
            old = f"dev.{self.driver}.{self.unit}."
            new = f"dev.{self.driver}.{changes['unit']}."
            explicit = set((overrides.get("counters") or {})) | set((overrides.get("oids") or {}))
            counters = {
                n: (o if n in explicit or not o.startswith(old) else new + o[len(old):])
                for n, o in counters.items()
            }
        return dataclasses.replace(self, counters=counters, **changes)


def _kind_name(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


_BASE: dict[str, HardwareProfile] = {
    "xgs3300": HardwareProfile(
        model="xgs3300",
        driver="octep",
        module_file="/boot/modules/octep.ko",
        counters=_oids("octep", 0, OCTEP_DRIVER_COUNTERS, OCTEP_COP_COUNTERS),
        error_counters=OCTEP_ERROR_COUNTERS,
        first_stream_issue=None,
    ),
    "xgs136": HardwareProfile(
        model="xgs136",
        driver="npuep",
        module_file="/boot/modules/npuep.ko",
        counters=_oids("npuep", 0, NPUEP_DRIVER_COUNTERS),
        error_counters=NPUEP_ERROR_COUNTERS,
        # Page 001: the first stream into the 136 after a boot ran at 396 Mbit/s (issue 531, open).
        first_stream_issue=531,
    ),
}


def profile_for(model: str, overrides: Mapping[str, Any] | None = None) -> HardwareProfile:
    """The profile of ``model`` (``xgs3300`` | ``xgs136``) with a lab file's overrides."""
    try:
        base = _BASE[model]
    except KeyError:
        raise ProfileError(f"unknown model {model!r}; expected one of {', '.join(MODELS)}") from None
    return base.with_overrides(overrides)


__all__ = [
    "MODELS",
    "HardwareProfile",
    "profile_for",
    "OCTEP_DRIVER_COUNTERS",
    "OCTEP_COP_COUNTERS",
    "NPUEP_DRIVER_COUNTERS",
    "SA_COUNTERS",
]
