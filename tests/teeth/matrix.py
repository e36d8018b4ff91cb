"""The fault matrix as data: for every acceptance test function, the fault(s) that must break it.

Why data, not code in each test: the claim "every acceptance test has teeth" is only
worth something if it is checked mechanically and completely. This table is what
tests/teeth/test_matrix_data.py compares against a collection of tests_hil/ (no test
function may be missing) and what tests/teeth/test_fault_matrix.py runs on one virtual lab
(each cell: fault on -> the test must fail naming its invariant; no fault -> it passes).

One representative parametrized node per test function: the cheapest configuration of the
virtual lab (topologies/virtual.yaml) that the fault applies to -- lab-v4in4-gcm (the
10G path, kernel cipher on the peer), lab-v6in4-gcm (inner IPv6), lab-v4in6-gcm (outer
IPv6), npu-v4in4-gcm (the XGS 136), many-v4in4-gcm-c6 (six children).

Fault parameters are chosen so the outcome does not depend on timing or machine load:
drop_every n=2 on a five-ping test drops at least two replies and collapses a single TCP
stream below the 60 % floor (n=10 did not, reliably: the namespaces' RTT is tiny); n=10
on the six streams breaks the handed-vs-decrypted tolerance (0.1 %) by two orders of
magnitude; n=50 (2 %) is what a conservation ledger must catch exactly. Names are those of
twin.faults.REGISTRY; a unit test checks every parameter against the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: the ledger table of plugin.lab.measure.Ledger.table() (its header line)
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

    ``expect`` is a regular expression the failure (or setup error) text must match: the
    invariant's words. ``ledger``: the text must also carry the ledger table (counter
    invariants). ``setup_error``: the fault breaks the tunnel fixture (bring-up), so pytest
    reports an error at setup rather than a failure.
    """

    fault: FaultSpec
    expect: str
    ledger: bool = False
    setup_error: bool = False
    why: str = ""


@dataclass(frozen=True)
class Row:
    """One acceptance test function, its representative node and the cells that break it."""

    function: str  # "test_file.py::test_name" (relative to tests_hil/)
    node: str  # parametrized node id "tests_hil/test_file.py::test_name[params]"
    cells: tuple[Cell, ...] = field(default_factory=tuple)
    note: str = ""

    @property
    def name(self) -> str:
        """The junit testcase name (function name with its parameters)."""
        return self.node.split("::", 1)[1]

    @property
    def case_id(self) -> str:
        """The tunnel case of the node, e.g. lab-v4in4-gcm (the first parameter)."""
        params = self.node.split("[", 1)[1].rstrip("]")
        for cid in ("lab-", "npu-", "many-"):
            if params.startswith(cid):
                # case ids are <tunnel>-v?in?-<cipher>[-cN]; further params follow with "-"
                parts = params.split("-")
                n = 4 if len(parts) > 3 and parts[3].startswith("c") and parts[3][1:].isdigit() else 3
                return "-".join(parts[:n])
        raise ValueError(f"{self.node}: no tunnel case in its parameters")


def _node(function: str, params: str) -> str:
    return f"tests_hil/{function}[{params}]"


ROWS: tuple[Row, ...] = (
    Row("test_bringup.py::test_all_children_established",
        _node("test_bringup.py::test_all_children_established", "lab-v4in4-gcm"),
        (Cell(fault("peer3300", "child_never_up", child="hil-lab-v4v4-gcm-net"),
              r"0 of 1 children established", setup_error=True,
              why="the responder never answers the child's request: the fixture's bring-up stops"),
         Cell(fault("peer3300", "peer_unreachable"),
              r"children established", setup_error=True,
              why="IKE gets no answer: initiate times out, the error names the child and outcome"))),
    Row("test_bringup.py::test_engine_holds_two_associations_per_child",
        _node("test_bringup.py::test_engine_holds_two_associations_per_child", "lab-v4in6-gcm"),
        (Cell(fault("dut3300", "decline_ipv6_sa"),
              r"the engine holds \d+ associations|sa_inet6 = \d+",
              why="outer IPv6 associations fall back to the kernel cipher: the engine holds none"),)),
    Row("test_conservation.py::test_appliance_sourced_conservation",
        _node("test_conservation.py::test_appliance_sourced_conservation", "lab-v4in4-gcm"),
        (Cell(fault("dut3300", "drop_every", n=50),
              r"invariant broken: the peer's ESP input equals the engine's encrypt count", ledger=True),
         Cell(fault("dut3300", "count_extra"),
              r"invariant broken: (every own packet took the interposition|the coprocessor encrypted"
              r"|the peer's ESP input equals)", ledger=True),
         Cell(fault("dut3300", "corrupt_icv", every=50),
              r"invariant broken: no authentication failure", ledger=True))),
    Row("test_conservation.py::test_inbound_decrypted_equals_delivered",
        _node("test_conservation.py::test_inbound_decrypted_equals_delivered", "lab-v4in4-gcm"),
        (Cell(fault("peer3300", "drop_every", n=50),
              r"invariant broken: every frame the peer sent reached the coprocessor", ledger=True),
         Cell(fault("peer3300", "corrupt_icv", every=50),
              r"invariant broken: (decrypted = delivered|nothing refused)", ledger=True),
         Cell(fault("peer3300", "replay", every=50),
              r"invariant broken: every frame the peer sent reached the coprocessor", ledger=True,
              why="duplicates reach the wire but the sender's ESP output counted each once"))),
    Row("test_conservation.py::test_both_doors_clean",
        _node("test_conservation.py::test_both_doors_clean", "npu-v4in4-gcm"),
        (Cell(fault("peer3300", "corrupt_icv", every=50),
              r"invariant broken: the 136's error counters", ledger=True),
         Cell(fault("xgs136", "drop_every", n=50),
              r"invariant broken: frames the 136 handed its engine vs frames the peer decrypted",
              ledger=True))),
    Row("test_sizes.py::test_own_largest_packet_passes_one_more_refused",
        _node("test_sizes.py::test_own_largest_packet_passes_one_more_refused", "lab-v6in4-gcm"),
        (Cell(fault("dut3300", "own_too_big_fragmented"),
              r"it must be refused|must be refused with EMSGSIZE|a refused packet never reaches the engine"),)),
    Row("test_sizes.py::test_forwarded_ipv6_packet_too_big",
        _node("test_sizes.py::test_forwarded_ipv6_packet_too_big", "lab-v6in4-gcm"),
        (Cell(fault("dut3300", "fragment_instead_of_ptb"),
              r"bisection: largest forwarded IPv6 ping data passing|no ICMPv6 Packet Too Big"),
         Cell(fault("dut3300", "wrong_ptb_mtu", delta=-8),
              r"the Packet Too Big carries MTU"))),
    Row("test_sizes.py::test_forwarded_ipv4_with_df_passes_while_dfbit_is_0",
        _node("test_sizes.py::test_forwarded_ipv4_with_df_passes_while_dfbit_is_0", "lab-v4in4-gcm"),
        (Cell(fault("dut3300", "ipv4_df_gate"),
              r"IPv4 packet with DF was not answered",
              why="fault added for this test: the engine gates IPv4 with DF although dfbit is 0"),)),
    Row("test_matrix.py::test_five_pings_answered",
        _node("test_matrix.py::test_five_pings_answered", "lab-v6in4-gcm"),
        (Cell(fault("dut3300", "wrong_next_header"), r"pings answered",
              why="the DUT's replies carry next header 4 for IPv6 inside: the peer cannot deliver them"),
         Cell(fault("dut3300", "drop_every", n=2), r"pings answered"))),
    Row("test_matrix.py::test_one_stream_each_way",
        _node("test_matrix.py::test_one_stream_each_way", "lab-v4in4-gcm-encrypting"),
        (Cell(fault("dut3300", "drop_every", n=2), r"invariant broken: one stream",
              why="half of the DUT's ESP frames lost: TCP collapses below the floor (measured: "
                  "with n=10 one stream between the appliances still held the floor -- the "
                  "namespace RTT is tiny, so TCP recovers fast)"),)),
    Row("test_rates.py::test_forwarded_rate",
        _node("test_rates.py::test_forwarded_rate", "lab-v4in4-gcm-1x10s-up"),
        (Cell(fault("dut3300", "drop_every", n=2), r"invariant broken: one stream up",
              why="n=10 broke it on a loaded machine but not on a quieter one (TCP recovered): "
                  "a fault must break its test every time"),)),
    Row("test_rates.py::test_first_stream_after_boot",
        _node("test_rates.py::test_first_stream_after_boot", "lab-v4in4-gcm"),
        (Cell(fault("dut3300", "slow_first_stream", mbit=20, seconds=15),
              r"invariant broken: first stream after boot",
              why="the XGS 3300 has no open issue 531, so the test is not xfail there: it must fail"),)),
    Row("test_six_children.py::test_six_streams_each_tunnel_carries",
        _node("test_six_children.py::test_six_streams_each_tunnel_carries", "many-v4in4-gcm-c6"),
        (Cell(fault("xgs136", "drop_every", n=10),
              r"invariant broken: (six streams together|frames the 136 handed)"),)),
    Row("test_wire.py::test_only_esp_of_formula_length_that_decrypts",
        _node("test_wire.py::test_only_esp_of_formula_length_that_decrypts", "lab-v4in4-gcm"),
        (Cell(fault("dut3300", "corrupt_icv", every=1),
              r"does not authenticate and decrypt|ping through the tunnel was not answered",
              why="every frame's ICV is wrong: the peer drops the pings (the test's first assertion); "
                  "no fault yet makes frames the peer accepts but scapy cannot decrypt"),)),
    Row("test_teardown.py::test_teardown_restores_everything",
        _node("test_teardown.py::test_teardown_restores_everything", "lab-v4in4-gcm"),
        (Cell(fault("dut3300", "leak_sa_on_delete"),
              r"associations of \S+ still installed|the engine still holds \d+ associations after teardown",
              why="fault added for this test: del_sa answers ok and keeps the association"),)),
)


#: Faults whose cells need a pytest run of their own (a fresh tunnel); every other cell
#: runs in one shared subprocess, faults switched per run (tests/teeth/stepper.py).
ALONE: dict[str, str] = {
    "child_never_up": "acts on bring-up: the tunnel must be built while it is on",
    "peer_unreachable": "acts on bring-up: the tunnel must be built while it is on",
    "decline_ipv6_sa": "the driver decides when an association is added: a fresh bring-up",
    "slow_first_stream": "its test reboots the appliance",
    "leak_sa_on_delete": "its test takes its tunnel down",
}


def rows() -> tuple[Row, ...]:
    return ROWS


def all_cells() -> list[tuple[Row, Cell]]:
    return [(r, c) for r in ROWS for c in r.cells]


@dataclass(frozen=True)
class Group:
    """Cells sharing one fault run in one pytest subprocess (one tunnel bring-up)."""

    fault: FaultSpec
    members: tuple[tuple[Row, Cell], ...]

    @property
    def nodes(self) -> list[str]:
        return [r.node for r, _ in self.members]


def groups() -> list[Group]:
    """The ALONE cells grouped by identical fault (host, name, params), in table order:
    one pytest run each."""
    order: dict[FaultSpec, list[tuple[Row, Cell]]] = {}
    for r, c in all_cells():
        if c.fault.name in ALONE:
            order.setdefault(c.fault, []).append((r, c))
    return [Group(f, tuple(m)) for f, m in order.items()]


def stepped() -> list[tuple[Row, Cell]]:
    """Every other cell: run in one shared pytest run, fault switched per node run."""
    return [(r, c) for r, c in all_cells() if c.fault.name not in ALONE]
