"""A real labgrid coordinator and exporter on localhost, per test (ports and state in a temp dir).

The exporter publishes NetworkService resources (127.0.0.1 addresses: the lease logic does
not need the appliances themselves); places are created through the coordinator's gRPC
calls that ``labgrid-client create / add-match / add-named-match / set-tags`` make (one
session instead of a client process per step: each ``labgrid-client`` start cost 0.65
CPU-s, 47 of them 30 CPU-s of the own tests, issue 39); a test that is about what an admin
does from the shell (``release --kick``) still runs ``labgrid-client``. No mock: every
claim talks gRPC to the real coordinator.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import json
import secrets

import pytest
import yaml

from ipsec_hil.lab.sharing.labgrid_session import LabgridLab

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
EXPORTER = "exp"
#: group -> (the appliance it stands for, its SSH port): two labs of two appliances each
GROUPS = {"lab1-dut": ("dut3300", 2201), "lab1-peer": ("peer3300", 2202),
          "lab2-dut": ("dut3300", 2211), "lab2-peer": ("peer3300", 2212)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, cond: Callable[[], object], timeout: float = 60, every: float = 0.2) -> object:
    """Poll ``cond`` until it is truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


@dataclass
class Coordinator:
    address: str
    state: Path
    procs: list[subprocess.Popen] = field(default_factory=list)
    wait_until = staticmethod(wait_until)

    def export(self, name: str, services: dict[str, dict], workdir: Path) -> None:
        """Start one more exporter (see :func:`start_exporter`)."""
        start_exporter(self, name, services, workdir)

    def client(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([str(BIN / "labgrid-client"), "-x", self.address, *args], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "LG_USERNAME": "admin"})
        if check and r.returncode != 0:
            raise AssertionError(f"labgrid-client {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def create_place(self, name: str, matches: dict[str, str | None], tags: dict[str, str] | None = None) -> None:
        """Place ``name`` with ``matches`` (pattern -> the name the match is renamed to, None
        for none) and ``tags``: the requests labgrid-client's create, add-match /
        add-named-match and set-tags send, in one session."""
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        with LabgridLab(self.address, user="admin") as lg:
            lg.rpc("AddPlace", pb.AddPlaceRequest(name=name), f"create place {name}")
            for pattern, rename in matches.items():
                req = (pb.AddPlaceMatchRequest(placename=name, pattern=pattern) if rename is None
                       else pb.AddPlaceMatchRequest(placename=name, pattern=pattern, rename=rename))
                lg.rpc("AddPlaceMatch", req, f"place {name}: match {pattern}")
            if tags:
                lg.rpc("SetPlaceTags", pb.SetPlaceTagsRequest(placename=name, tags=tags), f"place {name}: tags")
            lg.sync()

    def place(self, name: str, lab: str, **tags: str) -> None:
        """A place holding both appliances of exporter groups ``lab``-dut and ``lab``-peer,
        each match renamed to the appliance's topology name."""
        self.create_place(name, {f"{EXPORTER}/{group}/NetworkService": appliance
                                 for group, (appliance, _) in GROUPS.items() if group.startswith(f"{lab}-")}, tags)


def start_exporter(c: Coordinator, name: str, services: dict[str, dict], workdir: Path) -> None:
    """An exporter ``name`` publishing one NetworkService per group; waits until the
    coordinator shows all of them."""
    (workdir / f"{name}.yaml").write_text(yaml.safe_dump({g: {"NetworkService": svc} for g, svc in services.items()}))
    c.procs.append(_start([str(BIN / "labgrid-exporter"), "-c", c.address, "-n", name, "--hostname", "127.0.0.1",
                           str(workdir / f"{name}.yaml")], workdir, workdir / f"{name}.log"))
    with LabgridLab(c.address) as lg:
        wait_until(f"exporter {name}'s resources",
                   lambda: (lg.sync(), len(lg.session.resources.get(name, {})))[1] == len(services))


def _start(cmd: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=cwd, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=15)


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    state = tmp_path / "coordinator"
    state.mkdir()
    port = _free_port()
    c = Coordinator(f"127.0.0.1:{port}", state)
    c.procs.append(_start([str(BIN / "labgrid-coordinator"), "-l", c.address], state, tmp_path / "coordinator.log"))
    try:
        wait_until("the coordinator to listen", lambda: _listening(port))
        start_exporter(c, EXPORTER, {group: {"address": "127.0.0.1", "username": "root", "port": ssh_port}
                                     for group, (_, ssh_port) in GROUPS.items()}, tmp_path)
        yield c
    finally:
        for p in reversed(c.procs):
            _stop(p)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _twin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ipsec_hil_twin", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def _virtual_lab() -> Iterator[Path]:
    """A virtual lab of topologies/virtual.yaml; yields its resolved lab file."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the virtual lab: network namespaces)")
    prefix = "tw" + secrets.token_hex(2)
    # the default run dir (/run/ipsec-twin/PREFIX): a unix socket's path must stay under 108
    # bytes, which a pytest basetemp does not promise
    up = _twin("up", str(REPO / "topologies/virtual.yaml"), "--prefix", prefix, "--owner-pid", str(os.getpid()))
    try:
        assert up.returncode == 0, up.stderr[-800:]
        yield Path(json.loads(up.stdout.strip().splitlines()[-1])["resolved"])
    finally:
        down = _twin("down", "--prefix", prefix)
        left = [ns for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if ns.startswith(prefix)]
        assert down.returncode == 0 and not left, f"twin down: {down.stderr[-300:]}; namespaces left: {left}"


@pytest.fixture
def virtual_lab():
    """A virtual lab for one test (its resolved lab file)."""
    yield from _virtual_lab()


@pytest.fixture(scope="module")
def module_virtual_lab():
    """A virtual lab shared by a module's tests (its resolved lab file)."""
    yield from _virtual_lab()
