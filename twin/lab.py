"""Build a whole virtual lab from a topology file, run its components, tear it down.

Why one class: the CLI's supervisor, the project's tests and a Python prompt all need
the same sequence -- namespaces and wires (twin.netns), one host dir per appliance
(host.json, a FreeBSD-like root/, faults/sysctl/state files), the client key, the
per-appliance processes (ESP engine and IKE daemon inside the namespace, SSH server on
127.0.0.1), known_hosts and the resolved topology the suite connects with -- and the
same teardown that leaves nothing behind, even after a crash (`cleanup_dead`).

The process that calls `Lab.up()` owns the components: they get PR_SET_PDEATHSIG, so
they die with it.  `python -m twin up` therefore runs `Lab.up()` in a detached
supervisor (twin.supervisor) that stays alive while the lab is in use.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from twin import faults as fault_registry
from twin import netns as tn
from twin.runtime import (
    DEFAULT_BASE, HOST_DIR_ENV, HostDir, RunDir, check_prefix, netns_name, new_prefix,
    read_json, write_bytes_atomic, write_json_atomic,
)

ALL_COMPONENTS = ("engine", "ike", "sshd")
COMPONENT_MODULES = {"engine": "twin.engine.__main__", "ike": "twin.ike.daemon", "sshd": "twin.sshd"}
READY_TIMEOUT = 20.0
DEFAULT_SYSCTLS = {"net.inet.ipsec.dfbit": 0}
"""sysctl.json after every (re)boot: FreeBSD's defaults for the writable sysctls."""
INDEX_DIR = DEFAULT_BASE / ".index"
"""Symlinks prefix -> run dir, so runs outside the default base are found for cleanup."""

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


class LabBuildError(RuntimeError):
    """The lab could not be built or a component did not come up; names the part."""


# ----------------------------------------------------------------------------- pids


def proc_start(pid: int) -> int | None:
    """Kernel start time of a process (clock ticks), None if it does not exist.

    Stored beside each pid so a recycled pid is never mistaken for ours.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def pid_record(pid: int) -> dict[str, int | None]:
    return {"pid": pid, "start": proc_start(pid)}


def alive(rec: dict[str, Any] | None) -> bool:
    """True if the recorded process still exists (same pid AND same start time)."""
    if not rec or not rec.get("pid"):
        return False
    if rec.get("start") is None:
        return False  # it had exited when recorded: never guess (pids are recycled fast)
    return proc_start(int(rec["pid"])) == rec["start"]


def kill_record(rec: dict[str, Any] | None, timeout: float = 3.0) -> None:
    """SIGTERM the recorded process (and its group if it leads one), SIGKILL after timeout."""
    kill_records([rec], timeout)


def kill_records(recs: list[dict[str, Any] | None], timeout: float = 3.0) -> None:
    """Stop several recorded processes at once: SIGTERM all, wait, SIGKILL the rest."""
    live = [r for r in recs if alive(r)]
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
        for r in live:
            _signal_tree(int(r["pid"]), sig)  # type: ignore[index]
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline:
            for r in live:
                _reap(int(r["pid"]))  # type: ignore[index]
            live = [r for r in live if alive(r)]
            if live:
                time.sleep(0.02)
        if not live:
            return


def _signal_tree(pid: int, sig: int) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
            return
    except ProcessLookupError:
        return
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _child_setup() -> None:  # runs in the forked child before exec
    os.setsid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def kill_netns_processes(ns_names: list[str]) -> None:
    """Kill every process living in one of these namespaces (grandchildren included)."""
    inodes = set()
    for ns in ns_names:
        try:
            st = os.stat(tn.NETNS_RUN_DIR / ns)
            inodes.add((st.st_dev, st.st_ino))
        except FileNotFoundError:
            pass
    if not inodes:
        return
    me = os.getpid()
    victims = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
            if (st.st_dev, st.st_ino) in inodes:
                victims.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in victims:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(proc_start(p) is not None for p in victims):
            for p in victims:
                _reap(p)
            time.sleep(0.05)


# ----------------------------------------------------------------------------- topology


def load_topology_dict(path: Path) -> dict[str, Any]:
    """The topology as a plain dict, validated by plugin.lab.topology when available.

    The builder works on the YAML itself (not the pydantic model) so the resolved file
    it writes is the user's file with only `mgmt` and `lab` changed.
    """
    try:
        from plugin.lab.topology import load_topology  # type: ignore
    except ImportError:
        load_topology = None
    if load_topology is not None:
        load_topology(path)  # raises TopologyError with file:line: field
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise LabBuildError(f"{path}: topology file not found") from None
    except yaml.YAMLError as exc:
        raise LabBuildError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), dict):
        raise LabBuildError(f"{path}: hosts: expected a mapping of host names")
    for name, host in data["hosts"].items():
        if not isinstance(host, dict):
            raise LabBuildError(f"{path}: hosts.{name}: expected a mapping")
        if host.get("role") not in ("appliance", "bench"):
            raise LabBuildError(f"{path}: hosts.{name}.role: expected appliance|bench, "
                                f"found {host.get('role')!r}")
        if host["role"] == "appliance" and not host.get("model"):
            raise LabBuildError(f"{path}: hosts.{name}.model: required for an appliance")
    return data


def _split_end(path: Path, where: str, value: Any, hosts: dict[str, Any]) -> tuple[str, str]:
    if not isinstance(value, str) or value.count(".") != 1:
        raise LabBuildError(f"{path}: {where}: expected 'host.port', found {value!r}")
    host, port = value.split(".")
    if host not in hosts or port not in (hosts[host].get("ports") or {}):
        raise LabBuildError(f"{path}: {where}: no port {value!r} in hosts")
    return host, port


def _port_spec(host: str, name: str, port: dict[str, Any]) -> tn.PortSpec:
    return tn.PortSpec(host=host, name=name, ipv4=port.get("ipv4"), ipv6=port.get("ipv6"),
                       mtu=int(port.get("mtu") or 1500), rate_mbit=port.get("rate_mbit"))


def network_spec(path: Path, topo: dict[str, Any], prefix: str) -> tn.NetworkSpec:
    """Links from the topology; a port on no link gets a wire to a parked peer end
    (`nc<n>`, in the same namespace) so its addresses exist and have carrier, like a
    LAN bridge that is up with nothing plugged in."""
    hosts = topo["hosts"]
    links: list[tn.LinkSpec] = []
    used: set[tuple[str, str]] = set()
    for i, link in enumerate(topo.get("links") or []):
        ha, pa = _split_end(path, f"links[{i}].a", link.get("a"), hosts)
        hb, pb = _split_end(path, f"links[{i}].b", link.get("b"), hosts)
        used |= {(ha, pa), (hb, pb)}
        links.append(tn.LinkSpec(_port_spec(ha, pa, hosts[ha]["ports"][pa]),
                                 _port_spec(hb, pb, hosts[hb]["ports"][pb]),
                                 link.get("rate_mbit")))
    n = 0
    for hname, host in hosts.items():
        for pname, port in (host.get("ports") or {}).items():
            if (hname, pname) in used:
                continue
            links.append(tn.LinkSpec(_port_spec(hname, pname, port or {}),
                                     tn.PortSpec(hname, f"nc{n}", mtu=int((port or {}).get("mtu") or 1500)),
                                     None))
            n += 1
    return tn.NetworkSpec(prefix, [tn.HostSpec(h, hosts[h]["role"]) for h in hosts], links)


# ----------------------------------------------------------------------------- profiles


def hardware_profile(model: str, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The model's profile as plain data (plugin.lab.hardware when it is there)."""
    try:
        from plugin.lab.hardware import profile_for  # type: ignore
    except ImportError:
        profile_for = None
    if profile_for is not None:
        prof = profile_for(model, overrides or {})
        get = (lambda k, d=None: getattr(prof, k, d))
        return {"model": get("model", model), "driver": get("driver"),
                "module_file": get("module_file"), "counters": dict(get("counters") or {}),
                "replay_window": get("replay_window", 32),
                "first_stream_issue": get("first_stream_issue"),
                "accepts_ipv6_sa": get("accepts_ipv6_sa", True)}
    # Fallback until plugin.lab.hardware lands: DESIGN.md's OID scheme.
    driver = {"xgs3300": "octep", "xgs136": "npuep"}.get(model)
    if driver is None:
        raise LabBuildError(f"model {model!r}: expected xgs3300 or xgs136")
    if driver == "octep":
        names = "tx_encrypt out_taken out_orig rx_v6 rx_done rx_queuefail rx_bad rx_blocked".split()
        cop = "FROM_KN_TO_IPSEC_ENCR FROM_WIRE_TO_IPSEC_DECR CRYPTO_DROP_REPLAY_OOW TX_DROP_QUEUE_FULL".split()
    else:
        names = "tx_taken tx_accel rx_done rx_v6 rx_bad rx_nosa tx_nonhop tx_drop".split()
        cop = []
    counters = {n: f"dev.{driver}.0.ipsec.{n}" for n in names + ["sa_count", "sa_inet", "sa_inet6"]}
    counters.update({n: f"dev.{driver}.0.cop.{n}" for n in cop})
    counters.update((overrides or {}).get("counters") or {})
    return {"model": model, "driver": driver, "module_file": f"/boot/modules/{driver}.ko",
            "counters": counters, "replay_window": 32,
            "first_stream_issue": 531 if model == "xgs136" else None, "accepts_ipv6_sa": True}


def fake_module(name: str, label: str) -> bytes:
    """A deterministic ELF-looking blob standing for a kernel module file.

    Same bytes for the same name/label on every run, so `md5 /boot/modules/octep.ko`
    is stable; different per driver, so a test can tell which file is "loaded".
    """
    head = b"\x7fELF\x02\x01\x01\x09" + b"\0" * 8  # ELF64, LSB, FreeBSD OSABI
    body = f"{name}: twin module for {label}\0".encode()
    filler = hashlib.sha256(body).digest() * 64
    return head + body + filler


def file_record(root: Path, abspath: str, name: str) -> dict[str, Any]:
    data = (root / abspath.lstrip("/")).read_bytes()
    return {"name": name, "file": abspath, "md5": hashlib.md5(data).hexdigest(), "size": len(data)}


def boot_state(hd: HostDir, driver: str, module_file: str, boot_id: int) -> dict[str, Any]:
    """state.json after a (re)boot: kernel, ipsec.ko and the driver module loaded."""
    modules = [file_record(hd.root, "/boot/kernel/kernel", "kernel"),
               file_record(hd.root, "/boot/kernel/ipsec.ko", "ipsec.ko"),
               file_record(hd.root, module_file, Path(module_file).name)]
    drv = dict(modules[2], loaded=True, driver=driver)
    return {"boot_id": boot_id, "boot_time": time.time(), "modules": modules, "driver": drv}


# ----------------------------------------------------------------------------- the lab


@dataclass
class Component:
    host: str
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    record: dict[str, Any] = field(default_factory=dict)


class Lab:
    """A running (or attached) virtual lab.  See the module docstring."""

    def __init__(self, run_dir: RunDir, prefix: str, topo: dict[str, Any] | None = None,
                 topology_path: Path | None = None) -> None:
        self.run = run_dir
        self.prefix = prefix
        self.topo = topo or {}
        self.topology_path = topology_path
        self.components: dict[tuple[str, str], Component] = {}
        self.enabled: tuple[str, ...] = ()
        self.net: tn.BuiltNetwork | None = None
        self.ssh_ports: dict[str, int] = {}
        self.owner = False
        self.info: dict[str, Any] = {}

    # ---- construction

    @classmethod
    def up(cls, topology_path: str | os.PathLike[str], prefix: str | None = None,
           run_dir: str | os.PathLike[str] | None = None,
           components: tuple[str, ...] | list[str] | None = None,
           starter_pid: int | None = None, owner_pid: int | None = None) -> "Lab":
        """Build and start the lab; on any failure tear down what was made and raise."""
        path = Path(topology_path).resolve()
        cleanup_dead()
        prefix = check_prefix(prefix) if prefix else _free_prefix()
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
            if _find(COMPONENT_MODULES[c]) is None:
                raise LabBuildError(f"component {c}: module {COMPONENT_MODULES[c]} is not installed")
        topo = load_topology_dict(path)
        lab = cls(rd, prefix, topo, path)
        lab.enabled = comps
        lab.owner = True
        rd.path.mkdir(parents=True, exist_ok=True)
        _index_add(prefix, rd)
        lab.info = {"prefix": prefix, "run_dir": str(rd.path), "topology": str(path),
                    "state": "starting", "created": time.time(), "components": list(comps),
                    "supervisor": pid_record(os.getpid()),
                    "starter": pid_record(starter_pid) if starter_pid else None,
                    "owner": pid_record(owner_pid) if owner_pid else None,
                    "namespaces": {}, "links": [], "hosts": {}}
        lab._save()
        try:
            lab._build(path)
        except BaseException:
            lab.down()
            raise
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
        spec = network_spec(path, self.topo, self.prefix)
        self.net = tn.build_network(spec)
        self.info["namespaces"] = dict(self.net.namespaces)
        self.info["links"] = [l.as_json() for l in self.net.links]
        self._save()
        _write_client_key(self.run)
        appliances = [h for h, v in self.topo["hosts"].items() if v["role"] == "appliance"]
        for name in appliances:
            self._make_host_dir(name)
            self.info["hosts"][name] = {"role": "appliance", "state": "up", "netns": self.net.namespaces[name],
                                        "host_dir": str(self.run.host_dir(name).path),
                                        "ssh_port": None, "components": {}}
        for name, h in self.topo["hosts"].items():
            if h["role"] == "bench":
                self.info["hosts"][name] = {"role": "bench", "netns": self.net.namespaces[name]}
            self.info["hosts"][name]["ports"] = {
                p: {k: (v or {}).get(k) for k in ("ipv4", "ipv6", "mtu", "rate_mbit")}
                for p, v in (h.get("ports") or {}).items()}
        for name in appliances:
            for comp in self.enabled:
                self._start(name, comp)
        self._wait_ready(appliances, self.enabled)
        self._write_known_hosts(appliances)
        self._write_resolved()
        self.info["state"] = "up"
        self._save()

    def _save(self) -> None:
        write_json_atomic(self.run.lab_json, self.info)

    # ---- host dirs

    def _make_host_dir(self, name: str) -> None:
        h = self.topo["hosts"][name]
        hd = self.run.host_dir(name)
        prof = hardware_profile(h["model"], h.get("profile"))
        for sub in ("usr/local/etc/swanctl/conf.d", "boot/modules", "boot/kernel", "var/db",
                    "var/log", "tmp", "root"):
            (hd.root / sub).mkdir(parents=True, exist_ok=True)
        hd.bin.mkdir(parents=True, exist_ok=True)
        hd.log_dir.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(hd.rootpath(prof["module_file"]), fake_module(prof["driver"], h["model"]))
        write_bytes_atomic(hd.rootpath("/boot/kernel/kernel"), fake_module("kernel", "FreeBSD 14.1-RELEASE-p6"))
        write_bytes_atomic(hd.rootpath("/boot/kernel/ipsec.ko"), fake_module("ipsec", "FreeBSD 14.1-RELEASE-p6"))
        write_bytes_atomic(hd.rootpath("/boot/loader.conf"), f'{prof["driver"]}_load="YES"\n'.encode())
        ports = []
        for pname, p in (h.get("ports") or {}).items():
            p = p or {}
            ports.append({"name": pname, "ifname": pname, "ipv4": p.get("ipv4"), "ipv6": p.get("ipv6"),
                          "addresses": [a for a in (p.get("ipv4"), p.get("ipv6")) if a],
                          "mtu": int(p.get("mtu") or 1500), "rate_mbit": p.get("rate_mbit")})
        tunnels, kernel_cipher = self._tunnels_of(name)
        boot_id = 1
        host = {
            "name": name, "model": h["model"], "driver": prof["driver"],
            "module_file": prof["module_file"], "counters": prof["counters"],
            "replay_window": prof["replay_window"], "first_stream_issue": prof["first_stream_issue"],
            "accepts_ipv6_sa": prof["accepts_ipv6_sa"], "netns": netns_name(self.prefix, name),
            "prefix": self.prefix, "ports": ports, "tunnels": tunnels,
            "kernel_cipher": kernel_cipher, "boot_id": boot_id, "python": sys.executable,
            "run_dir": str(self.run.path),
            "paths": {"root": str(hd.root), "bin": str(hd.bin), "engine_sock": str(hd.engine_sock),
                      "ike_sock": str(hd.ike_sock), "faults_json": str(hd.faults_json),
                      "sysctl_json": str(hd.sysctl_json), "state_json": str(hd.state_json),
                      "supervisor_sock": str(self.run.supervisor_sock)},
        }
        write_json_atomic(hd.host_json, host)
        write_json_atomic(hd.faults_json, {})
        write_json_atomic(hd.sysctl_json, dict(DEFAULT_SYSCTLS))
        write_json_atomic(hd.state_json, boot_state(hd, prof["driver"], prof["module_file"], boot_id))
        if _find("twin.fbsd.install") is not None:
            from twin.fbsd.install import install_bin  # type: ignore
            install_bin(hd, python=sys.executable)

    def _tunnels_of(self, name: str) -> tuple[list[dict[str, Any]], dict[str, bool]]:
        out, flags = [], {}
        for tname, t in (self.topo.get("tunnels") or {}).items():
            for role, other in (("local", "remote"), ("remote", "local")):
                end = (t or {}).get(role) or {}
                if end.get("host") != name:
                    continue
                peer = t.get(other) or {}
                kernel = end.get("cipher", "offload") == "kernel"
                flags[tname] = kernel
                out.append({"name": tname, "role": role, "port": end.get("port"), "lan": end.get("lan"),
                            "cipher": end.get("cipher", "offload"), "kernel_cipher": kernel,
                            "peer": peer.get("host"), "peer_port": peer.get("port"),
                            "peer_lan": peer.get("lan")})
        return out, flags

    # ---- components

    def _component(self, host: str, comp: str) -> Component:
        hd = self.run.host_dir(host)
        ns = netns_name(self.prefix, host)
        py = sys.executable
        if comp == "engine":
            argv = tn.netns_exec(ns, [py, "-m", "twin.engine", "--host-dir", str(hd.path)])
        elif comp == "ike":
            argv = tn.netns_exec(ns, [py, "-m", "twin.ike.daemon", "--host-dir", str(hd.path)])
        else:
            port = self.ssh_ports.get(host) or (self.info["hosts"][host].get("ssh_port") or 0)
            argv = [py, "-m", "twin.sshd", "--host-dir", str(hd.path),
                    "--authorized-key", str(self.run.client_pub), "--port", str(port),
                    "--port-file", str(hd.ssh_port_file)]
        env = dict(os.environ, **{HOST_DIR_ENV: str(hd.path), "PYTHONUNBUFFERED": "1"})
        return Component(host, comp, argv, hd.log_dir / f"{comp}.log", env)

    def _start(self, host: str, comp: str) -> None:
        c = self._component(host, comp)
        if comp == "sshd" and not self.ssh_ports.get(host):
            self.run.host_dir(host).ssh_port_file.unlink(missing_ok=True)
        c.log.parent.mkdir(parents=True, exist_ok=True)
        with open(c.log, "ab") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} start {' '.join(c.argv)}\n".encode())
            log.flush()
            c.proc = subprocess.Popen(c.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      env=c.env, preexec_fn=_child_setup, close_fds=True)
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
                                        f"before answering; log {comp.log}:\n{_tail(comp.log)}")
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
                                    f"({last.get((h, c), 'no answer')}); log {log}:\n{_tail(log)}")
            time.sleep(0.1)
        if "engine" in comps:
            for h in hosts:
                self._engine_set_driver(h)

    def _probe(self, host: str, comp: str) -> tuple[bool, str]:
        hd = self.run.host_dir(host)
        if comp in ("engine", "ike"):
            sock = hd.engine_sock if comp == "engine" else hd.ike_sock
            try:
                reply = control_request(sock, {"op": "status"}, timeout=1.0)
            except OSError as exc:
                return False, f"{sock.name}: {exc.strerror or exc}"
            except ValueError as exc:
                return False, f"{sock.name}: {exc}"
            return (bool(reply.get("ok")), f"status answered {reply}")
        try:
            port = int(hd.ssh_port_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return False, f"no port in {hd.ssh_port_file.name} yet"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                banner = s.recv(256)
                if banner.startswith(b"SSH-2.0-"):
                    # say who we are before leaving, so the server logs a probe, not an error
                    s.sendall(b"SSH-2.0-twin_ready_probe\r\n")
        except OSError as exc:
            return False, f"127.0.0.1:{port}: {exc.strerror or exc}"
        if not banner.startswith(b"SSH-2.0-"):
            return False, f"127.0.0.1:{port}: banner {banner[:40]!r}"
        self.ssh_ports[host] = port
        self.info["hosts"][host]["ssh_port"] = port
        return True, "banner"

    def _engine_set_driver(self, host: str) -> None:
        state = read_json(self.run.host_dir(host).state_json, default={})
        drv = state.get("driver") or {}
        try:
            control_request(self.run.host_dir(host).engine_sock,
                            {"op": "set_driver", "loaded": bool(drv.get("loaded")),
                             "md5": drv.get("md5"), "name": drv.get("driver")}, timeout=2.0)
        except (OSError, ValueError) as exc:
            raise LabBuildError(f"{host}: engine set_driver: {exc}") from None

    def _write_known_hosts(self, hosts: list[str]) -> None:
        lines = []
        if "sshd" in self.enabled:
            for h in hosts:
                pub = Path(str(self.run.host_dir(h).ssh_host_key) + ".pub")
                try:
                    kind, b64 = pub.read_text().split()[:2]
                except (FileNotFoundError, ValueError):
                    raise LabBuildError(f"{h}: sshd: host key {pub} missing or malformed") from None
                lines.append(f"[127.0.0.1]:{self.ssh_ports[h]} {kind} {b64}\n")
        write_bytes_atomic(self.run.known_hosts, "".join(lines).encode())

    def _write_resolved(self) -> None:
        topo = json.loads(json.dumps(self.topo))  # deep copy, plain types
        topo.setdefault("lab", {})
        topo["lab"]["virtual"] = True
        topo["lab"]["known_hosts"] = str(self.run.known_hosts)
        for name, h in topo["hosts"].items():
            if h["role"] == "bench":
                h["mgmt"] = {"local": True, "netns": netns_name(self.prefix, name)}
            elif name in self.ssh_ports:
                old = h.get("mgmt") or {}
                h["mgmt"] = {"address": "127.0.0.1", "port": self.ssh_ports[name], "user": "root",
                             "key_file": str(self.run.client_key), "jump": None,
                             "connect_timeout": old.get("connect_timeout", 10),
                             "command_timeout": old.get("command_timeout", 60)}
        header = f"# resolved by twin.lab for prefix {self.prefix} from {self.topology_path}\n"
        write_bytes_atomic(self.run.resolved_yaml,
                           (header + yaml.safe_dump(topo, sort_keys=False)).encode())

    # ---- operations on a running lab

    def host_dir(self, name: str) -> HostDir:
        return self.run.host_dir(name)

    def topo_host(self, name: str) -> dict[str, Any]:
        """The host's entry in the topology (read back from the file for attached labs)."""
        if not self.topo:
            self.topo = yaml.safe_load(Path(self.info["topology"]).read_text())
        return self.topo["hosts"][name]

    @property
    def resolved(self) -> Path:
        return self.run.resolved_yaml

    def appliances(self) -> list[str]:
        return [h for h, v in self.info.get("hosts", {}).items() if v.get("role") == "appliance"]

    def fault(self, host: str, name: str, **params: Any) -> dict[str, Any]:
        """Switch a fault on for one appliance (see twin.faults.REGISTRY)."""
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
                                "use twin.supervisor.request_reboot()")
        hd = self.host_dir(host)
        self.info["hosts"][host]["state"] = "rebooting"
        self._save()
        if "engine" in self.enabled:
            try:
                control_request(hd.engine_sock, {"op": "reset"}, timeout=2.0)
            except (OSError, ValueError):
                pass  # a hung engine is stopped anyway
        recs = []
        for comp in self.enabled:
            c = self.components.pop((host, comp), None)
            recs.append(c.record if c else self.info["hosts"][host]["components"].get(comp))
        kill_records(recs)
        kill_netns_processes([netns_name(self.prefix, host)])
        for sock in (hd.engine_sock, hd.ike_sock):
            sock.unlink(missing_ok=True)
        # a reboot forgets runtime network changes and writable sysctls
        ports = [_port_spec(host, n, p or {}) for n, p in (self.topo_host(host).get("ports") or {}).items()]
        tn.reset_host_network(netns_name(self.prefix, host), ports)
        write_json_atomic(hd.sysctl_json, dict(DEFAULT_SYSCTLS))
        host_json = hd.read_host()
        boot_id = int(host_json.get("boot_id", 1)) + 1
        host_json["boot_id"] = boot_id
        write_json_atomic(hd.host_json, host_json)
        write_json_atomic(hd.state_json, boot_state(hd, host_json["driver"], host_json["module_file"], boot_id))
        time.sleep(pause)
        for comp in self.enabled:
            self._start(host, comp)
        self._wait_ready([host], self.enabled)
        self.info["hosts"][host]["state"] = "up"
        self._save()
        return boot_id

    def status(self) -> dict[str, Any]:
        """What exists now: namespaces, pids alive, ports."""
        info = self.run.read_lab() if self.run.lab_json.exists() else self.info
        out = {"prefix": info.get("prefix"), "run_dir": str(self.run.path), "state": info.get("state"),
               "supervisor_alive": alive(info.get("supervisor")),
               "namespaces": {ns: ns in tn.list_namespaces(self.prefix) for ns in info.get("namespaces", {}).values()},
               "hosts": {}}
        for h, v in info.get("hosts", {}).items():
            out["hosts"][h] = {"role": v.get("role"), "state": v.get("state"), "netns": v.get("netns"),
                               "ssh_port": v.get("ssh_port"), "ports": v.get("ports", {}),
                               "components": {c: {"pid": (r or {}).get("pid"), "alive": alive(r)}
                                              for c, r in (v.get("components") or {}).items()}}
        return out

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.owner:
            self.down()

    def down(self) -> None:
        """Stop every process, remove namespaces, links and the run dir.  Idempotent."""
        teardown(self.run, self.prefix, self.info or None, own=self.components)
        self.components.clear()


# ----------------------------------------------------------------------------- helpers


def _find(module: str):
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None


def available_components() -> tuple[str, ...]:
    """Components whose modules are installed (the others are not started)."""
    return tuple(c for c in ALL_COMPONENTS if _find(COMPONENT_MODULES[c]) is not None)


def control_request(sock_path: Path, request: dict[str, Any], timeout: float = 2.0) -> dict[str, Any]:
    """One JSON-lines request/response on a component's control socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(sock_path))
        s.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    if not buf.strip():
        raise ValueError("empty reply")
    return json.loads(buf.splitlines()[0])


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no log)"


def _free_prefix() -> str:
    for _ in range(50):
        p = new_prefix()
        if not tn.list_namespaces(p) and not (INDEX_DIR / p).exists() and not RunDir.for_prefix(p).path.exists():
            return p
    raise LabBuildError("no free prefix found in 50 tries")


def _write_client_key(run: RunDir) -> None:
    """An ed25519 client key in OpenSSH format (private 0600, public beside it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    key = Ed25519PrivateKey.generate()
    priv = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                             serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    write_bytes_atomic(run.client_key, priv, mode=0o600)
    write_bytes_atomic(run.client_pub, pub + b" twin-client\n", mode=0o644)


def _index_add(prefix: str, rd: RunDir) -> None:
    INDEX_DIR.mkdir(parents=True, exist_ok=True)
    link = INDEX_DIR / prefix
    link.unlink(missing_ok=True)
    link.symlink_to(rd.path.resolve())


def find_run(run_dir: str | os.PathLike[str] | None = None, prefix: str | None = None) -> RunDir:
    """The run dir of a lab given either its dir or its prefix (index, then default base)."""
    if run_dir:
        rd = RunDir(run_dir)
    elif prefix:
        check_prefix(prefix)
        link = INDEX_DIR / prefix
        rd = RunDir(os.readlink(link)) if link.is_symlink() else RunDir.for_prefix(prefix)
    else:
        runs = list_runs()
        live = [r for r in runs if alive(read_json(r.lab_json, default={}).get("supervisor"))]
        if len(live) != 1:
            raise LabBuildError(f"give --prefix or --run-dir: {len(live)} live labs "
                                f"({', '.join(str(r.path) for r in live) or 'none'})")
        rd = live[0]
    if not rd.lab_json.exists():
        raise LabBuildError(f"{rd.lab_json}: no lab there")
    return rd


def list_runs() -> list[RunDir]:
    """Every known run: the index's symlinks and dirs under the default base."""
    seen: dict[str, RunDir] = {}
    if INDEX_DIR.is_dir():
        for link in INDEX_DIR.iterdir():
            if link.is_symlink():
                seen[link.name] = RunDir(os.readlink(link))
    if DEFAULT_BASE.is_dir():
        for d in DEFAULT_BASE.iterdir():
            if d.name not in seen and (d / "lab.json").exists():
                seen[d.name] = RunDir(d)
    return [seen[k] for k in sorted(seen)]


def run_is_dead(info: dict[str, Any]) -> bool:
    """A run is dead when its supervisor is gone, or its owner (e.g. pytest) is gone."""
    if not alive(info.get("supervisor")):
        return True
    owner = info.get("owner")
    return bool(owner) and not alive(owner)


def teardown(run: RunDir, prefix: str, info: dict[str, Any] | None,
             own: dict[tuple[str, str], Component] | None = None) -> None:
    """Remove one run completely: processes, namespaces, links, run dir, index entry."""
    if info is None:
        info = read_json(run.lab_json, default={}) or {}
    recs = [comp.record for comp in (own or {}).values()]
    for h in (info.get("hosts") or {}).values():
        recs += list((h.get("components") or {}).values())
    kill_records(recs)
    kill_netns_processes(tn.list_namespaces(prefix))
    tn.destroy_prefix(prefix)
    if run.path.exists():
        shutil.rmtree(run.path, ignore_errors=True)
    link = INDEX_DIR / prefix
    if link.is_symlink() and Path(os.readlink(link)) == run.path.resolve():
        link.unlink(missing_ok=True)


def cleanup_dead() -> list[str]:
    """Tear down every run whose supervisor (or owner) is dead.  Returns their prefixes.

    Only runs with a lab.json are touched: namespaces of other tools that happen to
    share the `tw` naming are never removed by a guess.
    """
    done = []
    if INDEX_DIR.is_dir():
        for link in INDEX_DIR.iterdir():
            if link.is_symlink() and not Path(os.readlink(link)).exists():
                link.unlink(missing_ok=True)  # dangling index entry
    for rd in list_runs():
        try:
            info = read_json(rd.lab_json, default=None)
        except (ValueError, OSError):
            continue  # half-written by a build in progress, or not ours to judge
        if not isinstance(info, dict) or "prefix" not in info:
            continue
        if info.get("supervisor", {}).get("pid") == os.getpid():
            continue
        if run_is_dead(info):
            kill_record(info.get("supervisor"))
            teardown(rd, info["prefix"], info)
            done.append(info["prefix"])
    return done
