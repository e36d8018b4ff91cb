"""What the safety modules' lab starts with, and the state the integrity tests compare.

The lab itself is the project's one per-module lab (tests/lab_factory.py, fixture
``vlab`` in conftest.py). Before the first test the appliances are given an
operator's configuration -- an OPNsense-style swanctl.conf WITHOUT the include line on the
DUT (so the suite must change and restore it) and one WITH it on the peer plus an unrelated
conf.d file and a stale ``hil-lab.conf`` (so an existing file is overwritten and restored).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lab_factory import TestLab
from safety._inject import TEST_COMMAND

PY = sys.executable

DUT_SWANCTL = (b"# Automatically generated, do not edit (seeded by tests/safety)\n"
               b"connections {\n}\n\nsecrets {\n}\n")
PEER_SWANCTL = DUT_SWANCTL + b"include conf.d/*.conf\n"
PEER_OTHER = b"# an operator's own file, never touched by the suite\n"
PEER_STALE = b"# a stale hil-lab.conf an operator left; the suite must put it back\n"


def seed(lab: TestLab) -> None:
    etc = "usr/local/etc/swanctl"
    for host, files in {
        "dut3300": {f"{etc}/swanctl.conf": DUT_SWANCTL},
        "peer3300": {f"{etc}/swanctl.conf": PEER_SWANCTL, f"{etc}/conf.d/opnsense-other.conf": PEER_OTHER,
                     f"{etc}/conf.d/hil-lab.conf": PEER_STALE},
    }.items():
        for rel, data in files.items():
            p = lab.root(host) / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            os.chmod(p, 0o600)


# ------------------------------------------------------------------ the compared state


def file_hashes(lab: TestLab, host: str) -> dict[str, str]:
    """sha256 of every file under the appliance's swanctl directory (mode included)."""
    base = lab.root(host) / "usr/local/etc"
    out = {}
    for p in sorted(base.rglob("*")):
        if p.is_file() or p.is_symlink():
            out[str(p.relative_to(lab.root(host)))] = (hashlib.sha256(p.read_bytes()).hexdigest(),
                                                       oct(p.stat().st_mode & 0o7777))
    return out


def journal_files(lab: TestLab, host: str) -> list[str]:
    d = lab.root(host) / "var/db/ipsec-hil"
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) if d.exists() else []


def net_state(lab: TestLab, host: str) -> dict[str, str]:
    ns = lab.namespaces[host]
    out = {}
    for what, cmd in {"routes4": ["-4", "route", "show", "table", "main"],
                      "routes6": ["-6", "route", "show", "table", "main"],
                      "addrs": ["-br", "addr", "show"]}.items():
        r = subprocess.run(["ip", "-n", ns, *cmd], capture_output=True, text=True, timeout=10)
        out[what] = "\n".join(sorted(line for line in r.stdout.splitlines() if "cache" not in line))
    return out


def ifdisabled(app, port: str) -> bool:
    return bool(getattr(app.interface(port), "ifdisabled", False))


#: the far end's inner addresses each end routes to (topologies/virtual.yaml, lab tunnel)
PEER_INNER = {"dut3300": ("198.51.100.65", "fd00:b::1"), "peer3300": ("198.51.100.1", "fd00:a::1")}


def suite_routes(app, dsts) -> dict[str, object]:
    """The appliance's own answer (``route get``): also routes its ESP engine holds, which
    the namespace's kernel table does not show."""
    out = {}
    for d in dsts:
        r = app.route_get(d)
        out[d] = None if r is None else (r.interface, r.gateway, r.destination, r.mask)
    return out


def loaded_conns(app) -> str:
    """``swanctl --list-conns`` as the appliance prints it: the connections charon holds."""
    r = app.host.run("swanctl --list-conns")
    r.check("swanctl --list-conns")
    return r.stdout


def snapshot(lab: TestLab, apps: dict) -> dict:
    """Everything a run may change on the two ends of the lab tunnel."""
    snap = {}
    for h in ("dut3300", "peer3300"):
        snap[h] = {"files": file_hashes(lab, h), "net": net_state(lab, h),
                   "route_get": suite_routes(apps[h], PEER_INNER[h]),
                   "ifdisabled": ifdisabled(apps[h], "wan10g"), "conns": loaded_conns(apps[h])}
    return snap


def restored_differences(lab: TestLab, apps: dict, before: dict, *, check_sas: bool = True) -> list[str]:
    """What differs on either end from ``before`` (a :func:`snapshot`): files (sha256 and
    mode), routes and addresses, ``route get`` answers, the port's ifdisabled flag, loaded
    connections, a journal or lock left, SAs left. Empty when both ends are as they were."""
    after = snapshot(lab, apps)
    out = []
    for h in ("dut3300", "peer3300"):
        for what, label in (("files", "files"), ("net", "routes/addresses"), ("route_get", "route get answers"),
                            ("ifdisabled", "wan10g ifdisabled flag"), ("conns", "loaded connections")):
            if after[h][what] != before[h][what]:
                out.append(f"{h}: {label} differ after the run")
        if journal_files(lab, h):
            out.append(f"{h}: journal or lock left: {journal_files(lab, h)}")
        if check_sas and apps[h].list_sas().ike_sas != ():
            out.append(f"{h}: SAs left")
    return out


def assert_restored(lab: TestLab, apps: dict, before: dict, *, check_sas: bool = True) -> None:
    diffs = restored_differences(lab, apps, before, check_sas=check_sas)
    assert not diffs, "; ".join(diffs)


def provision_and_test(apps: dict, plan: Any, config: Any, psk: str, run_id: str, log: list[str]) -> None:
    """Bring the tunnel up, run the test body (_inject.TEST_COMMAND), tear it down; the
    provisioner's log lines are appended to ``log`` whatever is raised."""
    from ipsec_hil.lab.provision import TunnelProvisioner

    prov = None
    try:
        prov = TunnelProvisioner(apps, plan, config, psk, run_id=run_id, initiate_timeout=10)
        prov.up()
        try:
            apps[plan.local.host].host.run(TEST_COMMAND).check("test body")
        finally:
            prov.down()
    finally:
        if prov is not None:
            log.extend(prov.log)


def terminate_and_reload(apps: dict, plan: Any, config: Any) -> None:
    """What an operator does after a killed run: SAs it established stay until their peers
    expire them (recovery restores files and routes), so terminate them and reload."""
    from ipsec_hil.lab.provision.plan import conn_name

    for app in apps.values():
        app.swanctl_terminate(ike=conn_name(plan, config), timeout=5)
        app.swanctl_load()


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float) -> tuple[str, list[str]]:
    """Read proc's stdout until a line starting with ``prefix``; returns it and all lines."""
    import selectors

    lines: list[str] = []
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            break
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return line.rstrip("\n"), lines
    raise AssertionError(f"no {prefix!r} line from the driver within {timeout} s; got {lines}")


@contextmanager
def reaped(*procs: subprocess.Popen) -> Iterator[None]:
    """Whatever the block raises, no process of ``procs`` outlives it (killed, waited for)."""
    try:
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
