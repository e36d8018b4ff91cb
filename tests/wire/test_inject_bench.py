"""`inject: {via: bench, port: P}` exercised on the twin: the wire tests' crafted ESP leaves
from a bench port on the outer path, not from the peer (issue 42, "Injection from the bench").

Why a lab of its own: the default virtual lab's bench has adapters on the LAN sides only
(every tunnel injects ``via: peer``), so the bench path of ipsec_hil.lab.inject
(TunnelWire.of: the bench host sends, the outer source is the bench port's own address,
the appliance under test finds the association by destination and SPI alone, RFC 4301
4.4.2) was validated by the topology loader and never ran. Here the lab file is
topologies/virtual.yaml reduced to the XGS 3300 pair and its ``lab`` tunnel, plus what a
real lab's bench has for it (topologies/README.md): an adapter ``o_tap`` on the 10G path,
with an address of the outer subnet, which answers for nothing and is linked to a port
of the DUT (a tap on the segment: the DUT's kernel answers ARP for its outer address on
any port, as a switch port on the segment would reach it).

The acceptance suite's own replay-window test then runs as a user runs it on that lab:
it must pass (every frame delivered as RFC 4303 says), and its frames must have left from
the bench (the tap's counters moved, the peer's outer port sent no ESP of the injection).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.lab_factory import VIRTUAL_TOPOLOGY, start_lab, subprocess_env, suite_run

pytestmark = [pytest.mark.needs_root]

NODE = "tests_hil/test_replay.py::test_replay_window[lab-v4in4-cbc]"
FRAMES = 14
"""What the node injects: the 13 frames of its RFC 4303 table (tests_hil/test_replay.py
rfc4303_sequence) and the END frame that stops the receiver."""
TAP = {"ipv4": "192.0.2.10/26", "ipv6": "2001:db8:1::10/64"}  # on the 10G path's subnets (virtual.yaml)
DUT_TAP = {"ipv4": "192.0.2.20/26", "ipv6": "2001:db8:1::20/64"}  # the DUT's port facing the tap


def bench_topology(dest: Path) -> Path:
    """virtual.yaml with the XGS 3300 pair only, their ``lab`` tunnel injecting from the
    bench's ``o_tap`` (written to ``dest``)."""
    data = yaml.safe_load(VIRTUAL_TOPOLOGY.read_text())
    keep = {"dut3300", "peer3300", "bench"}
    data["hosts"] = {k: v for k, v in data["hosts"].items() if k in keep}
    bench = data["hosts"]["bench"]
    bench["ports"] = {k: v for k, v in bench["ports"].items() if k in ("a_lan", "b_lan")}
    bench["ports"]["o_tap"] = {**TAP, "mtu": 1500, "rate_mbit": 100}
    data["hosts"]["dut3300"]["ports"]["tap"] = {**DUT_TAP, "mtu": 1500, "rate_mbit": 100}
    data["links"] = [ln for ln in data["links"]
                     if all(ln[e].split(".")[0] in keep for e in ("a", "b"))
                     and not any(ln[e].split(".")[1] in ("c_f1",) for e in ("a", "b"))]
    data["links"].append({"a": "dut3300.tap", "b": "bench.o_tap", "rate_mbit": 100})
    lab = data["tunnels"]["lab"]
    lab["inject"] = {"via": "bench", "port": "o_tap"}
    data["tunnels"] = {"lab": lab}
    dest.write_text("# topologies/virtual.yaml: the XGS 3300 pair, its lab tunnel injecting from the bench "
                    "(tests/wire/test_inject_bench.py)\n" + yaml.safe_dump(data, sort_keys=False))
    return dest


def test_bench_topology_parses_with_bench_injection(tmp_path):
    """The derived lab file is one the suite's loader accepts, the injection from the bench."""
    from ipsec_hil.lab.expectations.hardware import REGISTRY
    from ipsec_hil.lab.topology import load_topology

    topo = load_topology(bench_topology(tmp_path / "bench.yaml"), models=REGISTRY)
    inj = topo.tunnels["lab"].inject
    assert (inj.via, inj.port, inj.toward) == ("bench", "o_tap", "local")


@pytest.fixture(scope="module")
def bench_lab(tmp_path_factory):
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root (the virtual lab: network namespaces, TUN)")
    topo = bench_topology(tmp_path_factory.mktemp("bench-topo") / "bench.yaml")
    lab = start_lab(tmp_path_factory, topology=topo)
    try:
        yield lab
    finally:
        lab.close()


def _counters(lab, host: str, ifname: str) -> dict[str, int]:
    """rx/tx packets of one interface of a lab namespace (Linux's own counters)."""
    import subprocess

    ns = lab.namespaces[host]
    out = subprocess.run(["ip", "netns", "exec", ns, "ip", "-j", "-s", "link", "show", ifname],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    stats = json.loads(out)[0]["stats64"]
    return {"rx": int(stats["rx"]["packets"]), "tx": int(stats["tx"]["packets"])}


def test_replay_window_from_the_bench(bench_lab, tmp_path):
    """The suite's replay-window test passes with its frames sent from the bench's tap, and
    fails with replay_window_off_by_one on the DUT (the deliveries it judges are counted on
    the bench): both runs in ONE pytest process, the fault switched on around the second
    (tests/teeth/stepper.py, as the fault matrix runs its cells). The tap sent the frames
    (its tx counter grew by at least both batches), the DUT's tap port received them."""
    name = NODE.split("::", 1)[1]
    results = tmp_path / "results.json"
    plan = tmp_path / "plan.json"
    fault = {"host": "dut3300", "name": "replay_window_off_by_one", "params": {}}
    plan.write_text(json.dumps({"run_dir": str(bench_lab.run_dir), "results": str(results), "steps": {name: [
        {"fault": None, "fresh": False, "tag": "healthy"}, {"fault": fault, "fresh": False, "tag": "fault"}]}}))
    tap0 = _counters(bench_lab, "bench", "o_tap")
    dut0 = _counters(bench_lab, "dut3300", "tap")
    try:
        proc = suite_run([NODE, "-q", "-p", "no:randomly", "-p", "tests.teeth.stepper"], tmp_path / "run",
                         lab=bench_lab, timeout=600, env=subprocess_env(TEETH_PLAN=str(plan)))
    finally:
        bench_lab.attach().clear_faults()  # a run that died mid-step leaves nothing switched on
    out = (proc.stdout + proc.stderr)[-4000:]
    runs = {r["tag"]: r for r in json.loads(results.read_text())} if results.exists() else {}
    assert set(runs) == {"healthy", "fault"}, f"{NODE}: no result of both runs (exit {proc.returncode}):\n{out}"
    assert runs["healthy"]["outcome"] == "passed", (
        f"{NODE} on the lab injecting from the bench: {runs['healthy']['outcome']}: {runs['healthy']['message'][:3000]}")
    bad = runs["fault"]
    assert bad["outcome"] == "failed" and bad["assertion"] and re.search(
        r"\(edge \+ offset, delivered, RFC 4303 says\) differ", bad["message"]), (
        f"{NODE} with replay_window_off_by_one on dut3300, frames from the bench: expected its window "
        f"assertion to fail, got {bad['outcome']} ({bad['phase']}): {bad['message'][:2000]}")
    tap1 = _counters(bench_lab, "bench", "o_tap")
    dut1 = _counters(bench_lab, "dut3300", "tap")
    sent, got = tap1["tx"] - tap0["tx"], dut1["rx"] - dut0["rx"]
    # every frame of both batches crossed the tap (plus an ARP exchange at most)
    assert sent >= 2 * FRAMES and got >= 2 * FRAMES, (
        f"the 2 x {FRAMES} frames did not leave from the bench's tap: o_tap sent {sent} packets, "
        f"the DUT's tap received {got}")
