"""Start and stop the virtual lab from the plugin -- as a process, never as an import.

Why a subprocess: the plugin must talk to the twin exactly as to hardware (over SSH and
the network), so it may not import ``twin``. This module is the one place that knows a
lab is virtual: it runs ``python -m ipsec_hil_twin up TOPOLOGY --owner-pid PID`` and reads back the
resolved lab file (management access filled in), which the rest of the suite loads like
any hardware lab file. ``--owner-pid`` makes the twin's supervisor tear the lab down if
pytest dies without calling :func:`stop` (SIGKILL, crash), so no namespace outlives a run.
"""

from __future__ import annotations

import json
import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.topology import Topology

log = logging.getLogger(__name__)

#: The directory holding the suite's package (``plugin/`` in a checkout, site-packages
#: installed): the twin's interpreter finds its one suite import (the topology model) there.
SOURCE_ROOT = Path(__file__).resolve().parents[1]
#: the name of a running lab's resolved file in its run directory (the twin's contract:
#: docs/DESIGN.md, "The virtual lab at run time")
RESOLVED_NAME = "lab.resolved.yaml"


class VirtualLabError(LabError):
    """The virtual lab did not come up (or down); the message carries the twin's stderr."""


@dataclass(frozen=True)
class VirtualLab:
    """A running virtual lab: where its resolved lab file is and how to name it."""

    topology: Path
    resolved: Path
    prefix: str
    run_dir: Path

    def to_dict(self) -> dict[str, str]:
        """Plain strings, for an xdist worker's ``workerinput`` (ipsec_hil.context)."""
        return {"topology": str(self.topology), "resolved": str(self.resolved), "prefix": self.prefix,
                "run_dir": str(self.run_dir)}

    @classmethod
    def from_dict(cls, d: dict[str, str]) -> VirtualLab:
        return cls(Path(d["topology"]), Path(d["resolved"]), d["prefix"], Path(d["run_dir"]))

    @classmethod
    def of_resolved_file(cls, topology: Topology) -> VirtualLab | None:
        """The running lab whose resolved file ``topology`` is, or None.

        A lab started by hand (``python -m ipsec_hil_twin up``) and given as ``--topology
        RUN_DIR/lab.resolved.yaml``: its run directory holds the file, so lab controls
        (faults, ``twin seq``) reach it as they reach a lab the run started itself.
        """
        source = topology.source
        if topology.lab.virtual and is_running_lab(topology) and source is not None and source.name == RESOLVED_NAME:
            return cls(Path(""), source, source.parent.name, source.parent)
        return None

    def twin(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """Run ``python -m ipsec_hil_twin ARGS --run-dir RUN_DIR`` (fault, reboot, status)."""
        return _twin([*args[:1], "--run-dir", str(self.run_dir), *args[1:]], timeout=timeout)


def is_running_lab(topology: Topology) -> bool:
    """A virtual lab file whose appliances all have management access filled in is the
    resolved file of a lab that is already running (``python -m ipsec_hil_twin up`` wrote it): use it
    as it is, like a hardware lab, instead of starting another one."""
    apps = topology.appliances()
    return bool(apps) and all(h.mgmt.address for h in apps)


def _twin_roots() -> list[str]:
    """Where ``python -m ipsec_hil_twin`` finds its packages: the suite's root, and the twin's
    root located without importing it (the suite never imports the twin)."""
    roots = [str(SOURCE_ROOT)]
    spec = importlib.util.find_spec("ipsec_hil_twin")
    if spec is None or not spec.submodule_search_locations:
        raise VirtualLabError("the virtual lab's package ipsec_hil_twin is not installed "
                              "(pip install ipsec-hil, or tools/setup in a checkout)")
    twin_root = str(Path(next(iter(spec.submodule_search_locations))).resolve().parent)
    if twin_root not in roots:
        roots.append(twin_root)
    return roots


def _twin(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*_twin_roots(), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "ipsec_hil_twin", *args],
        cwd=str(SOURCE_ROOT),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start(topology: Path, *, owner_pid: int | None = None, timeout: float = 180.0,
          components: Sequence[str] | None = None, run_dir: Path | None = None) -> VirtualLab:
    """Build the lab of ``topology`` and return it once every component answers.

    ``components`` (e.g. ``("engine", "sshd")``) starts only those of the twin's
    components -- a test that needs no IKE saves the daemons' start; default: all.
    ``run_dir`` puts the lab's state where the caller wants it (a test's tmp directory,
    kept for reading after a failure); default: the twin's own per-prefix directory.
    """
    if os.geteuid() != 0:
        raise VirtualLabError(
            "the virtual lab needs root (network namespaces, TUN devices): run as root, "
            "or point --topology at a hardware lab file"
        )
    args = ["up", str(topology), "--timeout", str(timeout)]
    if owner_pid:
        args += ["--owner-pid", str(owner_pid)]
    if components:
        args += ["--components", ",".join(components)]
    if run_dir is not None:
        args += ["--run-dir", str(run_dir)]
    try:
        res = _twin(args, timeout=timeout + 30)
    except subprocess.TimeoutExpired as exc:
        raise VirtualLabError(f"python -m ipsec_hil_twin up {topology}: no answer within {exc.timeout:.0f} s") from None
    if res.returncode != 0:
        raise VirtualLabError(
            f"python -m ipsec_hil_twin up {topology} failed (exit {res.returncode}): "
            + (res.stderr.strip() or res.stdout.strip() or "no message")
        )
    try:
        info = json.loads(res.stdout.strip().splitlines()[-1])
        lab = VirtualLab(Path(topology), Path(info["resolved"]), info["prefix"], Path(info["run_dir"]))
    except (ValueError, IndexError, KeyError) as exc:
        raise VirtualLabError(f"python -m ipsec_hil_twin up printed no lab description ({exc}): {res.stdout[-500:]!r}") from None
    log.info("virtual lab %s up (run dir %s)", lab.prefix, lab.run_dir)
    return lab


def stop(lab: VirtualLab, timeout: float = 120.0) -> None:
    """Tear the lab down; raise if the twin says it could not. Its bench's files in this
    machine's /var/lib go with it (:func:`forget_bench_files`)."""
    namespaces = _namespaces(lab)
    res = _twin(["down", "--run-dir", str(lab.run_dir)], timeout=timeout)
    if res.returncode != 0:
        raise VirtualLabError(f"python -m ipsec_hil_twin down {lab.prefix} failed: {res.stderr.strip()}")
    log.info("virtual lab %s down", lab.prefix)
    forget_bench_files(namespaces)


def _namespaces(lab: VirtualLab) -> list[str]:
    """The lab's network namespaces (its lab.json), read before it goes."""
    try:
        return list(json.loads((lab.run_dir / "lab.json").read_text())["namespaces"].values())
    except (OSError, ValueError, KeyError, AttributeError):
        return []


def forget_bench_files(namespaces: Sequence[str]) -> None:
    """Remove what a stopped lab's bench left in this machine's /var/lib: its lease file
    (and the notes beside it) and its journal (sharing.lock.bench_lock_path,
    traffic.bench_routes.bench_journal_dir). Why: a virtual lab's bench is a namespace of
    this machine, and each lab (a fault-matrix part, a developer's) had files of its own
    there that outlived it, one more pair per lab ever run. The routes its journal undid
    died with the namespace."""
    import glob
    import shutil

    from ipsec_hil.lab.sharing.lock import bench_lock_path
    from ipsec_hil.lab.traffic.bench_routes import bench_journal_dir

    for ns in namespaces:
        where = _Netns(ns)
        lock = bench_lock_path(where)  # type: ignore[arg-type]
        for path in [lock, *glob.glob(glob.escape(lock) + ".*")]:
            try:
                os.unlink(path)
            except OSError:
                pass
        shutil.rmtree(bench_journal_dir(where), ignore_errors=True)


@dataclass(frozen=True)
class _Netns:
    """What bench_lock_path and bench_journal_dir read of a host: its namespace."""

    netns: str
