"""The run's objects work from a Python prompt: no pytest, no plugin, no lab started.

Lab.connect, tunnel_cases and ActiveTunnel are what the fixtures hand out; here they are
built by hand from a lab file, and a tunnel answers what the tests ask of it
(path MTU, ciphers, floor, counter references, addresses) without reaching through the
plan or the topology.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.plugin.labfiles import lab_file

from ipsec_hil.lab.expectations import expect
from ipsec_hil.lab.cases import appliance_groups, case_marker_names, tunnel_cases
from ipsec_hil.lab.live_lab import Lab
from ipsec_hil.lab.provision import TunnelPlan
from ipsec_hil.lab.topology import load_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY
from ipsec_hil.lab.tunnel import ActiveTunnel

REPO = Path(__file__).resolve().parents[2]

LAB = lab_file("prompt", virtual=False, wan=({"mtu": 1400, "rate_mbit": 1000}, {"mtu": 1400, "rate_mbit": 1000}), lan_ipv6=True,
               tunnel={"inner": ["ipv4", "ipv6"], "remote_cipher": "kernel"})


def _tunnel(tmp_path: Path) -> ActiveTunnel:
    (tmp_path / "lab.yaml").write_text(LAB)
    topo = load_topology(tmp_path / "lab.yaml", models=REGISTRY)
    lab = Lab.connect(topo)
    case = tunnel_cases(topo, inner="ipv4")[0]
    plan = TunnelPlan.from_topology(topo, case.tunnel)
    return ActiveTunnel(case, plan, None, lab.appliances["gw1"], lab.appliances["gw2"], lab)


def test_a_tunnel_answers_what_tests_ask(tmp_path):
    t = _tunnel(tmp_path)
    assert t.name == "t" and t.path_mtu == 1400 == t.topology.path_mtu("t")
    assert (t.local_cipher, t.remote_cipher) == ("offload", "kernel")
    assert t.offloaded("local") and not t.offloaded("remote")
    assert t.encrypted_refs("local") == ["gw1:tx_encrypt"]
    assert t.decrypted_refs("remote") == ["gw2:esp.received-packets"]
    assert t.floor(via_bench=False).mbit == expect.throughput_floor(t.topology, "t", t.config, via_bench=False).mbit
    assert t.tolerance("congested") == 0.001
    assert (t.inner_address("local"), t.inner_prefix("remote")) == ("198.51.100.1", "198.51.100.65/32")
    assert t.outer_address("remote") == "192.0.2.2" and t.lan_net("local") == "198.51.100.0/26"
    assert t.bench_inner_address("local") == "198.51.100.10" and t.bench is t.lab.bench
    assert t.known_issue("first_stream_after_boot") is None  # the local end is the 3300


def test_cases_groups_and_markers(tmp_path):
    (tmp_path / "lab.yaml").write_text(LAB)
    topo = load_topology(tmp_path / "lab.yaml", models=REGISTRY)
    assert [c.id for c in tunnel_cases(topo)] == ["t-v4in4-gcm", "t-v6in4-gcm"]
    assert appliance_groups(topo) == {"t": "gw1+gw2"}
    assert case_marker_names(tunnel_cases(topo, inner="ipv6")[0]) == ["xgs3300", "inner_v6", "gcm"]


def test_wire_sequence_tunnels_meet_only_the_tests_that_ask():
    """A tunnel with ESN or another replay window is not a plain tunnel: the steady tests
    (no criterion) never meet it, the wire tests ask (esn=True, replay_window=ANY)."""
    from ipsec_hil.lab.cases import ANY
    topo = load_topology(REPO / "topologies" / "virtual.yaml", models=REGISTRY)
    plain = {c.tunnel for c in tunnel_cases(topo)}
    assert plain.isdisjoint({"esn136", "esn3300", "win64x136", "win64x3300"}), plain
    assert {c.tunnel for c in tunnel_cases(topo, esn=True, replay_window=ANY)} == {"esn136", "esn3300"}
    windows = {c.tunnel for c in tunnel_cases(topo, children="one", replay_window=ANY)}
    assert {"win64x136", "win64x3300", "lab", "npu"} <= windows and not windows & {"esn136", "esn3300"}
    assert {c.tunnel for c in tunnel_cases(topo, replay_window=64)} == {"win64x136", "win64x3300"}


def test_the_library_does_not_import_pytest():
    code = ("import sys, ipsec_hil.lab.tunnel, ipsec_hil.lab.cases, ipsec_hil.lab.live_lab, ipsec_hil.lab.expectations.profiles_file; "
            "print('pytest' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
