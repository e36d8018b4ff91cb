"""Tunnel cases: which (tunnel, configuration) pairs of a topology a test runs on.

Why a library module: "which configurations does this lab offer, and which appliances
must run together" is a fact of the topology, useful from a Python prompt (plan a run,
check a lab file) as much as to pytest's parametrisation (ipsec_hil.fixtures turns each case
into one parameter carrying the markers named by :func:`case_marker_names`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ipsec_hil.lab.topology import Topology, TunnelConfig
from ipsec_hil.lab.topology.tunnels import Lifetimes

#: The keys of ``@pytest.mark.tunnels(...)`` (criteria of :func:`tunnel_cases`). Every key
#: but ``tunnel`` is a property of the configuration: an acceptance test selects by those
#: only, so it runs on any lab file that offers the property whatever its tunnels are called
#: (tests/acceptance/test_selection_by_properties.py renames every host, port and tunnel of
#: the default lab and compares the collection). ``tunnel`` (a name) is for the project's
#: own tests on lab files they write themselves.
FILTER_KEYS = ("model", "remote_cipher", "outer", "inner", "cipher", "children", "tunnel", "encap", "esn",
               "replay_window", "lifetimes")
#: the keys an acceptance test may use: properties, never a name
PROPERTY_KEYS = tuple(k for k in FILTER_KEYS if k != "tunnel")
#: a criterion's value that admits every tunnel (``replay_window=ANY``)
ANY = "any"
#: ``lifetimes=`` values: children that rekey by themselves (a rekey_time), children that
#: only expire (rekey_time 0, a life_time: the hard expiry); None (the default): neither
LIFETIME_KINDS = ("rekey", "expiry")


@dataclass(frozen=True)
class TunnelCase:
    """A topology tunnel in one configuration; ``model`` is its local end's (the marker's)."""

    tunnel: str
    config: TunnelConfig
    model: str

    @property
    def id(self) -> str:
        return f"{self.tunnel}-{self.config.id}"


def as_set(value: Any) -> set | None:
    """A criterion's value as a set (None: no criterion)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple, set, frozenset)):
        return set(value)
    return {value}


def lifetime_kind(lifetimes: Lifetimes | None) -> str | None:
    """What a tunnel's children do within seconds: "rekey", "expiry" or None (strongSwan's hour).

    Why a kind, not the numbers: the rekey tests need "children that rekey by themselves" or
    "children that expire without a rekey"; how many seconds is the lab file's choice, read
    by the test from ``tunnel.plan.lifetimes``.
    """
    if lifetimes is None:
        return None
    if lifetimes.rekey_time > 0:
        return "rekey"
    if lifetimes.life_time > 0:
        return "expiry"
    return None  # both 0: never rekeyed, never expired (swanctl's "disabled")


def tunnel_cases(topology: Topology, **criteria: Any) -> list[TunnelCase]:
    """Every (tunnel, configuration) of ``topology`` matching the criteria.

    ``children`` is ``"one"`` or ``"many"``; the other keys take a value or a list. An
    unknown key is a ValueError naming the known ones. ``encap`` (NAT-T tunnels) defaults
    to False: a test's size and wire expectations assume plain ESP unless it asks for
    ``encap=True`` (or ``[True, False]``). Likewise ``esn`` defaults to False and
    ``replay_window`` to None (strongSwan's window): only the wire tests that ask for 64-bit
    sequence numbers or another window (``replay_window=ANY`` admits every one) meet such a
    tunnel. ``lifetimes`` (``"rekey"``, ``"expiry"``, see :func:`lifetime_kind`) defaults to
    None: a tunnel whose children rekey or expire within seconds meets only the tests that
    ask for that (or name it with ``tunnel=``): a steady-stream test must not meet a rekey.
    """
    unknown = set(criteria) - set(FILTER_KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(unknown)}; known: {FILTER_KEYS}")
    want = {k: as_set(v) for k, v in criteria.items()}
    if want.get("lifetimes") and not want["lifetimes"] <= {*LIFETIME_KINDS, ANY, None}:
        raise ValueError(f"lifetimes: expected one of {LIFETIME_KINDS}, {ANY!r} or None, found {criteria['lifetimes']!r}")
    for key, default in (("encap", False), ("esn", False), ("replay_window", None), ("lifetimes", None)):
        if key == "lifetimes" and want.get("tunnel"):
            want.setdefault(key, {ANY})  # a tunnel named is taken whatever its lifetimes
        want.setdefault(key, {default})
        if want[key] == {ANY}:
            want[key] = None

    def rejects(key: str, value: Any) -> bool:
        return bool(want.get(key)) and value not in want[key]

    out = []
    for name, t in topology.tunnels.items():
        model = topology.hosts[t.local.host].model
        if (rejects("tunnel", name) or rejects("model", model) or rejects("remote_cipher", t.remote.cipher)
                or rejects("encap", t.encap) or rejects("esn", t.esn) or rejects("replay_window", t.replay_window)
                or rejects("lifetimes", lifetime_kind(t.lifetimes))):
            continue
        for cfg in t.configs():
            kids = "one" if cfg.children == 1 else "many"
            if any(rejects(k, v) for k, v in (("outer", cfg.outer), ("inner", cfg.inner),
                                               ("cipher", cfg.cipher), ("children", kids))):
                continue
            out.append(TunnelCase(name, cfg, model))
    return out


def appliance_groups(topology: Topology) -> dict[str, str]:
    """Tunnel name -> its group: the connected set of appliances it belongs to.

    Why connected sets, not pairs: two tunnels that share an appliance (the virtual lab's
    lab/npu/many all end on peer3300) must never run at once, so every tunnel reachable
    through shared appliances lands in one group, named by its sorted appliances joined
    with "+" (e.g. "dut3300+peer3300+xgs136"). Under ``-n`` with ``--dist loadgroup``
    xdist gives each group to one worker; disjoint sets run in parallel.
    """
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for t in topology.tunnels.values():
        parent[find(t.local.host)] = find(t.remote.host)
    members: dict[str, list[str]] = {}
    for host in list(parent):
        members.setdefault(find(host), []).append(host)
    name = {root: "+".join(sorted(hosts)) for root, hosts in members.items()}
    return {tname: name[find(t.local.host)] for tname, t in topology.tunnels.items()}


def case_marker_names(case: TunnelCase) -> list[str]:
    """The markers a case's tests carry: its model's, its families', its cipher's, six_children."""
    names = [case.model]
    if case.config.outer == "ipv6":
        names.append("outer_v6")
    if case.config.inner == "ipv6":
        names.append("inner_v6")
    names.append("gcm" if case.config.cipher == "aes-gcm-16" else "cbc")
    if case.config.children > 1:
        names.append("six_children")
    return names
