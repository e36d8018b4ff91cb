"""The appliance-model registry: one profile per model, and everything derived from it.

Why one registry: a model's driver, its counters and what each counter *means* (its role),
its limits, its open issues and its pytest marker are facts of one thing. The markers
(``-m xgs136``), the expected counter sums (ipsec_hil.lab.expectations.expect) and the reports read them
here, so adding a model is one :class:`HardwareProfile` entry -- or, for a driver
repository that must not edit the suite, one entry in a profiles file
(``--hil-profiles FILE`` / ini ``hil_profiles``; format in ipsec_hil.lab.expectations.profiles_file).

Tests must not hard-code which sysctl holds which counter: they ask the profile, and a lab
file may override any OID (``hosts.<name>.profile``) when the real appliance names it
differently.

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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ipsec_hil.lab.errors import ProfileError

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

#: Seconds a driver counter may lag the packet it counts, unless a lab file states its
#: appliances' (``counter_lag_s``): not measured on the appliances, so the spacing every
#: settle used before issue 15 split it from a load's tail (ipsec_hil.lab.measuring.quiet).
DEFAULT_COUNTER_LAG_S = 0.5

#: The known-issue key of "the first stream after a boot is slow" (page 001).
FIRST_STREAM_AFTER_BOOT = "first_stream_after_boot"


def default_oids(driver: str, unit: int, names: tuple[str, ...], cop: tuple[str, ...] = ()) -> dict[str, str]:
    """The DESIGN.md OID scheme for ``names`` (plus the association counts) and coprocessor ``cop``."""
    oids = {n: f"dev.{driver}.{unit}.ipsec.{n}" for n in (*names, *SA_COUNTERS)}
    oids.update({n: f"dev.{driver}.{unit}.cop.{n}" for n in cop})
    return oids


@dataclass(frozen=True)
class CounterRoles:
    """What the model's counters mean (DESIGN.md "Counter meanings"), by logical name.

    ``encrypted``: their deltas sum to the packets the engine encrypted; ``decrypted``: to
    the packets it decrypted and handed up (refusals by the host queue included where the
    driver counts them apart); ``errors``: must not move on a healthy run; ``sa_counts``:
    associations the engine holds (total, then per outer family); ``replay_drops`` and
    ``no_sa_drops``: inbound drops for a replayed packet and for an unknown SPI;
    ``tx_drops``: packets counted as encrypted and then dropped before they left (a full
    transmit queue) -- only where these move may a conservation check be inexact.
    ``auth_drops`` and ``malformed_drops``: for an ICV that does not verify and for a payload
    of a wrong length or padding (issue 12; empty: the driver does not count it, FreeBSD does).
    """

    encrypted: tuple[str, ...]
    decrypted: tuple[str, ...]
    errors: tuple[str, ...]
    sa_counts: tuple[str, ...] = SA_COUNTERS
    replay_drops: tuple[str, ...] = ()
    no_sa_drops: tuple[str, ...] = ()
    tx_drops: tuple[str, ...] = ()
    auth_drops: tuple[str, ...] = ()
    malformed_drops: tuple[str, ...] = ()

    def items(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        for f in dataclasses.fields(self):
            yield f.name, getattr(self, f.name)


@dataclass(frozen=True)
class KnownIssue:
    """An open issue of a model that a test measures (the test says which ``key`` it is)."""

    key: str
    number: int
    summary: str

    @property
    def label(self) -> str:
        return f"issue {self.number}"


@dataclass(frozen=True)
class HealthTolerance:
    """How far a model's health may drift across one tunnel configuration before it is a
    driver defect (ipsec_hil.lab.measuring.health.policy_for makes the comparison's policy
    of it): absolute increases over the baseline snapshot.

    Why per model: FreeBSD sizes its mbuf pools from physical memory (kern.ipc.maxmbufmem
    defaults to half of it, kern.ipc.nmbclusters to a quarter of that in clusters), so the
    same leak uses a far larger share of a small appliance's pool; the XGS 136 has far less
    memory than the XGS 3300 (issue 42), so its slack is smaller. The XGS 3300's are the
    figures the whole-configuration health test used for both models before (a healthy
    box's mbufs idle in socket buffers and per-CPU caches move by a few hundred)."""

    mbuf_slack: int = 512
    cluster_slack: int = 512
    zone_items_slack: int = 16
    malloc_in_use_slack: int = 64

    def __post_init__(self) -> None:
        for name in ("mbuf_slack", "cluster_slack", "zone_items_slack", "malloc_in_use_slack"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ProfileError(f"health.{name}: expected a non-negative integer, found {value!r}")


@dataclass(frozen=True)
class HardwareProfile:
    """What the suite knows about one appliance model.

    ``counters`` maps the logical counter name (as in DESIGN.md) to its sysctl OID;
    ``roles`` says what they mean. ``marker`` is the help text of the model's pytest
    marker (the marker's name is the model's). ``floor_margin`` is the fraction of a link's
    rate a throughput test demands (the pages measured 951..985 Mbit/s on a gigabit link:
    the envelope costs ~5 %). ``known_issues``: open issues a test measures (531 on the
    XGS 136: the first stream after a boot is slow).
    """

    model: str
    driver: str
    module_file: str
    counters: Mapping[str, str]
    roles: CounterRoles
    marker: str = ""
    known_issues: tuple[KnownIssue, ...] = ()
    replay_window: int = 32
    kernel_esp_worst_case_block: int = 64
    accepts_ipv6_sa: bool = True
    #: the driver offloads UDP-encapsulated (NAT-T) associations; False: the kernel runs them
    #: (its ESP counters move, the driver's stay still). Assumed, to be checked on hardware.
    offloads_udp_encap: bool = False
    floor_margin: float = 0.85
    unit: int = 0
    #: the longest a CHILD_SA rekey under load may block traffic, in ms: packets lost across
    #: the rekey over the offered rate ("blocked time", as FD.io CSIT reports
    #: reconfiguration tests); strongSwan installs the new inbound SA before the new
    #: outbound one and keeps the old inbound for delete_rekeyed_delay, so a driver that
    #: swaps in place loses nothing -- the bound allows one engine table update.
    rekey_blocked_ms: float = 50.0
    #: the longest a counter read may lag the packets it counts, in s: two equal reads this
    #: far apart after pings or injected frames mean the counters are final
    #: (ipsec_hil.lab.measuring.quiet; a load's tail adds its own wait)
    counter_lag_s: float = DEFAULT_COUNTER_LAG_S
    #: the least share of its rate that traffic matching no SA (forwarded, small UDP
    #: datagrams) keeps with the IPsec stack and the offload driver loaded and a tunnel up,
    #: against the same traffic with the tunnel down and the driver unloaded. Page 003:
    #: IPsec compiled in cost a multi-threaded UDP transmit 13.8 of 16.8 Mpps (0.82), the
    #: default policy's reference count; the drivers' hooks on that path may add nothing
    #: a measurement tells from that: 0.80.
    bypass_share: float = 0.80
    #: the health drift tolerated around one configuration (HealthTolerance says why per model)
    health: HealthTolerance = HealthTolerance()

    def __post_init__(self) -> None:
        object.__setattr__(self, "counters", MappingProxyType(dict(self.counters)))
        for role, names in self.roles.items():
            unknown = [n for n in names if n not in self.counters]
            if unknown:
                raise ProfileError(f"{self.model}: roles.{role} names unknown counter(s) {', '.join(unknown)}; "
                                   f"known: {', '.join(self.counters)}")

    @property
    def counter_names(self) -> tuple[str, ...]:
        return tuple(self.counters)

    @property
    def error_counters(self) -> tuple[str, ...]:
        """Counters that must not move on a healthy run (the ``errors`` role)."""
        return self.roles.errors

    def known_issue(self, key: str) -> KnownIssue | None:
        """The open issue this model has for ``key`` (e.g. ``first_stream_after_boot``), if any."""
        return next((i for i in self.known_issues if i.key == key), None)

    @property
    def first_stream_issue(self) -> int | None:
        """Issue number of "the first stream after a boot is slow" here (531 on the XGS 136)."""
        issue = self.known_issue(FIRST_STREAM_AFTER_BOOT)
        return issue.number if issue else None


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
        ``kernel_esp_worst_case_block``, ``accepts_ipv6_sa``, ``floor_margin``, ``unit``
        (a new unit renumbers the default OIDs), ``rekey_blocked_ms``, ``counter_lag_s``, ``bypass_share``; ``first_stream_issue`` (an issue number,
        or null: the lab's build does not have it). Anything else, or an unknown counter
        name, is a ProfileError naming it.
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
            "rekey_blocked_ms": (float, int),
            "counter_lag_s": (float, int),
            "bypass_share": (float, int),
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
            elif key == "health":
                if not isinstance(value, Mapping):
                    raise ProfileError(f"profile.health: expected a mapping of tolerance to integer, found {value!r}")
                known = ("mbuf_slack", "cluster_slack", "zone_items_slack", "malloc_in_use_slack")
                unknown = [k for k in value if k not in known]
                if unknown:
                    raise ProfileError(f"profile.health.{unknown[0]}: unknown tolerance; known: {', '.join(known)}")
                changes["health"] = dataclasses.replace(self.health, **dict(value))
            elif key in scalar:
                kind = scalar[key]
                if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
                    raise ProfileError(f"profile.{key}: expected {_kind_name(kind)}, found {value!r}")
                if key == "floor_margin" and not 0 < value <= 1:
                    raise ProfileError(f"profile.floor_margin: expected a fraction in (0, 1], found {value!r}")
                if key == "bypass_share" and not 0 < value <= 1:
                    raise ProfileError(f"profile.bypass_share: expected a fraction in (0, 1], found {value!r}")
                if key == "counter_lag_s" and not 0 < value <= 10:
                    raise ProfileError(f"profile.counter_lag_s: expected seconds in (0, 10], found {value!r}")
                if key in ("replay_window", "kernel_esp_worst_case_block", "unit", "rekey_blocked_ms") and value < 0:
                    kind_text = "number" if key == "rekey_blocked_ms" else "integer"
                    raise ProfileError(f"profile.{key}: expected a non-negative {kind_text}, found {value!r}")
                changes[key] = value
            else:
                allowed = ["counters", "oids", "health", *scalar]
                raise ProfileError(f"profile.{key}: unknown key; expected one of {', '.join(allowed)}")
        if "first_stream_issue" in changes:
            changes["known_issues"] = self._with_first_stream_issue(changes.pop("first_stream_issue"))
        if "unit" in changes and changes["unit"] != self.unit:
            old = f"dev.{self.driver}.{self.unit}."
            new = f"dev.{self.driver}.{changes['unit']}."
            explicit = set((overrides.get("counters") or {})) | set((overrides.get("oids") or {}))
            counters = {
                n: (o if n in explicit or not o.startswith(old) else new + o[len(old):])
                for n, o in counters.items()
            }
        return dataclasses.replace(self, counters=counters, **changes)

    def _with_first_stream_issue(self, number: int | None) -> tuple[KnownIssue, ...]:
        others = tuple(i for i in self.known_issues if i.key != FIRST_STREAM_AFTER_BOOT)
        if number is None:
            return others
        old = self.known_issue(FIRST_STREAM_AFTER_BOOT)
        summary = old.summary if old else "the first stream after a boot is slow"
        return (*others, KnownIssue(FIRST_STREAM_AFTER_BOOT, number, summary))


def _kind_name(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


# ----------------------------------------------------------------- the registry


class ModelRegistry:
    """Every appliance model the suite knows, by name (the marker's name too).

    Why a live object rather than a constant tuple: a driver repository adds its model
    from a profiles file at configure time, after modules that check model names (the
    topology's validators) were imported; they hold :data:`MODELS`, a live view of this.
    """

    def __init__(self, profiles: list[HardwareProfile], *, default_gate: str | None = None) -> None:
        self._profiles: dict[str, HardwareProfile] = {}
        self._sources: dict[str, str] = {}
        for p in profiles:
            self.register(p, source="ipsec_hil.lab.expectations.hardware")
        if default_gate is not None and default_gate not in self._profiles:
            raise ProfileError(f"default_gate {default_gate!r} is no model of the registry; "
                               f"expected one of {', '.join(self._profiles)}")
        #: The model whose marker selects the merge gate's run (``tools/run-acceptance`` runs
        #: ``-m <default_gate>``): said here, beside the models, so the gate is not a marker
        #: written into a script that a new model's author would have to find.
        self.default_gate = default_gate

    def register(self, profile: HardwareProfile, *, source: str) -> None:
        """Add a model; a second definition of a name is a ProfileError naming both sources."""
        if profile.model in self._profiles and self._sources[profile.model] != source:
            raise ProfileError(f"{source}: model {profile.model!r} is already defined by "
                               f"{self._sources[profile.model]}")
        self._profiles[profile.model] = profile
        self._sources[profile.model] = source

    def unregister(self, model: str) -> None:
        self._profiles.pop(model, None)
        self._sources.pop(model, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._profiles)

    def get(self, model: str) -> HardwareProfile:
        try:
            return self._profiles[model]
        except KeyError:
            raise ProfileError(f"unknown model {model!r}; expected one of {', '.join(self._profiles)}") from None

    def source(self, model: str) -> str:
        return self._sources[model]

    def check_profile(self, model: str, overrides: Mapping[str, Any]) -> None:
        """A lab file's ``profile:`` overrides of ``model`` apply (ProfileError otherwise):
        the topology loader is given this registry (ipsec_hil.lab.topology.registry)."""
        self.get(model).with_overrides(overrides)

    def marker_lines(self) -> list[str]:
        """``ini markers`` lines, one per model: ``xgs136: needs an XGS 136 ...``."""
        return [f"{p.model}: {p.marker or f'needs an appliance of model {p.model} (driver {p.driver})'}"
                for p in self._profiles.values()]


class _LiveModelNames:
    """``MODELS``: the registry's model names as they are now (``in``, iteration, ``len``)."""

    def __contains__(self, name: object) -> bool:
        return name in REGISTRY.names()

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY.names())

    def __len__(self) -> int:
        return len(REGISTRY.names())

    def __repr__(self) -> str:
        return repr(REGISTRY.names())


REGISTRY = ModelRegistry([
    HardwareProfile(
        model="xgs3300",
        driver="octep",
        module_file="/boot/modules/octep.ko",
        counters=default_oids("octep", 0, OCTEP_DRIVER_COUNTERS, OCTEP_COP_COUNTERS),
        # octep counts every encryption in tx_encrypt and every delivery in rx_done (IPv6
        # included); the host queue's refusals in rx_queuefail.
        roles=CounterRoles(encrypted=("tx_encrypt",), decrypted=("rx_done", "rx_queuefail"),
                           errors=("out_orig", "rx_bad", "rx_blocked"),
                           replay_drops=("CRYPTO_DROP_REPLAY_OOW",), tx_drops=("TX_DROP_QUEUE_FULL",),
                           auth_drops=("rx_bad",), malformed_drops=("rx_bad",)),
        marker="needs an XGS 3300 (driver octep) in the topology",
        offloads_udp_encap=True,
    ),
    HardwareProfile(
        model="xgs136",
        driver="npuep",
        module_file="/boot/modules/npuep.ko",
        counters=default_oids("npuep", 0, NPUEP_DRIVER_COUNTERS),
        # npuep splits by door (tx_taken forwarded, tx_accel own) and by family (rx_done
        # IPv4, rx_v6 IPv6).
        roles=CounterRoles(encrypted=("tx_taken", "tx_accel"), decrypted=("rx_done", "rx_v6"),
                           errors=("rx_bad", "rx_nosa", "tx_nonhop", "tx_drop"),
                           no_sa_drops=("rx_nosa",), tx_drops=("tx_drop",), replay_drops=("rx_bad",),
                           auth_drops=("rx_bad",), malformed_drops=("rx_bad",)),
        marker="needs an XGS 136 (driver npuep) in the topology; `pytest -m xgs136` runs what applies to it",
        # Page 001: the first stream into the 136 after a boot ran at 396 Mbit/s (issue 531, open).
        known_issues=(KnownIssue(FIRST_STREAM_AFTER_BOOT, 531, "the first stream after a boot is slow"),),
        # far less memory than the XGS 3300, so smaller mbuf pools: a quarter of its slack
        # (assumed from the memory ratio until the appliance's hw.physmem and
        # kern.ipc.nmbclusters are on a page; a lab file may override: profile.health)
        health=HealthTolerance(mbuf_slack=128, cluster_slack=128, zone_items_slack=8, malloc_in_use_slack=16),
    ),
], default_gate="xgs136")  # the main job: the XGS 136's acceptance run (page 001)

#: The known model names, live (models added from a profiles file included).
MODELS = _LiveModelNames()


def profile_for(model: str, overrides: Mapping[str, Any] | None = None) -> HardwareProfile:
    """The profile of ``model`` with a lab file's overrides (``hosts.<name>.profile``)."""
    return REGISTRY.get(model).with_overrides(overrides)


def host_profile(host: Any) -> HardwareProfile:
    """The hardware profile of a topology's appliance host (``ipsec_hil.lab.topology.Host``)
    with its ``profile:`` overrides. The suite's side of the lab file: the schema itself
    knows no profiles (the twin reads it too)."""
    if host.model is None:
        raise ProfileError(f"host {host.name} is the bench: it has no hardware profile")
    return profile_for(host.model, host.profile)


def main(argv: list[str] | None = None) -> int:
    """``python -m ipsec_hil.lab.expectations.hardware [--default-gate]``: the registry's
    models, one a line (``*`` before the default gate), or the default gate's marker alone
    (what ``tools/run-acceptance`` selects with ``-m``)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args == ["--default-gate"]:
        if REGISTRY.default_gate is None:
            print("hardware: the registry names no default gate", file=sys.stderr)
            return 2
        print(REGISTRY.default_gate)
        return 0
    if args:
        print("usage: python -m ipsec_hil.lab.expectations.hardware [--default-gate]", file=sys.stderr)
        return 2
    for p in map(REGISTRY.get, REGISTRY.names()):
        print(f"{'*' if p.model == REGISTRY.default_gate else ' '} {p.model}\t{p.driver}\t{REGISTRY.source(p.model)}")
    return 0


__all__ = [
    "host_profile",
    "MODELS",
    "REGISTRY",
    "CounterRoles",
    "HardwareProfile",
    "KnownIssue",
    "ModelRegistry",
    "profile_for",
    "OCTEP_DRIVER_COUNTERS",
    "OCTEP_COP_COUNTERS",
    "NPUEP_DRIVER_COUNTERS",
    "SA_COUNTERS",
]


if __name__ == "__main__":
    raise SystemExit(main())
