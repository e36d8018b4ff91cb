"""Shared plumbing of the FreeBSD commands: host dir files, engine requests, output.

Why one module: every command needs the same four things (its host dir, the JSON state
files, one round trip to the engine, FreeBSD-style error exits) and must stay cheap to
import, so this is stdlib only.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ipsec_hil_twin.errors import EngineError
from ipsec_hil_twin.faults import HostFaults
from ipsec_hil_twin.machinery.runtime import HostDir, read_json, write_json_atomic

TYPE_CHECKING = False  # typing is not imported at run time: every emulated command pays for its imports
if TYPE_CHECKING:
    from typing import Any

__all__ = ["EngineError"]  # the commands catch c.EngineError

ENGINE_TIMEOUT = 10.0

DEFAULT_MODULES: list[dict[str, Any]] = [
    {"name": "kernel", "file": "/boot/kernel/kernel", "size": 0x1F3E2D0, "refs": 62,
     "address": "0xffffffff80200000"},
    {"name": "ipsec.ko", "file": "/boot/kernel/ipsec.ko", "size": 0x5B2F8, "refs": 1,
     "address": "0xffffffff82a00000"},
]
"""What a freshly booted OPNsense has loaded that matters here (kernel + ipsec.ko)."""


def host_dir() -> HostDir:
    """The appliance this command runs on ($TWIN_HOST_DIR, set by the bin/ wrappers)."""
    return HostDir.from_env()


def err(prog: str, msg: str) -> None:
    sys.stderr.write(f"{prog}: {msg}\n")


def option_letters(prog: str, word: str, known: str, usage: str) -> str | None:
    """The letters of one option word (`-rv` -> "rv"); None after FreeBSD's getopt
    complaint (`prog: illegal option -- x` and the usage text) for a letter not in `known`."""
    for ch in word[1:]:
        if ch not in known:
            sys.stderr.write(f"{prog}: illegal option -- {ch}\n{usage}")
            return None
    return word[1:]


def host_info(hd: HostDir) -> dict[str, Any]:
    return read_json(hd.host_json, default={})


def load_state(hd: HostDir) -> dict[str, Any]:
    """state.json: {"boot_time": float, "modules": [...], "driver": {...}|null}.

    Missing keys get a freshly-booted default so a partially written lab still works;
    boot_time then falls back to host.json's mtime (when the lab built this host).
    """
    st = read_json(hd.state_json, default={})
    if not isinstance(st, dict):
        raise ValueError(f"{hd.state_json}: expected a JSON object")
    if "modules" not in st:
        st["modules"] = [dict(m) for m in DEFAULT_MODULES]
    if "boot_time" not in st:
        try:
            st["boot_time"] = hd.host_json.stat().st_mtime
        except OSError:
            st["boot_time"] = time.time()
    st.setdefault("driver", None)
    return st


def save_state(hd: HostDir, st: dict[str, Any]) -> None:
    write_json_atomic(hd.state_json, st)


def module_loaded(st: dict[str, Any], name: str) -> bool:
    """Is a kernel module loaded?  `name` as module (`ipsec`) or file name (`ipsec.ko`)."""
    base = name[:-3] if name.endswith(".ko") else name
    return any(m.get("name") in (base, base + ".ko") for m in st.get("modules", []))


def driver_loaded(hd: HostDir, st: dict[str, Any] | None = None) -> bool:
    """The offload driver module of this host's model is loaded."""
    st = st if st is not None else load_state(hd)
    drv = host_info(hd).get("driver")
    if not drv:
        return False
    return module_loaded(st, drv)


def load_sysctls(hd: HostDir) -> dict[str, Any]:
    data = read_json(hd.sysctl_json, default={})
    if not isinstance(data, dict):
        raise ValueError(f"{hd.sysctl_json}: expected a JSON object")
    return data


def save_sysctls(hd: HostDir, data: dict[str, Any]) -> None:
    write_json_atomic(hd.sysctl_json, data)


def active_faults(hd: HostDir) -> dict[str, Any]:
    """The faults switched on for this appliance, read as the engine reads them."""
    return HostFaults(hd, reader=Path(sys.argv[0]).name or "fbsd").active()


def engine(hd: HostDir, request: dict[str, Any], timeout: float = ENGINE_TIMEOUT) -> dict[str, Any]:
    """One JSON-lines round trip to DIR/engine.sock; raises EngineError on failure."""
    from ipsec_hil_twin.engine.client import engine_request  # here: commands that never ask the engine skip socket's import

    return engine_request(hd.engine_sock, request, timeout)


def appliance_path(hd: HostDir, path: str) -> Path:
    """Where an appliance absolute path lives on the host (DIR/root/...).

    The commands normally run inside the appliance's mount namespace where this is the
    same file; mapping explicitly keeps them correct when run directly in tests.
    """
    if not path.startswith("/"):
        return Path(os.getcwd()) / path
    return hd.rootpath(path)


def log_dmesg(hd: HostDir, lines: list[str]) -> None:
    """Append kernel messages to /var/log/dmesg.txt of the appliance."""
    p = hd.rootpath("/var/log/dmesg.txt")
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line.rstrip("\n") + "\n")


def run_main(fn) -> None:
    """Entry point wrapper: exit with fn's status; a broken pipe is silent as in C."""
    try:
        rc = fn(sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:
        try:
            sys.stdout = None  # type: ignore[assignment]
        except Exception:  # noqa: BLE001
            pass
        rc = 1
    sys.exit(rc)
