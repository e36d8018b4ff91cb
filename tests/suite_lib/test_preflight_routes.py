"""preflight.check_routes asks each (appliance, address) once and still judges every tunnel
(issue 15: the virtual lab's 13 tunnels cost 26 ``route -n get`` round trips per run, 4 distinct)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ipsec_hil.lab import preflight
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.topology import load_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "virtual.yaml"


class _Host:
    def __init__(self, fail: set[str] = frozenset(), unreachable: bool = False) -> None:
        self.calls: list[str] = []
        self.fail, self.unreachable = fail, unreachable

    def run(self, script: str, timeout: float | None = None):
        self.calls.append(script)
        if self.unreachable:
            raise LabError("ssh: connection refused")
        bad = any(script.endswith(" " + a) for a in self.fail)
        return SimpleNamespace(status=1 if bad else 0, stdout="" if bad else "   route to: x",
                               stderr="route: route has not been found" if bad else "")


def _apps(topo, **hosts):
    return {n: SimpleNamespace(host=hosts.get(n) or _Host()) for n, h in topo.hosts.items() if h.role == "appliance"}


def test_each_address_is_asked_once_and_every_tunnel_gets_its_finding():
    topo = load_topology(TOPOLOGY, models=REGISTRY)
    apps = _apps(topo)
    findings = preflight.check_routes(apps, topo)
    asked = [(n, c) for n, a in apps.items() for c in a.host.calls]
    assert len(asked) == len(set(asked)), asked
    assert len(findings) > len(asked) >= 2, (len(findings), asked)  # more tunnels than distinct routes
    assert all(f.ok for f in findings)
    assert {f.check for f in findings if f.host == "dut3300"} >= {"route to 192.0.2.2 (tunnel lab)"}


def test_a_missing_route_fails_every_tunnel_that_needs_it_with_the_fix():
    topo = load_topology(TOPOLOGY, models=REGISTRY)
    dut = _Host(fail={"192.0.2.2"})
    findings = preflight.check_routes(_apps(topo, dut3300=dut), topo)
    failed = [f for f in findings if not f.ok]
    assert failed and all(f.host == "dut3300" and "192.0.2.2" in f.check for f in failed), failed
    assert all("route has not been found" in f.detail and "route add 192.0.2.2" in f.fix for f in failed)
    assert dut.calls.count("route -n get 192.0.2.2") == 1


def test_an_unreachable_appliance_fails_its_routes_once_asked():
    topo = load_topology(TOPOLOGY, models=REGISTRY)
    dut = _Host(unreachable=True)
    findings = [f for f in preflight.check_routes(_apps(topo, dut3300=dut), topo) if f.host == "dut3300"]
    assert findings and not any(f.ok for f in findings)
    assert all("connection refused" in f.detail and "reachable first" in f.fix for f in findings)
    assert len(dut.calls) == len(set(dut.calls))
