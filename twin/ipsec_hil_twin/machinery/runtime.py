"""Paths and names shared by every part of the virtual lab.

Why this module exists: the lab builder (ipsec_hil_twin.lifecycle.lab), the ESP engine, the IKE daemon,
the SSH server and the FreeBSD command wrappers all meet in one directory tree per
run.  Each part must agree on file names without importing each other, so the layout
lives here and nowhere else.  It is pure stdlib and cheap to import because every
emulated FreeBSD command (sysctl, netstat, ...) imports it on each invocation.

Layout (DESIGN.md "The virtual lab at run time")::

    RUN/                      default /run/ipsec-twin/<prefix>
      lab.json                prefix, namespaces, links, pids (written by ipsec_hil_twin.lifecycle.lab)
      lab.resolved.yaml       topology with real management access filled in
      known_hosts             [127.0.0.1]:PORT ssh-ed25519 ...
      id_ed25519(.pub)        client key the suite logs in with
      supervisor.sock         reboot requests
      supervisor.log
      hosts/<name>/           one HostDir per appliance
        host.json root/ bin/ engine.sock ike.sock faults.json sysctl.json state.json
        sshd.port ssh_host_ed25519_key log/
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ipsec_hil_twin.errors import RuntimeLayoutError

TYPE_CHECKING = False  # not typing's: each emulated command imports this module (tests/twin_shell/test_command_imports.py)
if TYPE_CHECKING:
    import subprocess
    from typing import Any

DEFAULT_BASE = Path("/run/ipsec-twin")
"""Where run dirs live unless the caller chooses one (one subdir per prefix)."""

HOST_DIR_ENV = "TWIN_HOST_DIR"
"""Environment variable the bin/ wrappers set so a command finds its host dir."""

PREFIX_RE = re.compile(r"^tw[0-9a-f]{4}$")
"""A lab prefix: short enough that `P<n>a` veth names stay within IFNAMSIZ (15)."""

IFNAMSIZ_MAX = 15


def new_prefix() -> str:
    """A fresh per-run prefix `tw` + 4 hex digits (e.g. `tw3f9a`).

    Random rather than counted so labs started by unrelated processes at the same
    time do not collide; callers still check for an existing namespace/run dir.
    """
    import secrets  # here: the emulated commands never make a prefix

    return "tw" + secrets.token_hex(2)


def check_prefix(prefix: str) -> str:
    """Return `prefix` if it is a valid lab prefix, else raise naming the rule."""
    if not PREFIX_RE.match(prefix or ""):
        raise RuntimeLayoutError(
            f"prefix {prefix!r}: expected 'tw' followed by 4 lowercase hex digits, e.g. 'tw3f9a'"
        )
    return prefix


def netns_name(prefix: str, host: str) -> str:
    """Namespace of one lab host: `P-<host>`."""
    return f"{prefix}-{host}"


def veth_name(prefix: str, index: int, side: str) -> str:
    """Root-namespace name of one veth end: `P<n>a` / `P<n>b` (<= 15 chars)."""
    if side not in ("a", "b"):
        raise RuntimeLayoutError(f"veth side {side!r}: expected 'a' or 'b'")
    name = f"{prefix}{index}{side}"
    if len(name) > IFNAMSIZ_MAX:
        raise RuntimeLayoutError(f"veth name {name!r} longer than {IFNAMSIZ_MAX} characters")
    return name


def read_json(path: str | os.PathLike[str], default: Any = ...) -> Any:
    """Read a JSON file; return `default` if it is missing (raise if no default).

    A malformed file raises ValueError naming the file, so a half-written file
    never turns into a silent empty dict.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        if default is ...:
            raise
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}:{exc.lineno}: invalid JSON: {exc.msg}") from None


def write_json_atomic(path: str | os.PathLike[str], obj: Any, mode: int = 0o644) -> None:
    """Write JSON via a temp file + rename so readers never see a partial file."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode(), mode)


def _exclusive_temp(p: Path) -> tuple[int, str]:
    """``tempfile.mkstemp`` beside ``p`` without importing tempfile (random, shutil, hashlib:
    the emulated commands write counters on every run and paid ~5 ms for the import)."""
    for _ in range(100):
        tmp = os.path.join(os.fspath(p.parent), f".{p.name}.{os.urandom(6).hex()}")
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{p.parent}: no free temporary name for {p.name}")


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Write bytes via a temp file in the same directory + fsync + rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _exclusive_temp(p)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ----------------------------------------------------------------------------- processes
# For the test beds that start components themselves (ipsec_hil_twin.engine.minilab,
# ipsec_hil_twin.ike.pairlab, ipsec_hil_twin.bench, tests); ipsec_hil_twin.lifecycle.lab keeps pid records of its own.


def stop_process(proc: "subprocess.Popen", timeout: float = 5.0) -> int | None:
    """SIGTERM a child, wait up to `timeout`, then SIGKILL it; returns its exit status.

    Why SIGTERM first: the engine and the IKE daemon remove their associations and
    sockets on SIGTERM, so the next test starts from a clean host dir.
    """
    import signal
    import subprocess

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def wait_for_socket(path: str | os.PathLike[str], proc: "subprocess.Popen", what: str,
                    log: str | os.PathLike[str] | None = None, timeout: float = 15.0) -> None:
    """Return once `path` accepts a connection; raise naming `what` when `proc` died first
    (with the tail of its `log`) or after `timeout` seconds."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    while True:
        if os.path.exists(path):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                if s.connect_ex(os.fspath(path)) == 0:  # else bound but not yet listening
                    return
        if proc.poll() is not None:
            tail = Path(log).read_text(errors="replace")[-2000:] if log else ""
            raise RuntimeError(f"{what} exited with status {proc.returncode} before {path} answered: {tail}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {path} did not answer within {timeout:.0f} s")
        time.sleep(0.05)


class HostDir:
    """One emulated appliance's directory (`RUN/hosts/<name>/`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @classmethod
    def from_env(cls) -> "HostDir":
        """The host dir named by $TWIN_HOST_DIR (set by the bin/ wrappers)."""
        value = os.environ.get(HOST_DIR_ENV)
        if not value:
            raise RuntimeLayoutError(f"${HOST_DIR_ENV} is not set: run this inside a twin host")
        return cls(value)

    def __repr__(self) -> str:
        return f"HostDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def host_json(self) -> Path:
        return self.path / "host.json"

    @property
    def root(self) -> Path:
        """The appliance's filesystem; SFTP and the shell map absolute paths into it."""
        return self.path / "root"

    @property
    def bin(self) -> Path:
        """FreeBSD command wrappers, first on PATH in the appliance shell."""
        return self.path / "bin"

    @property
    def engine_sock(self) -> Path:
        return self.path / "engine.sock"

    @property
    def ike_sock(self) -> Path:
        return self.path / "ike.sock"

    @property
    def cmd_sock(self) -> Path:
        """The appliance's command server (ipsec_hil_twin.shell.cmdserver), while its SSH server runs."""
        return self.path / "cmd.sock"

    @property
    def faults_json(self) -> Path:
        return self.path / "faults.json"

    @property
    def sysctl_json(self) -> Path:
        return self.path / "sysctl.json"

    @property
    def state_json(self) -> Path:
        return self.path / "state.json"

    @property
    def ssh_port_file(self) -> Path:
        """Written by ipsec_hil_twin.shell.sshd once listening: the decimal TCP port on 127.0.0.1."""
        return self.path / "sshd.port"

    @property
    def ssh_host_key(self) -> Path:
        """The appliance's SSH host key (kept across reboots so known_hosts stays valid)."""
        return self.path / "ssh_host_ed25519_key"

    @property
    def log_dir(self) -> Path:
        """stdout/stderr of this host's component processes."""
        return self.path / "log"

    def rootpath(self, absolute: str) -> Path:
        """Map an appliance absolute path (`/usr/local/etc/...`) into root/."""
        rel = absolute.lstrip("/")
        return self.root / rel

    def read_host(self) -> dict[str, Any]:
        return read_json(self.host_json)


class RunDir:
    """One lab run's directory (default `/run/ipsec-twin/<prefix>`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @classmethod
    def for_prefix(cls, prefix: str, base: str | os.PathLike[str] | None = None) -> "RunDir":
        """The run dir of `prefix` under `base` (default /run/ipsec-twin)."""
        root = Path(base) if base is not None else DEFAULT_BASE
        return cls(root / check_prefix(prefix))

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def hosts_dir(self) -> Path:
        return self.path / "hosts"

    def host_dir(self, name: str) -> HostDir:
        if not name or "/" in name or name in (".", ".."):
            raise RuntimeLayoutError(f"host name {name!r} cannot be a directory name")
        return HostDir(self.hosts_dir / name)

    def host_dirs(self) -> list[HostDir]:
        if not self.hosts_dir.is_dir():
            return []
        return [HostDir(p) for p in sorted(self.hosts_dir.iterdir()) if p.is_dir()]

    @property
    def lab_json(self) -> Path:
        return self.path / "lab.json"

    @property
    def resolved_yaml(self) -> Path:
        return self.path / "lab.resolved.yaml"

    @property
    def known_hosts(self) -> Path:
        return self.path / "known_hosts"

    @property
    def client_key(self) -> Path:
        """Private ed25519 key (OpenSSH format) the suite logs in with."""
        return self.path / "id_ed25519"

    @property
    def client_pub(self) -> Path:
        return self.path / "id_ed25519.pub"

    @property
    def supervisor_sock(self) -> Path:
        return self.path / "supervisor.sock"

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"

    def read_lab(self) -> dict[str, Any]:
        return read_json(self.lab_json)
