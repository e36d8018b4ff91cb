"""Build a whole virtual lab from a topology file, run its components, tear it down.

Why one class: the CLI's supervisor, the project's tests and a Python prompt all need
the same sequence -- namespaces and wires (ipsec_hil_twin.machinery.netns), one host dir per appliance
(ipsec_hil_twin.lifecycle.labfiles: host.json, a FreeBSD-like root/, faults/sysctl/state files), the client
key, the per-appliance processes (ESP engine and IKE daemon inside the namespace, SSH
server on 127.0.0.1), known_hosts and the resolved topology the suite connects with --
and the same teardown that leaves nothing behind, even after a crash (`cleanup_dead`,
ipsec_hil_twin.machinery.labruns).

Every decision comes from the validated topology model (ipsec_hil.lab.topology, the lab
file's schema: the one thing the twin shares with the suite) and the twin's own
personality table (ipsec_hil_twin.personality).

The process that calls `Lab.up()` owns the components: they get PR_SET_PDEATHSIG, so
they die with it.  `python -m ipsec_hil_twin up` therefore runs `Lab.up()` in a detached
supervisor (ipsec_hil_twin.lifecycle.supervisor) that stays alive while the lab is in use.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ipsec_hil.lab.topology import Topology, load_topology
from ipsec_hil_twin import faults as fault_registry
from ipsec_hil_twin.machinery import netns as tn
from ipsec_hil_twin.lifecycle.labfiles import (
    DEFAULT_SYSCTLS, boot_state, fake_module, host_port_specs, load_lab_topology, make_host_dir,
    network_spec, ports_info, write_client_key, write_known_hosts, write_resolved,
)
from ipsec_hil_twin.machinery.labprocs import (
    alive, child_setup, kill_netns_processes, kill_record, kill_records, pid_record, proc_start,
)
from ipsec_hil_twin.machinery.labruns import (
    ALL_COMPONENTS, COMPONENT_MODULES, INDEX_DIR, Component, LabBuildError, available_components,
    cleanup_dead, control_request, find_module, find_run, free_prefix, index_add, list_runs,
    log_tail, probe, run_is_dead, run_status, teardown,
)
from ipsec_hil_twin.machinery.prefork import Launch, Slot, prefork
from ipsec_hil_twin.machinery.runtime import HOST_DIR_ENV, HostDir, RunDir, check_prefix, netns_name, read_json, write_json_atomic
from ipsec_hil_twin.personality import MODELS

READY_TIMEOUT = 20.0
_free_prefix = free_prefix  # the name ipsec_hil_twin.__main__ and ipsec_hil_twin.lifecycle.supervisor import

__all__ = [
    "ALL_COMPONENTS", "COMPONENT_MODULES", "DEFAULT_SYSCTLS", "INDEX_DIR", "READY_TIMEOUT",
    "Component", "Lab", "LabBuildError", "alive", "available_components", "boot_state",
    "cleanup_dead", "control_request", "fake_module", "find_run", "kill_netns_processes",
    "kill_record", "kill_records", "list_runs", "pid_record", "proc_start", "run_is_dead",
    "teardown",
]


def component_launch(run: RunDir, prefix: str, host: str, comp: str, ssh_port: int) -> Launch:
    """What component ``comp`` of ``host`` runs: ``python -m`` which module, with which
    arguments, environment and log, in which namespace (None: the root one); ``ssh_port``
    the SSH server's (0: any free one)."""
    hd = run.host_dir(host)
    ns: str | None = netns_name(prefix, host)
    if comp == "engine":
        module, args = "ipsec_hil_twin.engine", ["--host-dir", str(hd.path)]
    elif comp == "ike":
        module, args = "ipsec_hil_twin.ike.daemon", ["--host-dir", str(hd.path)]
    else:
        module, args, ns = "ipsec_hil_twin.shell.sshd", ["--host-dir", str(hd.path), "--authorized-key", str(run.client_pub),
                                         "--port", str(ssh_port), "--port-file", str(hd.ssh_port_file)], None
    env = dict(os.environ, **{HOST_DIR_ENV: str(hd.path), "PYTHONUNBUFFERED": "1"})
    return Launch(module, args, env, str(hd.log_dir / f"{comp}.log"), ns)


class Lab:
    """A running (or attached) virtual lab.  See the module docstring."""

    def __init__(self, run_dir: RunDir, prefix: str, topology: Topology | None = None,
                 topology_path: Path | None = None) -> None:
        self.run = run_dir
        self.prefix = prefix
        self._topology = topology
        self.topology_path = topology_path
        self.components: dict[tuple[str, str], Component] = {}
        self.enabled: tuple[str, ...] = ()
        self.net: tn.BuiltNetwork | None = None
        self.ssh_ports: dict[str, int] = {}
        self.owner = False
        self.info: dict[str, Any] = {}
        self._slots: dict[tuple[str, str], Slot] = {}

    @property
    def topology(self) -> Topology:
        """The validated topology (read back from the run's file for attached labs)."""
        if self._topology is None:
            self._topology = load_topology(self.info["topology"], models=MODELS)
        return self._topology

    # ---- construction

    @classmethod
    def up(cls, topology_path: str | os.PathLike[str], prefix: str | None = None,
           run_dir: str | os.PathLike[str] | None = None,
           components: tuple[str, ...] | list[str] | None = None,
           starter_pid: int | None = None, owner_pid: int | None = None,
           warm: bool = False) -> "Lab":
        """Build and start the lab; on any failure tear down what was made and raise.

        ``warm``: fork the components from this interpreter (ipsec_hil_twin.machinery.prefork) instead of
        starting each through ``ip netns exec python -m``; only for a single-threaded
        caller that holds no socket yet -- the supervisor."""
        path = Path(topology_path).resolve()
        cleanup_dead()
        prefix = check_prefix(prefix) if prefix else free_prefix()
        rd = RunDir(run_dir) if run_dir else RunDir.for_prefix(prefix)
        if rd.lab_json.exists() or tn.list_namespaces(prefix):
            raise LabBuildError(f"prefix {prefix}: a lab with this prefix exists ({rd.path})")
        if rd.path.exists() and any(p.name != rd.supervisor_log.name for p in rd.path.iterdir()):
            # teardown removes the run dir: never adopt a directory with someone's files
            raise LabBuildError(f"run dir {rd.path} exists and is not empty; give a new path")
        comps = tuple(components) if components is not None else available_components()
        for c in comps:
            if c not in ALL_COMPONENTS:
                raise LabBuildError(f"component {c!r}: expected one of {', '.join(ALL_COMPONENTS)}")
            if find_module(COMPONENT_MODULES[c]) is None:
                raise LabBuildError(f"component {c}: module {COMPONENT_MODULES[c]} is not installed")
        topo = load_lab_topology(path)
        lab = cls(rd, prefix, topo, path)
        lab.enabled = comps
        lab.owner = True
        rd.path.mkdir(parents=True, exist_ok=True)
        index_add(prefix, rd)
        lab.info = {"prefix": prefix, "run_dir": str(rd.path), "topology": str(path),
                    "state": "starting", "created": time.time(), "components": list(comps),
                    "supervisor": pid_record(os.getpid()),
                    "starter": pid_record(starter_pid) if starter_pid else None,
                    "owner": pid_record(owner_pid) if owner_pid else None,
                    "namespaces": {}, "links": [], "hosts": {}}
        lab._save()
        try:
            if warm:
                lab._prefork([(h.name, c) for h in topo.appliances() for c in comps])
            lab._build(path)
        except BaseException:
            lab._cancel_slots()
            lab.down()
            raise
        lab._cancel_slots()  # none is left after a build: each was launched
        return lab

    @classmethod
    def attach(cls, run_dir: str | os.PathLike[str] | None = None, prefix: str | None = None) -> "Lab":
        """A handle on a lab started elsewhere (for fault/status/reboot/down)."""
        rd = find_run(run_dir=run_dir, prefix=prefix)
        info = rd.read_lab()
        lab = cls(rd, info["prefix"])
        lab.info = info
        lab.enabled = tuple(info.get("components") or ())
        return lab

    def _build(self, path: Path) -> None:
        topo = self.topology
        self.net = tn.build_network(network_spec(topo, self.prefix))
        self.info["namespaces"] = dict(self.net.namespaces)
        self.info["links"] = [link.as_json() for link in self.net.links]
        self._save()
        write_client_key(self.run)
        appliances = [h.name for h in topo.appliances()]
        for name, host in topo.hosts.items():
            if host.is_appliance:
                make_host_dir(self.run, self.prefix, topo, name)
                self.info["hosts"][name] = {"role": "appliance", "state": "up",
                                            "netns": self.net.namespaces[name],
                                            "host_dir": str(self.run.host_dir(name).path),
                                            "ssh_port": None, "components": {}}
            else:
                self.info["hosts"][name] = {"role": "bench", "netns": self.net.namespaces[name]}
            self.info["hosts"][name]["ports"] = ports_info(host)
        for name in appliances:
            for comp in self.enabled:
                self._start(name, comp)
        self._wait_ready(appliances, self.enabled)
        write_known_hosts(self.run, self.ssh_ports, appliances if "sshd" in self.enabled else [])
        write_resolved(self.run, self.prefix, topo, path, self.ssh_ports)
        self.info["state"] = "up"
        self._save()

    def _save(self) -> None:
        write_json_atomic(self.run.lab_json, self.info)

    # ---- components

    def _launch(self, host: str, comp: str) -> Launch:
        port = self.ssh_ports.get(host) or (self.info["hosts"][host].get("ssh_port") or 0)
        return component_launch(self.run, self.prefix, host, comp, port)

    def _component(self, host: str, comp: str, launch: Launch) -> Component:
        argv = [sys.executable, "-m", launch.module, *launch.args]
        if launch.netns:
            argv = tn.netns_exec(launch.netns, argv)
        return Component(host, comp, argv, Path(launch.log), launch.env)

    def _prefork(self, pairs: list[tuple[str, str]]) -> None:
        modules = sorted({COMPONENT_MODULES[c] for _, c in pairs})
        self._slots = dict(zip(pairs, prefork(len(pairs), modules)))

    def _cancel_slots(self) -> None:
        """Pre-forked children not launched (a failed build) exit; reaped here."""
        while self._slots:
            self._slots.popitem()[1].cancel()

    def _start(self, host: str, comp: str) -> None:
        launch = self._launch(host, comp)
        c = self._component(host, comp, launch)
        if comp == "sshd" and not self.ssh_ports.get(host):
            self.run.host_dir(host).ssh_port_file.unlink(missing_ok=True)
        c.log.parent.mkdir(parents=True, exist_ok=True)
        slot = self._slots.pop((host, comp), None)
        with open(c.log, "ab") as log:
            how = "forked warm: " if slot else ""
            log.write(f"--- {time.strftime('%H:%M:%S')} start {how}{' '.join(c.argv)}\n".encode())
            log.flush()
            if slot is not None:
                c.proc = slot.launch(launch)
            else:
                c.proc = subprocess.Popen(c.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                          env=c.env, preexec_fn=child_setup, close_fds=True)
        c.record = pid_record(c.proc.pid)
        self.components[(host, comp)] = c
        self.info["hosts"][host]["components"][comp] = c.record
        self._save()

    def _wait_ready(self, hosts: list[str], comps: tuple[str, ...], timeout: float | None = None) -> None:
        timeout = READY_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        pending = [(h, c) for h in hosts for c in comps]
        last: dict[tuple[str, str], str] = {}
        while pending:
            for key in list(pending):
                h, c = key
                comp = self.components.get(key)
                if comp and comp.proc and comp.proc.poll() is not None:
                    raise LabBuildError(f"{h}: {c} exited with status {comp.proc.returncode} "
                                        f"before answering; log {comp.log}:\n{log_tail(comp.log)}")
                ok, why = self._probe(h, c)
                if ok:
                    pending.remove(key)
                else:
                    last[key] = why
            if not pending:
                break
            if time.monotonic() > deadline:
                h, c = pending[0]
                log = self.run.host_dir(h).log_dir / f"{c}.log"
                raise LabBuildError(f"{h}: {c} did not answer within {timeout:.0f} s "
                                    f"({last.get((h, c), 'no answer')}); log {log}:\n{log_tail(log)}")
            time.sleep(0.1)
        if "engine" in comps:
            for h in hosts:
                self._engine_set_driver(h)

    def _probe(self, host: str, comp: str) -> tuple[bool, str]:
        ok, why, port = probe(self.run.host_dir(host), comp)
        if ok and port is not None:
            self.ssh_ports[host] = port
            self.info["hosts"][host]["ssh_port"] = port
        return ok, why

    def _engine_set_driver(self, host: str) -> None:
        state = read_json(self.run.host_dir(host).state_json, default={})
        drv = state.get("driver") or {}
        try:
            control_request(self.run.host_dir(host).engine_sock,
                            {"op": "set_driver", "loaded": bool(drv.get("loaded")),
                             "md5": drv.get("md5"), "name": drv.get("driver"),
                             "rate_factor": drv.get("rate_factor", 1.0),
                             "cpu_factor": drv.get("cpu_factor", 1.0)}, timeout=2.0)
        except (OSError, ValueError) as exc:
            raise LabBuildError(f"{host}: engine set_driver: {exc}") from None

    # ---- operations on a running lab

    def host_dir(self, name: str) -> HostDir:
        return self.run.host_dir(name)

    @property
    def resolved(self) -> Path:
        return self.run.resolved_yaml

    def appliances(self) -> list[str]:
        return [h for h, v in self.info.get("hosts", {}).items() if v.get("role") == "appliance"]

    def fault(self, host: str, name: str, **params: Any) -> dict[str, Any]:
        """Switch a fault on for one appliance (see ipsec_hil_twin.faults.REGISTRY)."""
        self._check_host(host)
        return fault_registry.set_fault(self.host_dir(host), name, **params)

    def clear_fault(self, host: str, name: str) -> None:
        self._check_host(host)
        fault_registry.clear_fault(self.host_dir(host), name)

    def clear_faults(self) -> None:
        """Switch every fault off on every appliance."""
        for h in self.appliances():
            fault_registry.clear_fault(self.host_dir(h), None)

    def _check_host(self, host: str) -> None:
        if host not in self.appliances():
            raise LabBuildError(f"host {host!r}: not an appliance of lab {self.prefix} "
                                f"(appliances: {', '.join(self.appliances()) or 'none'})")

    def reboot(self, host: str, pause: float = 1.0) -> int:
        """Reboot one appliance (owner only): stop its processes, keep root/, reset
        counters and state, bump boot_id; same SSH port.  Returns the new boot_id."""
        self._check_host(host)
        if not self.owner:
            raise LabBuildError("reboot: only the supervisor owns the processes; "
                                "use ipsec_hil_twin.lifecycle.supervisor.request_reboot()")
        hd = self.host_dir(host)
        self.info["hosts"][host]["state"] = "rebooting"
        self._save()
        if "engine" in self.enabled:
            try:
                control_request(hd.engine_sock, {"op": "reset"}, timeout=2.0)
            except (OSError, ValueError) as exc:  # a hung engine is stopped anyway
                print(f"ipsec_hil_twin.lifecycle.lab: {host}: engine reset before reboot: {exc}", file=sys.stderr)
        recs = []
        for comp in self.enabled:
            c = self.components.pop((host, comp), None)
            recs.append(c.record if c else self.info["hosts"][host]["components"].get(comp))
        kill_records(recs)
        kill_netns_processes([netns_name(self.prefix, host)])
        for sock in (hd.engine_sock, hd.ike_sock):
            sock.unlink(missing_ok=True)
        # a reboot forgets runtime network changes and writable sysctls
        tn.reset_host_network(netns_name(self.prefix, host), host_port_specs(self.topology, host))
        write_json_atomic(hd.sysctl_json, dict(DEFAULT_SYSCTLS))
        host_json = hd.read_host()
        boot_id = int(host_json.get("boot_id", 1)) + 1
        host_json["boot_id"] = boot_id
        write_json_atomic(hd.host_json, host_json)
        write_json_atomic(hd.state_json, boot_state(hd, host_json["driver"], host_json["module_file"], boot_id))
        time.sleep(pause)
        self._boot(host)
        self.info["hosts"][host]["state"] = "up"
        self._save()
        return boot_id

    def _boot(self, host: str) -> None:
        """A rebooted appliance's processes in a boot's order: the kernel (the engine, driver
        attached) answers before any daemon starts. Why: with all started at once, sshd
        answered while the engine still imported (CI load): the suite's re-initiate met no
        kernel ("unable to install ... SAD in kernel"), a false alarm of the fault matrix."""
        kernel = tuple(c for c in self.enabled if c == "engine")
        for group in (kernel, tuple(c for c in self.enabled if c not in kernel)):
            for comp in group:
                self._start(host, comp)
            self._wait_ready([host], group)  # the engine's also attaches the driver (set_driver)

    def status(self) -> dict[str, Any]:
        """What exists now: namespaces, pids alive, ports."""
        return run_status(self.run, self.prefix, self.info)

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.owner:
            self.down()

    def down(self) -> None:
        """Stop every process, remove namespaces, links and the run dir.  Idempotent."""
        teardown(self.run, self.prefix, self.info or None, own=self.components)
        self.components.clear()
