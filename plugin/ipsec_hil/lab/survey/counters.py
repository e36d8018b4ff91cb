"""The model's profile against the counters an appliance really has.

Why: the profiles' OIDs (ipsec_hil.lab.expectations.hardware) are the project's guess --
the real OIDs are not published. On the first day on a real lab the guess meets the
driver: a profile counter the appliance does not know makes every counter read fail
(Appliance.snapshot's ProfileError), and a driver counter no profile names is evidence
nobody checks. This compares the two sets and, for each missing counter, proposes the
present one whose name is most alike (difflib's ratio over the OID's last components):
a proposal for a person to confirm, never applied by itself.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from ipsec_hil.lab.expectations.hardware import HardwareProfile

#: the least name similarity (difflib ratio, 0..1) for a proposal: rx_done/rx_dne 0.92,
#: tx_encrypt/tx_encrypted 0.91, tx_encrypt/tx_encrypt_pkts 0.80, rx_bad/tx_drop 0.46
MIN_SIMILARITY = 0.6


@dataclass(frozen=True)
class Proposal:
    """``logical`` (profile OID ``was``) is probably ``oid`` on this appliance."""

    logical: str
    was: str
    oid: str
    similarity: float


@dataclass(frozen=True)
class CounterDiff:
    """One appliance: the profile's OIDs it does not know (logical -> OID), the integer
    leaves of the driver's tree no profile OID names (OID -> value), the proposals."""

    host: str
    model: str
    driver: str
    missing: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)
    proposals: tuple[Proposal, ...] = ()
    counters_read: tuple[str, ...] = ()  # the profile's OIDs the appliance knows

    @property
    def matched(self) -> bool:
        return not self.missing and not self.unknown


def _tail(oid: str) -> str:
    """What names a counter in an OID: its last component (dev.octep.0.ipsec.rx_done -> rx_done)."""
    return oid.rsplit(".", 1)[-1].lower()


def _similarity(a: str, b: str) -> float:
    tail = difflib.SequenceMatcher(None, _tail(a), _tail(b)).ratio()
    parent = a.rsplit(".", 1)[0] == b.rsplit(".", 1)[0]
    return round(tail if parent else tail * 0.9, 3)  # same node first: a renamed leaf stays in place


def compare(host: str, profile: HardwareProfile, unknown_oids: list[str], tree: Mapping[str, Any]) -> CounterDiff:
    """``unknown_oids``: the profile's OIDs sysctl called unknown; ``tree``: the parsed
    ``sysctl dev.<driver>`` (name -> value). Leaves whose name starts with ``%`` (newbus's
    %desc, %driver, ...) and non-integer values are no counters."""
    counters = dict(profile.counters)
    unknown_set = set(unknown_oids)
    missing = {n: o for n, o in counters.items() if o in unknown_set}
    named = set(counters.values())
    extra = {o: v for o, v in tree.items()
             if o not in named and not _tail(o).startswith("%") and isinstance(v, int) and not isinstance(v, bool)}
    pairs = sorted(((_similarity(was, oid), logical, was, oid) for logical, was in missing.items() for oid in extra),
                   key=lambda p: (-p[0], p[1], p[3]))
    taken_l: set[str] = set()
    taken_o: set[str] = set()
    proposals = []
    for score, logical, was, oid in pairs:
        if score < MIN_SIMILARITY or logical in taken_l or oid in taken_o:
            continue
        taken_l.add(logical)
        taken_o.add(oid)
        proposals.append(Proposal(logical, was, oid, score))
    return CounterDiff(host, profile.model, profile.driver, missing, extra, tuple(proposals),
                       tuple(o for o in counters.values() if o not in unknown_set))


def proposed_profiles(diffs: list[tuple[HardwareProfile, CounterDiff]]) -> str | None:
    """A ``--hil-profiles`` file (ipsec_hil.lab.expectations.profiles_file) with the proposals
    applied, one model ``<model>_surveyed`` per surveyed model that has any; None if none.

    A file cannot redefine a built-in model, hence the new name; the same mapping under a
    lab file's ``hosts.<name>.profile.counters`` overrides the built-in one instead."""
    models: dict[str, Any] = {}
    notes: list[str] = []
    for profile, diff in diffs:
        if not diff.proposals:
            continue
        name = f"{profile.model}_surveyed"
        entry = models.get(name)
        if entry is None:
            entry = models[name] = {
                "driver": profile.driver,
                "module_file": profile.module_file,
                "marker": f"an {profile.model} whose counters are named as surveyed (proposal)",
                "counters": dict(profile.counters),
                "roles": {role: list(names) for role, names in profile.roles.items()},
                "replay_window": profile.replay_window,
                "kernel_esp_worst_case_block": profile.kernel_esp_worst_case_block,
                "accepts_ipv6_sa": profile.accepts_ipv6_sa,
                "floor_margin": profile.floor_margin,
                "unit": profile.unit,
                "counter_lag_s": profile.counter_lag_s,
            }
        for p in diff.proposals:
            old = entry["counters"][p.logical]
            if old != p.was and old != p.oid:
                notes.append(f"# {diff.host}: {p.logical} -> {p.oid} conflicts with another host's {old}; kept {old}")
                continue
            entry["counters"][p.logical] = p.oid
            notes.append(f"# {diff.host}: {p.logical}: {p.was} -> {p.oid} (name similarity {p.similarity:.2f})")
        for logical, oid in diff.missing.items():
            if logical not in {p.logical for p in diff.proposals}:
                notes.append(f"# {diff.host}: {logical}: {oid} is unknown and nothing present resembles it")
    if not models:
        return None
    head = ["# PROPOSAL by ipsec-hil-survey: counter names matched by similarity, to be confirmed by a person",
            "# before use (pytest --hil-profiles THIS_FILE); or put the counters under the lab file's",
            "# hosts.<name>.profile.counters to override the built-in model instead.", *notes]
    return "\n".join(head) + "\n" + yaml.safe_dump({"models": models}, sort_keys=False)
