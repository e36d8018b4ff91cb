"""`tunnels.<t>.inject`: where the suite puts crafted ESP on the wire (issue 12)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ipsec_hil.lab.topology import TopologyError, parse_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY

VIRTUAL = (Path(__file__).resolve().parents[2] / "topologies" / "virtual.yaml").read_text()
LINE = "    inject: {via: peer}            # issue 12: the peer's python3 sends crafted ESP\n"


def with_inject(line: str) -> str:
    """virtual.yaml with the lab tunnel's inject: replaced by `line`."""
    assert LINE in VIRTUAL
    return VIRTUAL.replace(LINE, f"    inject: {line}\n", 1)


def line_of(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def test_absent_by_default_and_peer_parsed():
    assert parse_topology(VIRTUAL.replace(LINE, ""), models=REGISTRY).tunnels["lab"].inject is None
    assert parse_topology(VIRTUAL, models=REGISTRY).tunnels["npu"].inject.via == "peer"
    inj = parse_topology(with_inject("{via: peer}"), models=REGISTRY).tunnels["lab"].inject
    assert (inj.via, inj.toward, inj.port) == ("peer", "local", None)


def test_bench_port_must_exist_with_the_outer_families():
    text = with_inject("{via: bench, port: a_lan}")
    topo = parse_topology(text, models=REGISTRY)  # a_lan has both families: accepted
    assert topo.tunnels["lab"].inject.port == "a_lan"
    bad = with_inject("{via: bench, port: nope}")
    with pytest.raises(TopologyError) as ei:
        parse_topology(bad, "lab.yaml", models=REGISTRY)
    assert f"lab.yaml:{line_of(bad, 'inject:')}" in str(ei.value) and "'nope'" in str(ei.value)


@pytest.mark.parametrize("value,message", [
    ("{via: bench}", "expected port"),
    ("{via: peer, port: a_lan}", "expected no port with via: peer"),
    ("{via: wire}", "via"),
    ("{via: peer, toward: middle}", "toward"),
])
def test_bad_inject_names_file_and_line(value, message):
    text = with_inject(value)
    with pytest.raises(TopologyError) as ei:
        parse_topology(text, "lab.yaml", models=REGISTRY)
    assert f"lab.yaml:{line_of(text, 'inject:')}" in str(ei.value) and message in str(ei.value)
