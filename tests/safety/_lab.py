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

from tests.lab_factory import TestLab
from tests.safety._inject import TEST_COMMAND

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


#: what the twin itself writes under an appliance's root as it runs (its logs, its
#: scratch): not the suite's files, so not compared. Everything else is: /usr/local/etc, the
#: module under /boot, the journals and leases under /var/db/ipsec-hil, whatever else the
#: suite might write (a file it should not have left shows up as new).
TWIN_OWN = ("var/log/", "tmp/", "var/run/", "root/")


def file_hashes(lab: TestLab, host: str) -> dict[str, tuple[str, str]]:
    """sha256 and mode of every file (and the mode of every directory) under the
    appliance's root but the twin's own (:data:`TWIN_OWN`)."""
    root = lab.root(host)
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if any((rel + "/").startswith(t) for t in TWIN_OWN):
            continue
        if p.is_dir() and not p.is_symlink():
            out[rel + "/"] = ("dir", oct(p.stat().st_mode & 0o7777))
        elif p.is_file() or p.is_symlink():
            out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), oct(p.stat().st_mode & 0o7777))
    return out


def file_differences(before: dict, after: dict) -> list[str]:
    """Named: which file is new, gone, or changed in content or mode; which directory
    changed its mode (a directory a run made and left empty -- the journal's -- is no file
    left behind)."""
    out = []
    for k in sorted(set(before) | set(after)):
        b, a = before.get(k), after.get(k)
        if b == a:
            continue
        if k.endswith("/") and (a is None or b is None):
            continue  # a directory made or removed: its files say whether anything is left
        if b is None:
            out.append(f"new {k}")
        elif a is None:
            out.append(f"gone {k}")
        elif b[0] != a[0]:
            out.append(f"changed {k}")
        else:
            out.append(f"mode of {k} {b[1]} -> {a[1]}")
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


def spd(app) -> list[str]:
    """``setkey -DP`` through its parser (parsers.setkey_spd): every policy, in setkey's words."""
    from ipsec_hil.lab.provision.spd import describe

    return sorted(describe(p) for p in app.setkey_policies().policies)


def sad(app) -> list[str]:
    """``setkey -D`` through its parser: every kernel SA by addresses, SPI and state (never
    its keys)."""
    return sorted(f"{e.src}->{e.dst} {e.satype} spi 0x{e.spi:08x} reqid {e.reqid} {e.state}"
                  for e in app.setkey_sas().entries)


def module(app) -> tuple:
    """The driver module: md5, size, loaded (kldstat and md5 -q in one round trip)."""
    m = app.module_info()
    return (m.md5, m.size, m.loaded)


def bench_state(lab: TestLab) -> dict[str, object]:
    """The bench as the suite may leave it: its namespace's routes and addresses, the lab's
    namespaces (none added or gone), its lease file (none left) and its journal (no entry
    left: traffic.bench_routes)."""
    from ipsec_hil.lab.sharing.lock import BENCH_LOCK_PATH
    from ipsec_hil.lab.traffic.bench_routes import BENCH_JOURNAL_DIR

    from tests.lab_factory import namespaces_of

    ns = lab.namespaces["bench"]
    out: dict[str, object] = dict(net_state_ns(ns))
    out["namespaces"] = sorted(namespaces_of(lab.prefix))
    d, name = os.path.split(BENCH_LOCK_PATH)
    stem, _, ext = name.rpartition(".")
    out["lease"] = os.path.exists(os.path.join(d, f"{stem}.{ns}.{ext}"))
    journal = f"{BENCH_JOURNAL_DIR}.{ns}"
    out["journal"] = sorted(os.listdir(journal)) if os.path.isdir(journal) else []
    return out


def net_state_ns(ns: str) -> dict[str, str]:
    out = {}
    for what, cmd in {"routes4": ["-4", "route", "show", "table", "all"],
                      "routes6": ["-6", "route", "show", "table", "all"],
                      "addrs": ["-br", "addr", "show"], "rules": ["rule", "show"]}.items():
        r = subprocess.run(["ip", "-n", ns, *cmd], capture_output=True, text=True, timeout=10)
        out[what] = "\n".join(sorted(line for line in r.stdout.splitlines() if "cache" not in line))
    return out


#: what :func:`snapshot` holds per appliance, and how a difference is named
COMPARED = (("net", "routes/addresses"), ("route_get", "route get answers"), ("ifdisabled", "wan10g ifdisabled flag"),
            ("conns", "loaded connections (swanctl --list-conns)"), ("ike", "IKE/CHILD SAs (swanctl --list-sas)"),
            ("sad", "kernel SAs (setkey -D)"), ("spd", "SPD entries (setkey -DP)"),
            ("module", "driver module (md5, size, loaded)"))


def snapshot(lab: TestLab, apps: dict) -> dict:
    """Everything a run may change: on the two ends of the lab tunnel every file under their
    roots with its mode, routes, addresses, ``route get`` answers, the port's ifdisabled flag,
    loaded connections, IKE/CHILD SAs, kernel SAs, SPD entries, the driver module and its
    md5; and the bench (:func:`bench_state`)."""
    snap: dict = {"bench": bench_state(lab)}
    for h in ("dut3300", "peer3300"):
        a = apps[h]
        snap[h] = {"files": file_hashes(lab, h), "net": net_state(lab, h),
                   "route_get": suite_routes(a, PEER_INNER[h]),
                   "ifdisabled": ifdisabled(a, "wan10g"), "conns": loaded_conns(a),
                   "ike": sorted(f"{i.name} {i.state} " + ",".join(sorted(f"{c.name}:{c.state}" for c in i.children))
                                 for i in a.list_sas().ike_sas),
                   "sad": sad(a), "spd": spd(a), "module": module(a)}
    return snap


def restored_differences(lab: TestLab, apps: dict, before: dict, *, check_sas: bool = True) -> list[str]:
    """What differs from ``before`` (a :func:`snapshot`), each named: files (sha256 and mode,
    by path), routes and addresses, ``route get`` answers, the ifdisabled flag, loaded
    connections, SAs, SPD entries, the module; the bench's routes, addresses, namespaces and
    lease. Empty when everything is as it was."""
    after = snapshot(lab, apps)
    out = []
    for h in ("dut3300", "peer3300"):
        fd = file_differences(before[h]["files"], after[h]["files"])
        if fd:
            out.append(f"{h}: files: {', '.join(fd[:6])}{' ...' if len(fd) > 6 else ''}")
        for what, label in COMPARED:
            if what in ("ike", "sad") and not check_sas:
                continue
            if after[h][what] != before[h][what]:
                extra = ""
                if isinstance(after[h][what], list):
                    extra = f": now {after[h][what][:4]}, before {before[h][what][:4]}"
                elif what == "module":
                    extra = f": now {after[h][what]}, before {before[h][what]}"
                out.append(f"{h}: {label} differ{extra}")
    for what, b in before["bench"].items():
        if after["bench"][what] != b:
            out.append(f"bench: {what} differ: now {str(after['bench'][what])[:160]!r}, before {str(b)[:160]!r}")
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


# ------------------------------------------------------------------ a run's real changes

#: the build the scenario swaps in for the DUT's driver: fixed bytes, so every scenario's
#: upload is the same step (an ELF header and a marker; the twin loads any file, and its
#: kernel log names the md5)
SWAP_BUILD = b"\x7fELF safety build under test\n" + bytes(range(256)) * 16
#: the twin fault the scenario sets while its test body runs (an engine's data-path fault:
#: on while the tunnel carries nothing, so the body's readings are the same either way)
FAULT = ("drop_every", {"n": 50})


def swap_build(directory: str | os.PathLike) -> str:
    """Write :data:`SWAP_BUILD` as ``safety-build.ko`` into ``directory``; its path."""
    p = os.path.join(directory, "safety-build.ko")
    with open(p, "wb") as f:
        f.write(SWAP_BUILD)
    return p


def bench_host(topo: Any):
    """The bench's Host, as the run's bench lease reaches it (lease_cli.connect)."""
    from ipsec_hil.lab.sharing.lease_cli import connect

    return connect(topo, "bench")


def scenario(apps: dict, bench: Any, plan: Any, config: Any, psk: str, run_id: str, module: str,
             fault: Any = None, log: list[str] | None = None, at_up: Any = None) -> None:
    """One run's changes, as the suite makes them: the bench's lease and both appliances'
    (lease_plugin.LeaseHold, tunnel.bring_up), the DUT's driver swapped for ``module``
    (DriverDeployment, as ``--driver``: its own lease, its backup), the tunnel brought up
    (TunnelProvisioner), the bench's route into the tunnel (fixtures.bench_route:
    journalled on the bench, then added), the test body -- both ends' SAs and SPD read while
    the twin's :data:`FAULT` is on (``fault(on)`` switches it) -- and everything undone in
    reverse. ``at_up()`` is called once the tunnel is up (the driver's "UP" line)."""
    import ipaddress
    from contextlib import ExitStack

    from ipsec_hil.lab.driver import DriverDeployment
    from ipsec_hil.lab.provision import TunnelProvisioner
    from ipsec_hil.lab.sharing.lock import ApplianceLock, bench_lock_path
    from ipsec_hil.lab.traffic.bench import BenchHost
    from ipsec_hil.lab.traffic.bench_routes import BenchRoutes

    local, remote = apps[plan.local.host], apps[plan.remote.host]
    prov = None
    try:
        with ExitStack() as stack:
            lk = ApplianceLock(bench, "safety: a run (bench)", run_id=run_id, path=bench_lock_path(bench),
                               wait=10, poll=0.2)
            lk.acquire()
            stack.callback(lk.release)
            for app in (local, remote):
                lk = ApplianceLock(app.host, "safety: a run", run_id=run_id, wait=10, poll=0.2)
                lk.acquire()
                stack.callback(lk.release)
            dep = DriverDeployment(local, module, run_id=run_id)
            dep.deploy()
            stack.callback(dep.restore)
            prov = TunnelProvisioner({local.name: local, remote.name: remote}, plan, config, psk, run_id=run_id,
                                     initiate_timeout=10)
            prov.up()
            stack.callback(prov.down)
            routes = BenchRoutes(BenchHost("bench", bench), run_id)
            stack.callback(routes.remove_all)
            inner = config.inner
            routes.add(f"{ipaddress.ip_interface(plan.remote.lan_if[inner]).ip}/{32 if inner == 'ipv4' else 128}",
                       str(ipaddress.ip_interface(plan.local.lan_if[inner]).ip))
            if at_up is not None:
                at_up()
            if fault is not None:
                fault(True)
                stack.callback(fault, False)
            for app in (local, remote):
                app.list_sas()
                app.setkey_policies()
    finally:
        if prov is not None and log is not None:
            log.extend(prov.log)


def next_run(topo: Any, dut: str = "dut3300") -> Any:
    """What the suite's next run does before anything of its own, and nothing else -- a run
    WITHOUT ``--driver``: the bench's lease (lease_plugin.LeaseHold: a dead holder of this
    machine is taken over), then the run's start recovery (recovery_plugin ->
    ``dead_runs.recover_at_start``: the bench's journal, every appliance's driver journal
    under the deployment's lease, the tunnel journals of the appliances whose lease is free
    or a dead run's). Returns its record (``dead_runs.Found``: what it undid and says on the
    page). No test-side cleanup: what this leaves is what the suite leaves."""
    from ipsec_hil.lab.dead_runs import Found, recover_at_start
    from ipsec_hil.lab.live_lab import Lab
    from ipsec_hil.lab.sharing.lock import ApplianceLock, bench_lock_path

    found = Found()
    lab = Lab.connect(topo)
    try:
        bench = lab.hosts["bench"]
        with ApplianceLock(bench, "safety: next run (bench)", path=bench_lock_path(bench), wait=10,
                           poll=0.2) as lease:
            recover_at_start(lab, holder="safety: next run", run_id="safety-next", bench_host=bench,
                             bench_took_over=lease.took_over, record=found, lease_wait=10)
    finally:
        lab.close()
    if found.left:
        from ipsec_hil.lab.errors import LabError

        raise LabError(found.stop_message() or "recovery incomplete")
    return found
