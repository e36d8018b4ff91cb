"""The fault matrix as data: for every acceptance test function, the fault(s) that must break it.

Why data, not code in each test: the claim "every acceptance test has teeth" is only
worth something if it is checked mechanically and completely. The table, matrix.yaml
(node ids, regular expressions and prose: data, with no code repeated per row), is what
tests/teeth/test_matrix_data.py compares against a collection of tests_hil/ (no test
function may be missing) and what tests/teeth/test_fault_matrix.py runs, one shard and virtual lab per model
(each cell: fault on -> the test must fail naming its invariant; no fault -> it passes).

One row per (test function, model): a representative parametrized node whose tunnel's
local end is that model -- ``lab-*`` nodes run under ``-m xgs3300`` (the DUT), ``npu-*``
and ``many-*`` under ``-m xgs136``. A function that runs on both models has two rows;
test_matrix_data.py fails naming every (function, model) that ``pytest -m MODEL`` selects
and no row covers -- so a new tests_hil function cannot land without its cells. To add
one: append an entry to matrix.yaml (its header says the keys); :func:`load_rows` reads
it into :data:`ROWS`.

A cell is judged strictly (tests/teeth/runner.py judge): the test's own assertion
(AssertionError/InvariantError) raised in the call phase, its message -- not the
traceback -- naming the invariant. ``setup_error`` cells (the fault breaks bring-up) are
allowed but never count as a function's teeth on their own.

One strict cell per function and model is the criterion; a second cell stays only where its
fault has no other row (every fault of the registry must break some test) -- each cell is
a full run of its node, and the matrix must fit the project's 10-minute test budget.

Fault parameters are chosen so the outcome does not depend on timing or machine load:
drop_every n=2 on a five-ping test drops at least two replies and collapses a single TCP
stream below the 60 % floor (n=10 did not, reliably: the namespaces' RTT is tiny); n=10
on the six streams breaks the handed-vs-decrypted tolerance (0.1 %) by two orders of
magnitude; n=50 (2 %) is what a conservation ledger must catch exactly. Names are those of
ipsec_hil_twin.faults.REGISTRY; a unit test checks every parameter against the registry.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

VIRTUAL = Path(__file__).resolve().parents[2] / "topologies" / "virtual.yaml"

#: the ledger table of ipsec_hil.lab.measuring.measure.Ledger.table() (its header line)
LEDGER_RE = r"appliance\s+counter\s+before\s+after\s+delta"


@dataclass(frozen=True)
class FaultSpec:
    """One fault switched on on one appliance of the virtual lab."""

    host: str
    name: str
    params: tuple[tuple[str, object], ...] = ()

    @property
    def kwargs(self) -> dict[str, object]:
        return dict(self.params)

    @property
    def label(self) -> str:
        p = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.name}{{{p}}}@{self.host}" if p else f"{self.name}@{self.host}"


def fault(host: str, name: str, **params: object) -> FaultSpec:
    return FaultSpec(host, name, tuple(sorted(params.items())))


@dataclass(frozen=True)
class Cell:
    """One (acceptance test, fault) pair that must come out "broken by the fault".

    ``expect`` is a regular expression the failure MESSAGE (str of the exception) must
    match: the invariant's words. ``ledger``: the message must also carry the ledger table
    (counter invariants). ``setup_error``: the fault breaks the tunnel's bring-up, so the
    node errors at setup; such a cell never counts as its function's teeth alone.

    ``green``: the other half of "a fault breaks its test" -- node ids (``tests_hil/...``)
    of OTHER tests that must still PASS with this fault on (a fault that breaks everything
    proves little): each runs once more, in the same pytest process as the cell, the
    fault switched on around it (tests/teeth/runner.py plan_steps). ``green_none``: why
    no other test can stay green under this fault (it breaks the tunnel's bring-up).
    """

    fault: FaultSpec
    expect: str
    ledger: bool = False
    setup_error: bool = False
    why: str = ""
    green: tuple[str, ...] = ()
    green_none: str = ""


@dataclass(frozen=True)
class Row:
    """One acceptance test function on one model: its representative node and its cells."""

    function: str  # "test_file.py::test_name" (relative to tests_hil/)
    node: str  # parametrized node id "tests_hil/test_file.py::test_name[params]"
    cells: tuple[Cell, ...] = field(default_factory=tuple)
    note: str = ""
    fresh: bool = False  # every run of the node on a freshly built tunnel (its test tears it down)
    #: why no cell can break this function strictly on this model yet (the cells still run;
    #: the matrix fails once one does, so the declaration cannot outlive the gap)
    gap: str = ""

    @property
    def name(self) -> str:
        """The pytest item name (function name with its parameters)."""
        return self.node.split("::", 1)[1]

    @property
    def tunnel(self) -> str:
        """The topology tunnel of the node (its first parameter's first word: lab, npu, many)."""
        return self.node.split("[", 1)[1].split("-", 1)[0]

    @property
    def case_id(self) -> str:
        """The tunnel case of the node, e.g. lab-v4in4-gcm (the first parameter)."""
        params = self.node.split("[", 1)[1].rstrip("]")
        # case ids are <tunnel>-v?in?-<cipher>[-cN]; further params follow with "-"
        parts = params.split("-")
        if len(parts) < 3:
            raise ValueError(f"{self.node}: no tunnel case in its parameters")
        n = 4 if len(parts) > 3 and parts[3].startswith("c") and parts[3][1:].isdigit() else 3
        return "-".join(parts[:n])

    @property
    def model(self) -> str:
        """The model marker pytest gives the node: its tunnel's local appliance's model."""
        return tunnel_models()[self.tunnel]


@functools.lru_cache(maxsize=1)
def tunnel_models() -> dict[str, str]:
    """{tunnel name: model of its local end} of the virtual lab (the suite's own loader)."""
    from ipsec_hil.lab.topology import load_topology
    from ipsec_hil.lab.expectations.hardware import REGISTRY

    topo = load_topology(VIRTUAL, models=REGISTRY)
    hosts = {h.name: h for h in topo.appliances()}
    return {name: hosts[t.local.host].model for name, t in topo.tunnels.items()}


MATRIX_FILE = Path(__file__).with_name("matrix.yaml")
_ROW_KEYS = {"node", "cells", "note", "fresh", "gap"}
_CELL_KEYS = {"fault", "host", "params", "expect", "ledger", "setup_error", "why", "green", "green_none"}


def load_rows(path: Path = MATRIX_FILE) -> tuple[Row, ...]:
    """The rows of ``path`` (matrix.yaml), in its order. A key the table does not know
    fails naming the node: a misspelt ``setup_eror`` must not turn into a cell judged
    differently than written."""
    import yaml

    out = []
    for entry in yaml.safe_load(path.read_text(encoding="utf-8")):
        if "absent" in entry:
            continue  # the faults a model has no cell of, and why (load_absent)
        node = entry.get("node", "")
        if set(entry) - _ROW_KEYS or not node.endswith("]") or "[" not in node:
            raise ValueError(f"{path.name}: {node or entry}: expected node (FILE::FUNCTION[PARAMS]), cells and "
                             f"optionally {', '.join(sorted(_ROW_KEYS - {'node', 'cells'}))}; found {sorted(entry)}")
        cells = []
        for c in entry.get("cells") or ():
            if set(c) - _CELL_KEYS or not {"fault", "host", "expect"} <= set(c):
                raise ValueError(f"{path.name}: {node}: a cell needs fault, host and expect, optionally "
                                 f"{', '.join(sorted(_CELL_KEYS - {'fault', 'host', 'expect'}))}; found {sorted(c)}")
            green = c.get("green") or []
            if not isinstance(green, list) or not all(isinstance(g, str) and g.endswith("]") for g in green):
                raise ValueError(f"{path.name}: {node}: {c['fault']}@{c['host']}: green: expected a list of "
                                 f"nodes (FILE::FUNCTION[PARAMS]), found {green!r}")
            if green and c.get("green_none"):
                raise ValueError(f"{path.name}: {node}: {c['fault']}@{c['host']}: green and green_none together")
            cells.append(Cell(fault(c["host"], c["fault"], **c.get("params", {})), c["expect"],
                              ledger=c.get("ledger", False), setup_error=c.get("setup_error", False),
                              why=c.get("why", ""), green=tuple(f"tests_hil/{g}" for g in green),
                              green_none=c.get("green_none", "")))
        out.append(Row(node.split("[", 1)[0], f"tests_hil/{node}", tuple(cells), entry.get("note", ""),
                       entry.get("fresh", False), entry.get("gap", "")))
    return tuple(out)


def load_absent(path: Path = MATRIX_FILE) -> list[tuple[str, str, str]]:
    """(model, fault, why) for each fault of the registry a model has no cell of: the
    ``- absent: {MODEL: {FAULT: why}}`` entry of matrix.yaml, printed in each shard's report.

    Why a reason per missing cell: the matrix is to show the same fault set on both models;
    where a fault cannot apply to a model (its tunnels never take the path the fault
    changes), the table says so instead of leaving a silent hole."""
    import yaml

    out = []
    for entry in yaml.safe_load(path.read_text(encoding="utf-8")):
        if "absent" not in entry:
            continue
        if set(entry) != {"absent"} or not isinstance(entry["absent"], dict):
            raise ValueError(f"{path.name}: absent: expected {{MODEL: {{FAULT: why}}}}, found {entry!r}")
        for model, faults in entry["absent"].items():
            if not isinstance(faults, dict) or not all(isinstance(w, str) and w.strip() for w in faults.values()):
                raise ValueError(f"{path.name}: absent: {model}: expected {{FAULT: why}} with a reason each, "
                                 f"found {faults!r}")
            out += [(str(model), str(f), str(w)) for f, w in faults.items()]
    return out


ROWS = load_rows()
ABSENT = load_absent()


#: Faults of the twin's registry the matrix does not run, each with the reason: listed on the
#: matrix page, never counted as noticed (when the reason goes, a row replaces the entry).
AWAITING_TEST: dict[str, str] = {
    "counter_renamed": "a survey fault (tests/survey/test_survey.py breaks on it): an acceptance test "
                       "stops at its first counter read with the ProfileError naming the OID, in every row alike",
    "oq_drop_counted": "breaks no test, by design (issue 52): a counted loss within the loss rule; "
                       "tests/teeth/test_counted_loss.py proves on each model that the conservation test passes "
                       "with it and its page lists the frames under Counted loss with their counters",
}


#: Faults that act on bring-up: the node's tunnel is built afresh with the fault on (the
#: stepper finalizes the session's tunnel before and after the run); every other fault
#: acts on the running tunnel.
FRESH: dict[str, str] = {
    "child_never_up": "acts on bring-up: the tunnel must be built while it is on",
    "peer_unreachable": "acts on bring-up: the tunnel must be built while it is on",
    "spd_policy_missing": "bring-up reads the SPD: the tunnel must be built while it is on",
    "decline_ipv6_sa": "the driver decides when an association is added: a fresh bring-up",
    "silent_reboot": "the appliance reboots: the tunnel it carried is gone for later runs (the "
                     "stepper also waits for the rebooted appliance to answer before the next run)",
    "rekey_lost": "the rekey initiator gives up and deletes the IKE_SA: the tunnel is gone for later runs",
    "sa_forgotten_on_link_down": "the driver forgot the tunnel's associations (the kernel runs them): the "
                                 "tunnel is built again for later runs",
}


#: Faults that act on each packet (or each read) only while switched on, and leave no state
#: behind once off: no association added, kept or removed, no leak ledger, no reboot, no
#: fresh tunnel (an ESN association is renewed after each run by its test). A row whose
#: every cell is one of these needs no damage check after its cells: one healthy run
#: fewer (tests/teeth/runner.py healthy_runs_of). Each reason names what it touches.
STATELESS: dict[str, str] = {
    "drop_every": "drops outbound frames after counting them", "corrupt_icv": "flips an ICV bit of outbound frames",
    "replay": "sends a duplicate of outbound frames", "count_extra": "adds one to a counter read (deltas unaffected)",
    "wrong_next_header": "writes the trailer of outbound frames", "fragment_instead_of_ptb": "the PMTU gate's verdict",
    "wrong_ptb_mtu": "the PTB's MTU field", "own_too_big_fragmented": "the own-packet gate's verdict",
    "ipv4_df_gate": "the forwarded IPv4 gate's verdict", "pad_length_lost": "loses frames of one padding length",
    "esp_pad_extra": "pads outbound frames", "gcm_nonce_swapped": "seals outbound frames",
    "cleartext_leak": "copies outbound packets to the wire", "replay_window_off_by_one": "one window check",
    "replay_duplicates_accepted": "one window check", "tampered_icv_delivered": "delivers failed frames",
    "esn_high_bits_lost": "seals outbound ESN frames (its test renews the association after each run)",
    "esn_rx_high_bits_lost": "infers inbound high bits (its test renews the association after each run)",
    "slow_first_stream": "caps a stream's rate", "wire_loss_uncounted": "loses inbound frames before any counter", "dmesg_error_under_traffic": "appends log lines (tests read the lines added)",
}


def rows(model: str | None = None) -> tuple[Row, ...]:
    """Every row, or the rows of one model (a shard of tests/teeth/shard.py)."""
    return ROWS if model is None else tuple(r for r in ROWS if r.model == model)


def all_cells() -> list[tuple[Row, Cell]]:
    return [(r, c) for r in ROWS for c in r.cells]


def models() -> list[str]:
    """The models the fault matrix runs a shard for: every model of the suite's hardware
    registry (ipsec_hil.lab.expectations.hardware.REGISTRY), in its order.

    Why the registry and not the rows: a model is added by its registry entry (with a twin
    personality and its block in topologies/virtual.yaml); its shard then exists at once
    (tests/teeth/test_fault_matrix.py is parametrised by this), and
    tests/teeth/test_matrix_data.py fails naming every function it still lacks a row for,
    rather than the model going unguarded because nobody listed it."""
    from ipsec_hil.lab.expectations.hardware import REGISTRY

    return list(REGISTRY.names())
