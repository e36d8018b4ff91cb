"""What each emulated appliance model looks like from inside: the twin's own table.

Why the twin keeps its own table instead of asking ipsec_hil.lab.expectations.hardware: the suite's
profile is what the tests *expect*; this table is what the lab *does*.  If both read one
table, a wrong counter name or a wrong counting rule would pass on the lab and fail only
on hardware.  tests/oracle/test_personality_agreement.py checks that the two agree on
names (driver, module file, every OID), so a mismatch fails loudly instead.

Adding a model to the twin is one `Personality` entry in PERSONALITIES (the topology
file's `model:` selects it).  The counting rules are data (`Counting`): the datapath
bumps the counters named here and has no per-driver branches.

OID scheme (DESIGN.md "Hardware profiles"; the real OIDs are not published, the lab file
may rename any of them with `hosts.X.profile.counters`/`oids` or renumber with `unit`):
  dev.<driver>.<unit>.ipsec.<name>   the driver's counters and sa_count/sa_inet/sa_inet6
  dev.<driver>.<unit>.cop.<NAME>     coprocessor counters (upper case; octep only)

What each driver counts, from the measurement pages (seeds 000-002) and DESIGN.md
"Counter meanings":
  octep (XGS 3300): every packet encrypted moves tx_encrypt and the coprocessor's
    FROM_KN_TO_IPSEC_ENCR; the appliance's own packets also move out_taken.  Every
    frame of a known SA moves FROM_WIRE_TO_IPSEC_DECR; a replayed one
    CRYPTO_DROP_REPLAY_OOW; an ICV failure rx_bad, and so does a payload of a wrong length
    or padding (`rx_malformed`: the driver has no separate counter); a decrypted packet outside the SA's
    selectors rx_blocked; an IPv6 inner rx_v6 (before delivery); a delivered packet
    rx_done, one the stack refused rx_queuefail.  Unknown SPI: no driver SA, so FreeBSD's
    own dropped-no-tdb.  A send failure: TX_DROP_QUEUE_FULL.
  npuep (XGS 136): forwarded packets move tx_taken; own packets tx_accel (the offload
    path) unless their route names a gateway off the tunnel's port, which goes through
    the association's output step (tx_taken; the 001 page).  Delivered IPv4 inner
    rx_done, IPv6 inner rx_v6; ICV, replay, length/padding and selector failures all rx_bad; unknown
    SPI rx_nosa; send failure tx_drop.  Issue 531: the first stream after a boot is slow.

Per-reason drops (issue 12): replay `rx_replay`, ICV `rx_bad`, wrong length or padding
`rx_malformed`, unknown SPI `rx_no_sa`.  A frame too short to carry an SPI never reaches
a driver: FreeBSD's ipsec_common_input counts it as `dropped-short-header` (the engine
does, for every model); a kernel-run association counts FreeBSD's espstat per reason
(ipsec_hil_twin.engine.esp: dropped-bad-length / -bad-auth / -bad-crypto, possible-replay-detected).
"""
from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping

TYPE_CHECKING = False  # neither typing nor dataclasses at run time: sysctl and vmstat import this per command
if TYPE_CHECKING:
    from typing import Any

SA_COUNTERS = ("sa_count", "sa_inet", "sa_inet6")
"""Offloaded associations, all and per outer family (written by the control process)."""

KERNEL_NO_SA = "esp:dropped-no-tdb"
"""FreeBSD's espstat counter for an ESP frame whose SPI no association has."""
ENGINE_WRITE_FAIL = "eng:rx_write_fail"
"""Engine-private: a decrypted packet esp0 refused, for drivers without such a counter."""


_COUNTING_FIELDS = ("tx_forwarded tx_own tx_own_output_step tx_fail rx_frame rx_no_sa rx_replay rx_bad "
                    "rx_malformed rx_blocked rx_inner_v6 rx_delivered_v4 rx_delivered_v6 rx_refused")


class Counting(namedtuple("Counting", _COUNTING_FIELDS)):
    """Which counter a driver moves for each event (names from the driver's own list,
    or the kernel's/engine's `esp:`/`eng:` slots where the driver has none).

    The tx_* fields that name several counters are tuples; rx_frame and rx_inner_v6 are
    None where the driver has no such counter.  (Immutable namedtuples, neither dataclasses
    nor typing's NamedTuple, here and below: the emulated sysctl and vmstat import this
    module on every run, and those imports cost each of them ~10 ms;
    tests/twin_shell/test_command_imports.py keeps it so.)"""

    __slots__ = ()


class KernelFootprint(namedtuple("KernelFootprint", "sa_zone pkt_zone attach_malloc sa_malloc")):
    """The driver's own kernel memory as `vmstat -z` / `vmstat -m` show it (ipsec_hil_twin.fbsd._kmem).

    Names and sizes are the twin's assumption (the drivers are not public): one UMA zone
    item and one `<driver>_sa` malloc allocation per offloaded association, one packet
    zone item per packet in the driver's queues, and a fixed attach-time allocation.

    sa_zone: (zone name, item bytes): one item per offloaded association.
    pkt_zone: (zone name, item bytes, limit): one item per packet queued in the driver.
    attach_malloc: (malloc type, allocations, KiB, size classes) made at attach, freed at detach.
    sa_malloc: (malloc type, size class): one allocation per offloaded association.
    """

    __slots__ = ()


class Personality(namedtuple("Personality", "model driver hw_model driver_counters cop_counters counting "
                                            "replay_window offloads_ipv6_outer first_stream_issue footprint "
                                            "offloads_udp_encap ncpu cpu_ns cpu_at_mbit",
                             defaults=(32, True, None, None, False, 1, 0, 0.0))):
    """One emulated appliance model.

    driver_counters / cop_counters: the names the driver exports under ipsec. / cop.;
    counting: a Counting; replay_window (32); offloads_ipv6_outer (True);
    first_stream_issue: the issue number of a slow first stream after boot (None);
    footprint: a KernelFootprint (None);
    offloads_udp_encap: whether the driver takes UDP-encapsulated (NAT-T, RFC 3948)
    associations; if not, the kernel runs them (its ESP counters move, the driver's stay
    still).  The twin's assumption (octep yes, npuep no), to be checked on hardware.
    ncpu: `sysctl hw.ncpu`, the CPUs of hw_model's processor;
    cpu_ns: the appliance's CPU time per ESP packet its engine seals or opens, in ns
    (ipsec_hil_twin.fbsd.cptime: kern.cp_time's CP_INTR), derived from the pages beside
    each entry.
    cpu_at_mbit: the link rate (Mbit/s) at which the page measured that cost: the twin's
    links are a scale model of the pages' (100 Mbit/s for the gigabit ports), and the
    engine keeps the page's CPU share at the link's rate (ipsec_hil_twin.engine.cost.scaled_ns);
    0: charge cpu_ns as it is.
    """

    __slots__ = ()

    @property
    def module_file(self) -> str:
        return f"/boot/modules/{self.driver}.ko"

    @property
    def counter_names(self) -> tuple[str, ...]:
        """Every counter the driver exports, in sysctl registration order."""
        return self.driver_counters + SA_COUNTERS + self.cop_counters

    def oids(self, unit: int = 0) -> dict[str, str]:
        """Logical counter name -> sysctl OID for driver unit `unit`."""
        oids = {n: f"dev.{self.driver}.{unit}.ipsec.{n}" for n in self.driver_counters + SA_COUNTERS}
        oids.update({n: f"dev.{self.driver}.{unit}.cop.{n}" for n in self.cop_counters})
        return oids


class PersonalityError(ValueError):
    """An unknown model or a lab-file override the personality cannot apply."""


PERSONALITIES: dict[str, Personality] = {
    "xgs3300": Personality(
        model="xgs3300", driver="octep",
        hw_model="Intel(R) Atom(TM) CPU C3758R @ 2.40GHz",
        driver_counters=("tx_encrypt", "out_taken", "out_orig", "rx_v6", "rx_done",
                         "rx_queuefail", "rx_bad", "rx_blocked"),
        cop_counters=("FROM_KN_TO_IPSEC_ENCR", "FROM_WIRE_TO_IPSEC_DECR",
                      "CRYPTO_DROP_REPLAY_OOW", "TX_DROP_QUEUE_FULL"),
        counting=Counting(
            tx_forwarded=("tx_encrypt", "FROM_KN_TO_IPSEC_ENCR"),
            tx_own=("tx_encrypt", "FROM_KN_TO_IPSEC_ENCR", "out_taken"),
            tx_own_output_step=("tx_encrypt", "FROM_KN_TO_IPSEC_ENCR", "out_taken"),
            tx_fail="TX_DROP_QUEUE_FULL",
            rx_frame="FROM_WIRE_TO_IPSEC_DECR", rx_no_sa=KERNEL_NO_SA,
            rx_replay="CRYPTO_DROP_REPLAY_OOW", rx_bad="rx_bad", rx_malformed="rx_bad",
            rx_blocked="rx_blocked",
            rx_inner_v6="rx_v6", rx_delivered_v4="rx_done", rx_delivered_v6="rx_done",
            rx_refused="rx_queuefail"),
        footprint=KernelFootprint(sa_zone=("octep_sa", 1024), pkt_zone=("octep_pkt", 128, 8192),
                                  attach_malloc=("octep", 12, 4098, (64, 256, 4096, 65536)),
                                  sa_malloc=("octep_sa", 1024)),
        offloads_udp_encap=True,
        # the C3758R is Intel's 8-core Atom (hw_model above)
        ncpu=8,
        # page 000: "one octep0 thread 54.9 %" while the appliance sent one stream at
        # 1,820.8 Mbit/s (the page does not say which of its runs the thread was read in:
        # taken as that one, the ~1.8 Gbit/s it names first). Frames of 1,500 bytes (the
        # path's MTU; page 002 counted 1,455 bytes of stream a frame): 1,820.8e6 / (1,500 x 8)
        # = 151,733 frames/s, 0.549 CPU-s/s / 151,733 = 3.618 us a frame -- the driver's
        # thread alone, where the XGS 136's figure is its whole host.
        cpu_ns=3618,
        cpu_at_mbit=1820.8,
    ),
    "xgs136": Personality(
        model="xgs136", driver="npuep",
        hw_model="Intel(R) Atom(TM) CPU C3338R @ 1.80GHz",
        driver_counters=("tx_taken", "tx_accel", "rx_done", "rx_v6", "rx_bad", "rx_nosa",
                         "tx_nonhop", "tx_drop"),
        cop_counters=(),
        counting=Counting(
            tx_forwarded=("tx_taken",), tx_own=("tx_accel",), tx_own_output_step=("tx_taken",),
            tx_fail="tx_drop",
            rx_frame=None, rx_no_sa="rx_nosa",
            rx_replay="rx_bad", rx_bad="rx_bad", rx_malformed="rx_bad", rx_blocked="rx_bad",
            rx_inner_v6=None, rx_delivered_v4="rx_done", rx_delivered_v6="rx_v6",
            rx_refused=ENGINE_WRITE_FAIL),
        first_stream_issue=531,
        footprint=KernelFootprint(sa_zone=("npuep_sa", 512), pkt_zone=("npuep_pkt", 256, 4096),
                                  attach_malloc=("npuep", 6, 1030, (64, 1024, 65536)),
                                  sa_malloc=("npuep_sa", 512)),
        offloads_udp_encap=False,
        # the C3338R is Intel's 2-core Atom (hw_model above)
        ncpu=2,
        # page 002: "the XGS 136's CPUs, the middle of the run: 29 % busy" while six streams
        # carried 915 Mbit/s for 30 s and its host handed the engine 2,358,711 frames
        # ("the CPUs at 29 % are the host forwarding"): 0.29 x 2 CPUs x 30 s = 17.4 CPU-s,
        # / 2,358,711 frames = 7.377 us a frame (78,624 frames/s, 1,455 bytes of stream each)
        cpu_ns=7377,
        cpu_at_mbit=915.0,
    ),
}

BY_DRIVER: dict[str, Personality] = {p.driver: p for p in PERSONALITIES.values()}

ALL_DRIVER_COUNTERS: tuple[str, ...] = tuple(dict.fromkeys(
    n for p in PERSONALITIES.values() for n in p.counter_names))
"""Every counter name of every model: the shared counter block has one slot each."""


def _lookup(table: dict[str, Personality], key: str, what: str) -> Personality:
    try:
        return table[key]
    except KeyError:
        raise PersonalityError(f"{what} {key!r}: the twin emulates {', '.join(table)}") from None


def personality(model: str) -> Personality:
    """The personality of `model`; PersonalityError naming the known models otherwise."""
    return _lookup(PERSONALITIES, model, "model")


def for_driver(driver: str) -> Personality:
    """The personality whose driver is `driver` (host.json names the driver)."""
    return _lookup(BY_DRIVER, driver, "driver")


class HostPersonality(namedtuple("HostPersonality", "base counters module_file replay_window "
                                                    "offloads_ipv6_outer first_stream_issue")):
    """A personality (``base``) with one host's lab-file overrides applied
    (`hosts.X.profile`): counters is logical name -> OID."""

    __slots__ = ()


_SCALARS = {"module_file": str, "replay_window": int, "accepts_ipv6_sa": bool,
            "first_stream_issue": (int, type(None)), "unit": int}
_SUITE_ONLY = ("kernel_esp_worst_case_block", "floor_margin", "rekey_blocked_ms", "counter_lag_s")
"""Profile keys that describe the suite's expectations, not the appliance: ignored here
(the twin's counters are live whatever ``counter_lag_s`` says: the loops write each
packet's count into the shared block, ipsec_hil_twin.engine.counters)."""


def for_host(model: str, overrides: Mapping[str, Any] | None, where: str = "profile") -> HostPersonality:
    """The personality of `model` as one host of the lab file presents it.

    The lab file is the contract: `counters`/`oids` rename OIDs, `unit` renumbers the
    default ones, `module_file`, `replay_window`, `accepts_ipv6_sa` and
    `first_stream_issue` change what the emulated appliance does.  Anything else is an
    error naming `where`.
    """
    base = personality(model)
    ov = dict(overrides or {})
    unit = 0
    scalars: dict[str, Any] = {}
    renames: dict[str, str] = {}
    for key, value in ov.items():
        if key in ("counters", "oids"):
            if not isinstance(value, Mapping):
                raise PersonalityError(f"{where}.{key}: expected a mapping name -> OID, found {value!r}")
            for name, oid in value.items():
                if name not in base.counter_names:
                    raise PersonalityError(f"{where}.{key}.{name}: {model} ({base.driver}) has no "
                                           f"counter {name!r}; known: {', '.join(base.counter_names)}")
                renames[str(name)] = str(oid)
        elif key in _SCALARS:
            if isinstance(value, bool) and _SCALARS[key] is not bool or not isinstance(value, _SCALARS[key]):
                raise PersonalityError(f"{where}.{key}: unexpected value {value!r}")
            if key == "unit":
                unit = int(value)
            else:
                scalars[key] = value
        elif key not in _SUITE_ONLY:
            raise PersonalityError(f"{where}.{key}: unknown key; expected counters, oids, "
                                   f"{', '.join(_SCALARS)}")
    counters = base.oids(unit)
    counters.update(renames)
    return HostPersonality(
        base=base, counters=counters,
        module_file=str(scalars.get("module_file", base.module_file)),
        replay_window=int(scalars.get("replay_window", base.replay_window)),
        offloads_ipv6_outer=bool(scalars.get("accepts_ipv6_sa", base.offloads_ipv6_outer)),
        first_stream_issue=scalars.get("first_stream_issue", base.first_stream_issue),
    )


class TwinModels:
    """The models the twin emulates, as the topology loader asks for them
    (ipsec_hil.lab.topology.registry.KnownModels): the twin checks a lab file against its
    own personalities, never against the suite's hardware registry."""

    def names(self) -> tuple[str, ...]:
        return tuple(PERSONALITIES)

    def check_profile(self, model: str, overrides: Mapping[str, Any]) -> None:
        for_host(model, overrides)


MODELS = TwinModels()
"""Pass to ``load_topology(path, models=MODELS)`` in the twin."""
