"""labgrid under ``-n 2`` (issue 40): a real coordinator, two places, the acceptance suite
with two xdist workers, each worker holding a place of its own (``place: vlab-{worker}``);
and the exit paths that must give the places back -- a failed test, and an appliance whose
SSH cannot be reached.

One virtual lab for the module; each place publishes its appliances (the same lab's, under
exporter groups of its own: labgrid gives a resource to one acquired place at a time), so
both workers' tests run on the one lab, in turn under the appliances' leases. While the run
goes, the coordinator is read every 0.2 s: who holds which place.

Three acceptance runs under ``-n 2`` (1.5-3 min each on a busy 2-core machine): not in the
own tests' budget, so in the safety stage (marker ``safety_exhaustive``, tools/run-safety).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from ipsec_hil.lab.sharing.labgrid_session import LabgridLab
from tests.lab_factory import suite_run

pytestmark = pytest.mark.safety_exhaustive

REPO = Path(__file__).resolve().parents[2]
WORKERS = ("gw0", "gw1")
#: two cheap acceptance tests of the xgs136 (a bring-up each): one per worker
SELECT = ["-m", "xgs136", "-k", "test_bringup and npu-v4in4-gcm"]


def _two_places(coordinator, resolved: Path, tmp_path: Path, *, dead_port_for: str | None = None) -> Path:
    """A lab file naming ``vlab-{worker}`` on the coordinator, and the places vlab-gw0 and
    vlab-gw1, each with the lab's appliances (named matches). ``dead_port_for``: that
    appliance's service points at a port where nothing listens (its SSH unreachable)."""
    data = yaml.safe_load(resolved.read_text())
    appliances = [n for n, h in data["hosts"].items() if h["role"] == "appliance"]
    groups = {}
    for w in WORKERS:
        for n in appliances:
            m = data["hosts"][n]["mgmt"]
            port = m["port"]
            if n == dead_port_for:
                port = _closed_port()
            groups[f"{w}-{n}"] = {"address": m["address"], "port": port, "username": m.get("user", "root")}
    exporter = f"x{time.monotonic_ns() % 10**8}"
    coordinator.export(exporter, groups, tmp_path)
    for w in WORKERS:
        coordinator.create_place(f"vlab-{w}", {f"{exporter}/{w}-{n}/NetworkService": n for n in appliances})
    data["lab"]["labgrid"] = {"coordinator": coordinator.address, "place": "vlab-{worker}"}
    for n in appliances:
        for key in ("address", "port", "user"):
            data["hosts"][n]["mgmt"].pop(key, None)
    # beside the resolved file: its relative paths (known_hosts, keys) stay right
    shared = resolved.with_name(f"shared-{exporter}.yaml")
    shared.write_text(yaml.safe_dump(data))
    return shared


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


class Holders:
    """Who holds vlab-gw0/vlab-gw1, read every 0.2 s while a run goes."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.seen: dict[str, set[str]] = {f"vlab-{w}": set() for w in WORKERS}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        with LabgridLab(self.address) as lg:
            while not self._stop.is_set():
                for name, p in lg.places().items():
                    if name in self.seen and p.acquired:
                        self.seen[name].add(p.acquired)
                self._stop.wait(0.2)

    def __enter__(self) -> "Holders":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _free_after(coordinator) -> dict[str, str | None]:
    """Each place's holder now (None: free) and no reservation left."""
    with LabgridLab(coordinator.address) as lg:
        places = {n: p.acquired for n, p in lg.places().items() if n.startswith("vlab-")}
        assert lg.reservations() == [], f"reservations left: {lg.reservations()}"
    return places


def _run(shared: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return suite_run([*SELECT, "-n", "2", f"--topology={shared}", "-q", "-p", "no:randomly", *extra],
                     tmp_path / "checkout", timeout=400)


def test_two_workers_each_hold_their_own_place(coordinator, module_virtual_lab, tmp_path):
    shared = _two_places(coordinator, module_virtual_lab, tmp_path)
    with Holders(coordinator.address) as held:
        run = _run(shared, tmp_path)
    out = run.stdout[-2500:] + run.stderr[-1500:]
    assert run.returncode == 0, out
    assert "2 passed" in run.stdout, out
    for w in WORKERS:
        names = held.seen[f"vlab-{w}"]
        assert names, f"place vlab-{w} was never seen held during the run; seen {held.seen}"
        assert all(f".{w}." in n for n in names), f"vlab-{w} held by {names}, not by worker {w}"
    assert _free_after(coordinator) == {"vlab-gw0": None, "vlab-gw1": None}


def test_a_failed_test_releases_both_places(coordinator, module_virtual_lab, tmp_path):
    """A run whose tests fail (the twin's spd_policy_missing on the XGS 136: its bring-up
    finds the out policy missing) exits 1 and gives both places back."""
    shared = _two_places(coordinator, module_virtual_lab, tmp_path)
    prefix = module_virtual_lab.parent.name
    on = subprocess.run([sys.executable, "-m", "ipsec_hil_twin", "fault", "--prefix", prefix, "xgs136",
                         "spd_policy_missing"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert on.returncode == 0, on.stderr[-500:]
    try:
        with Holders(coordinator.address) as held:
            run = _run(shared, tmp_path)
    finally:
        subprocess.run([sys.executable, "-m", "ipsec_hil_twin", "fault", "--prefix", prefix, "--off", "xgs136",
                        "spd_policy_missing"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    out = run.stdout[-2500:] + run.stderr[-1500:]
    assert run.returncode == 1, out
    assert all(held.seen.values()), f"a place was never held: {held.seen}"
    assert _free_after(coordinator) == {"vlab-gw0": None, "vlab-gw1": None}


def test_an_unreachable_appliance_ssh_releases_both_places(coordinator, module_virtual_lab, tmp_path):
    """The places' service for the xgs136 names a port where nothing listens: the run's SSH
    to it fails (its own exit code, not a pass) and both places are free afterwards."""
    shared = _two_places(coordinator, module_virtual_lab, tmp_path, dead_port_for="xgs136")
    with Holders(coordinator.address) as held:
        run = _run(shared, tmp_path)
    out = run.stdout[-2500:] + run.stderr[-1500:]
    assert run.returncode not in (0, 5), out
    assert all(held.seen.values()), f"a place was never held: {held.seen}"
    assert _free_after(coordinator) == {"vlab-gw0": None, "vlab-gw1": None}
    print(f"\nunreachable SSH: exit {run.returncode}; {run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ''}")
