"""The virtual lab's appliances published by a real labgrid exporter: a run holds the place,
reaches each appliance over SSH at the address the place gives, and takes the appliance's
lease through that connection (both layers together)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ipsec_hil.lab.sharing.labgrid_claim import PlaceClaim, apply_services
from ipsec_hil.lab.sharing.lock import ApplianceLock
from ipsec_hil.lab.remote.factory import host_from_mgmt
from ipsec_hil.lab.topology import load_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY
from tests.lab_factory import suite_run

REPO = Path(__file__).resolve().parents[2]


def _shared_lab_file(coordinator, virtual_lab: Path, tmp_path: Path) -> tuple[Path, dict, list[str]]:
    """The file a shared lab would have: the place instead of the appliances' addresses
    (written beside the resolved file: same relative paths); the place's services."""
    data = yaml.safe_load(virtual_lab.read_text())
    appliances = [n for n, h in data["hosts"].items() if h["role"] == "appliance"]
    services = {n: {"address": data["hosts"][n]["mgmt"]["address"], "port": data["hosts"][n]["mgmt"]["port"],
                    "username": data["hosts"][n]["mgmt"].get("user", "root")} for n in appliances}
    coordinator.export("vlab", services, tmp_path)
    coordinator.create_place("vlab", {"vlab/*/NetworkService": None})
    data["lab"]["labgrid"] = {"coordinator": coordinator.address, "place": "vlab"}
    for n in appliances:
        for key in ("address", "port", "user"):
            data["hosts"][n]["mgmt"].pop(key, None)
    shared = virtual_lab.with_name("shared.yaml")
    shared.write_text(yaml.safe_dump(data))
    return shared, services, appliances


def test_virtual_lab_appliances_through_a_place(coordinator, virtual_lab, tmp_path):
    shared, services, appliances = _shared_lab_file(coordinator, virtual_lab, tmp_path)
    topo = load_topology(shared, models=REGISTRY)
    assert all(topo.hosts[n].mgmt.address is None for n in appliances)
    with PlaceClaim(topo.lab.labgrid, holder="vlab test", run_id="r-vlab") as claim:
        resolved = apply_services(topo, claim.access_for(topo))
        for n in appliances:
            host = host_from_mgmt(n, resolved.hosts[n].mgmt, resolved.lab.known_hosts)
            try:
                with ApplianceLock(host, "vlab test", run_id="r-vlab", path="/var/db/ipsec-hil/run.lock") as lock:
                    assert lock.status().holder.holder == "vlab test" and not lock.status().expired
                assert lock.status().holder is None  # released: nothing left on the appliance
            finally:
                host.close()
            assert (services[n]["address"], services[n]["port"]) == (resolved.hosts[n].mgmt.address,
                                                                    resolved.hosts[n].mgmt.port)
        claim.check()


def test_the_acceptance_suite_runs_through_the_place(coordinator, virtual_lab, tmp_path):
    """ipsec_hil.places: the run claims the place before touching an appliance, tests reach the
    appliances at the place's addresses, and the place is free again when the run ends."""
    shared, _, _ = _shared_lab_file(coordinator, virtual_lab, tmp_path)
    run = suite_run(["-m", "xgs136", "-k", "test_bringup and npu-v4in4-gcm", f"--topology={shared}", "-q"],
                    tmp_path / "checkout")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "2 passed" in run.stdout, run.stdout[-1000:]
    topo = load_topology(shared, models=REGISTRY)
    with PlaceClaim(topo.lab.labgrid, holder="after the run", run_id="r-after", wait=10) as claim:
        assert claim.place == "vlab"  # released by the run: ours at once
