"""Runs of the virtual lab on this machine: where they live, how to find and remove them.

Why apart from the Lab class: the CLI (`python -m ipsec_hil_twin down/status/cleanup`), the
supervisor and the project's tests find, judge and tear down runs they did not start,
from lab.json alone -- even after the process that built the lab crashed.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipsec_hil_twin import jsonl
from ipsec_hil_twin.machinery import netns as tn
from ipsec_hil_twin.errors import LabBuildError
from ipsec_hil_twin.machinery.labprocs import alive, kill_netns_processes, kill_record, kill_records
from ipsec_hil_twin.machinery.runtime import DEFAULT_BASE, HostDir, RunDir, check_prefix, new_prefix, read_json

if TYPE_CHECKING:
    from ipsec_hil_twin.machinery.prefork import WarmProcess

ALL_COMPONENTS = ("engine", "ike", "sshd")
COMPONENT_MODULES = {"engine": "ipsec_hil_twin.engine.__main__", "ike": "ipsec_hil_twin.ike.daemon", "sshd": "ipsec_hil_twin.shell.sshd"}
INDEX_DIR = DEFAULT_BASE / ".index"
"""Symlinks prefix -> run dir, so runs outside the default base are found for cleanup."""


@dataclass
class Component:
    """One process of an appliance (engine, ike or sshd) as the lab started it."""

    host: str
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str]
    proc: "subprocess.Popen | WarmProcess | None" = None
    """Popen, or ipsec_hil_twin.machinery.prefork's WarmProcess for a component forked warm: pid, returncode, poll()."""
    record: dict[str, Any] = field(default_factory=dict)



def find_module(module: str):
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None


def available_components() -> tuple[str, ...]:
    """Components whose modules are installed (the others are not started)."""
    return tuple(c for c in ALL_COMPONENTS if find_module(COMPONENT_MODULES[c]) is not None)


def control_request(sock_path: Path, request: dict[str, Any], timeout: float = 2.0) -> dict[str, Any]:
    """One request/answer on a component's control socket (ipsec_hil_twin.jsonl); a socket that
    cannot be reached or answers nonsense raises ControlSocketError (an OSError)."""
    return jsonl.request(sock_path, request, timeout=timeout)


def log_tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no log)"


def free_prefix() -> str:
    for _ in range(50):
        p = new_prefix()
        if not tn.list_namespaces(p) and not (INDEX_DIR / p).exists() and not RunDir.for_prefix(p).path.exists():
            return p
    raise LabBuildError("no free prefix found in 50 tries")


def index_add(prefix: str, rd: RunDir) -> None:
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


def probe(hd: HostDir, comp: str) -> tuple[bool, str, int | None]:
    """Is one component of an appliance serving?  (ok, why not, the SSH port if known)."""
    if comp in ("engine", "ike"):
        sock = hd.engine_sock if comp == "engine" else hd.ike_sock
        try:
            reply = control_request(sock, {"op": "status"}, timeout=1.0)
        except OSError as exc:
            return False, f"{sock.name}: {exc.strerror or exc}", None
        return bool(reply.get("ok")), f"status answered {reply}", None
    try:
        port = int(hd.ssh_port_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False, f"no port in {hd.ssh_port_file.name} yet", None
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            banner = s.recv(256)
            if banner.startswith(b"SSH-2.0-"):
                # say who we are before leaving, so the server logs a probe, not an error
                s.sendall(b"SSH-2.0-twin_ready_probe\r\n")
    except OSError as exc:
        return False, f"127.0.0.1:{port}: {exc.strerror or exc}", None
    if not banner.startswith(b"SSH-2.0-"):
        return False, f"127.0.0.1:{port}: banner {banner[:40]!r}", None
    return True, "banner", port


def run_status(run: RunDir, prefix: str, info: dict[str, Any]) -> dict[str, Any]:
    """What exists now of a run: namespaces, pids alive, ports."""
    if run.lab_json.exists():
        info = run.read_lab()
    out = {"prefix": info.get("prefix"), "run_dir": str(run.path), "state": info.get("state"),
           "supervisor_alive": alive(info.get("supervisor")),
           "namespaces": {ns: ns in tn.list_namespaces(prefix) for ns in info.get("namespaces", {}).values()},
           "hosts": {}}
    for h, v in info.get("hosts", {}).items():
        out["hosts"][h] = {"role": v.get("role"), "state": v.get("state"), "netns": v.get("netns"),
                           "ssh_port": v.get("ssh_port"), "ports": v.get("ports", {}),
                           "components": {c: {"pid": (r or {}).get("pid"), "alive": alive(r)}
                                          for c, r in (v.get("components") or {}).items()}}
    return out
