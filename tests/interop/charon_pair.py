"""Two real strongSwan 5.9.8 daemons (Debian's charon-systemd) standing in for two appliances.

Why this shape: the suite provisions appliances through a ``Host`` (``/bin/sh -s`` plus file
operations) at OPNsense's paths (``/usr/local/etc/swanctl``, the journal in
``/var/db/ipsec-hil``). Each gateway here is a network namespace AND a private mount
namespace, held open by one process, in which those real paths exist privately:

- ``/usr/local/etc`` is a tmpfs holding ``swanctl/`` (OPNsense's ``swanctl.conf`` ending with
  ``include conf.d/*.conf``, and ``conf.d/``), bind-mounted over Debian's ``/etc/swanctl`` so
  the stock ``swanctl --load-all`` reads what the suite wrote at the FreeBSD path;
- ``/etc/strongswan.conf`` is this gateway's own (plugins, log file, vici socket in the run
  directory, so two daemons never meet);
- ``/var`` is an overlay whose upper layer is a tmpfs (the journal dir is created privately,
  the machine's /var is never written); ``/run`` is a tmpfs.

:class:`NamespaceHost` is ``ipsec_hil.lab.remote.LocalHost`` entering that namespace pair with
``nsenter`` (scripts on stdin of ``/bin/sh -s`` as always); its file operations run as sh
inside the namespace too, as SFTP does on an appliance. Only this machine's kernel has no
ESP: charon uses kernel-libipsec (ESP in user space, a TUN device, routes in table 220), which
always encapsulates ESP in UDP 4500.

Ports are named as the topology names them (``wan10g``, ``port8`` joined by veths between
the two gateways; LAN ports ``lan``/``f1`` are veths whose other end stays inside), because
the provisioner addresses an appliance's ports by those names.

Nothing outlives the run: the namespaces are not named (``ip netns``) but held by one process
per gateway (``unshare --net --mount``, argv[0] ``<prefix>-<side>-holder``; the daemons are
``<prefix>-<side>-charon``, so ``pgrep -f PREFIX`` finds all of them); the namespaces, their
veths and mounts vanish with the holder. :meth:`CharonPair.close` stops the processes, also
after a failed start, and the holders and daemons get SIGTERM when the test process itself
dies (PR_SET_PDEATHSIG): a SIGKILLed pytest leaves nothing behind either.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ipsec_hil.lab.errors import LabError, TransportError
from ipsec_hil.lab.parsers import swanctl_list_sas
from ipsec_hil.lab.remote import LocalHost, RunResult

log = logging.getLogger(__name__)

CHARON = "/usr/sbin/charon-systemd"
SWANCTL = "/usr/sbin/swanctl"
LIBIPSEC = "/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"
PLUGINS = ("random nonce aes sha1 sha2 hmac gcm kdf openssl pem pkcs1 x509 pubkey "
           "kernel-libipsec kernel-netlink socket-default vici")
SWANCTL_PLUGINS = "random nonce aes sha1 sha2 hmac gcm openssl pem pkcs1 x509 pubkey"
SWANCTL_DIR = "/usr/local/etc/swanctl"
JOURNAL_ROOT = "/var/db/ipsec-hil"
START_TIMEOUT = 20.0

#: argv prefix: SIGTERM when the test process dies (a killed run leaves no daemon; the
#: death signal survives the exec chain setpriv -> unshare -> bash -> sleep / nsenter ->
#: charon). setpriv (util-linux), not a Python preexec_fn: a preexec_fn runs in the forked
#: child of a threaded pytest, and once the labgrid tests had loaded gRPC into the worker
#: the child died before its exec ("epoll_wait error: Bad file descriptor"; CI: 34 errors).
DIE_WITH_PYTEST = ["setpriv", "--pdeathsig", "TERM"]


def missing_tools() -> list[str]:
    """What this machine lacks for a pair (empty: ready)."""
    need = [CHARON, SWANCTL, LIBIPSEC] + [shutil.which(t) or t for t in ("ip", "nsenter", "unshare", "bash", "setpriv")]
    return [n for n in need if not os.path.exists(n)]


# --------------------------------------------------------------------------- the Host


class NamespaceHost(LocalHost):
    """The gateway as the suite's provisioner sees an appliance: sh scripts and files, all
    inside the gateway's network and mount namespaces (``nsenter`` into the holder process).

    Files go through sh as well (not this process's view of the file system): the real
    paths exist only inside the gateway's mount namespace.
    """

    def __init__(self, name: str, holder_pid: int, command_timeout: float = 60) -> None:
        super().__init__(name, netns=None, command_timeout=command_timeout)
        self.holder_pid = holder_pid

    def __repr__(self) -> str:
        return f"NamespaceHost({self.name!r}, holder={self.holder_pid})"

    def _argv(self, *sh: str) -> list[str]:
        return ["nsenter", f"--target={self.holder_pid}", "--mount", "--net", *sh]

    def _sh(self, script: str, what: str, stdin: bytes | None = None) -> RunResult:
        return self.run(script, stdin=stdin).check(what)

    def read_file(self, path: str) -> bytes:
        r = self._sh(f"cat -- {shlex.quote(path)}", f"read {path}")
        return r.stdout.encode("utf-8", "surrogateescape")

    def write_file_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        d, base = os.path.split(path)
        template = f"{d or '.'}/.{base}.tmp-XXXXXXXX"
        self._sh(
            f"p={shlex.quote(path)}\n"
            f"t=$(mktemp {shlex.quote(template)}) || exit 70\n"
            f'chmod {mode & 0o7777:o} "$t" && cat > "$t" && mv -f "$t" "$p" || {{ rm -f "$t"; exit 71; }}\n',
            f"write {path}", stdin=data)

    def exists(self, path: str) -> bool:
        q = shlex.quote(path)
        r = self.run(f"if [ -e {q} ] || [ -L {q} ]; then echo yes; else echo no; fi").check(f"stat {path}")
        return r.stdout.strip() == "yes"

    def remove(self, path: str, missing_ok: bool = True) -> None:
        if not missing_ok and not self.exists(path):
            raise TransportError(f"{self.name}: {path}: no such file")
        self._sh(f"rm -f -- {shlex.quote(path)}", f"remove {path}")

    def rename(self, src: str, dst: str) -> None:
        self._sh(f"mv -f -- {shlex.quote(src)} {shlex.quote(dst)}", f"rename {src} -> {dst}")


# --------------------------------------------------------------------------- one gateway


@dataclass(frozen=True)
class Port:
    """One appliance port to create: ``between`` True for a wire between the two gateways
    (a veth with the same name on both), False for a LAN port (its far end stays inside)."""

    name: str
    addresses: tuple[str, ...]  # with prefix
    between: bool


@dataclass(frozen=True)
class GatewayState:
    """What must be the same before a tunnel is provisioned and after it is torn down."""

    sas: tuple  # swanctl --list-sas, parsed, timers and counters left out
    conns: str  # swanctl --list-conns, verbatim
    files: tuple[tuple[str, str], ...]  # (path, "mode sha256") under swanctl/ and the journal
    routes: str  # the main routing tables and charon's (220, the children's routes), both families


@dataclass
class Gateway:
    """One charon-systemd in its own network + mount namespace."""

    side: str
    name: str  # <prefix>-<side>, in the argv[0] of its processes
    run_dir: Path
    holder: subprocess.Popen | None = None
    charon: subprocess.Popen | None = None
    host: NamespaceHost | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)

    def nsenter(self) -> list[str]:
        if self.holder is None:
            raise LabError(f"gateway {self.side}: not started")
        return ["nsenter", f"--target={self.holder.pid}", "--mount", "--net"]

    def ip(self, *args: str) -> None:
        """``ip ARGS`` in the gateway's network namespace (setting it up)."""
        self.exec(["ip", *args])

    def exec(self, argv: Sequence[str], timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
        """Run a command (no shell) inside the gateway."""
        r = subprocess.run([*self.nsenter(), *argv], capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise LabError(f"gateway {self.side}: {' '.join(argv)} failed ({r.returncode}): "
                           f"{(r.stdout + r.stderr).strip()[-600:]}")
        return r

    def popen(self, argv: Sequence[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen([*self.nsenter(), *argv], **kw)
        self.procs.append(p)
        return p

    def swanctl(self, *args: str, timeout: float = 30) -> str:
        return self.exec([SWANCTL, *args], timeout=timeout).stdout

    def state(self) -> GatewayState:
        sas = swanctl_list_sas.parse(self.swanctl("--list-sas"))
        files = self.exec(["sh", "-c", f"find {SWANCTL_DIR} {JOURNAL_ROOT} -type f 2>/dev/null "
                                       "| sort | while read -r f; do "
                                       "printf '%s\\t%s %s\\n' \"$f\" \"$(stat -c %a \"$f\")\" "
                                       "\"$(sha256sum < \"$f\" | cut -d' ' -f1)\"; done"]).stdout
        routes = self.exec(["sh", "-c", "for f in -4 -6; do for t in main 220; do "  # 220: charon's own
                                        "echo \"table $f $t\"; ip $f route show table $t; done; done"]).stdout
        return GatewayState(
            sas=tuple(_sa_key(ike) for ike in sas.ike_sas),
            conns=self.swanctl("--list-conns"),
            files=tuple(tuple(line.split("\t", 1)) for line in files.splitlines()),  # type: ignore[misc]
            routes=routes,
        )

    def charon_log(self) -> str:
        p = self.run_dir / "charon.log"
        return p.read_text(errors="replace") if p.exists() else ""


def _sa_key(ike) -> tuple:
    """An IKE_SA without what changes by itself (timers, counters)."""
    kids = tuple((c.name, c.state, c.spi_in, c.spi_out, c.local_ts, c.remote_ts) for c in ike.children)
    return (ike.name, ike.state, ike.local_host, ike.remote_host, ike.local_id, ike.remote_id,
            ike.initiator_spi, ike.responder_spi, kids)


def strongswan_conf(run_dir: Path) -> str:
    """This gateway's strongswan.conf (bind-mounted over /etc/strongswan.conf inside it)."""
    return (
        "charon-systemd {\n"
        f"  load = {PLUGINS}\n"
        "  install_routes = yes\n"
        "  journal {\n    default = -1\n  }\n"
        "  filelog {\n    charon {\n"
        f"      path = {run_dir}/charon.log\n      default = 1\n      flush_line = yes\n"
        "      time_format = %H:%M:%S\n    }\n  }\n"
        f"  plugins {{\n    vici {{\n      socket = unix://{run_dir}/charon.vici\n    }}\n  }}\n"
        "}\n"
        # swanctl's own plugins: the ones installed (else it warns about each missing one)
        f"swanctl {{\n  load = {SWANCTL_PLUGINS}\n  socket = unix://{run_dir}/charon.vici\n}}\n"
    )


def _holder_script(run_dir: Path, name: str) -> str:
    """bash run by the holder: the private mounts, then it sleeps as the namespaces' anchor."""
    d = shlex.quote(str(run_dir))
    return "\n".join([
        "set -e",
        "mount -t tmpfs -o mode=755 tmpfs /run",
        f"mount -t tmpfs tmpfs {d}/ovl",
        f"mkdir {d}/ovl/upper {d}/ovl/work",
        f"mount -t overlay overlay -o lowerdir=/var,upperdir={d}/ovl/upper,workdir={d}/ovl/work /var",
        "mount -t tmpfs -o mode=755 tmpfs /usr/local/etc",
        f"mkdir -m 700 {SWANCTL_DIR}",
        f"mkdir -m 700 {SWANCTL_DIR}/conf.d",
        f"install -m 600 {d}/swanctl.conf {SWANCTL_DIR}/swanctl.conf",
        f"mount --bind {SWANCTL_DIR} /etc/swanctl",
        f"mount --bind {d}/strongswan.conf /etc/strongswan.conf",
        "echo ready",
        f"exec -a {name}-holder sleep infinity",
    ])


class CharonPair:
    """Gateways ``a`` and ``b`` joined by one veth per ``between`` port, each running charon.

    ``ports[side]``: the ports (with addresses) of that gateway; ``baseline[side]``: its
    swanctl.conf as OPNsense left it. ``start()`` builds everything or removes what it built.
    """

    def __init__(self, prefix: str, root: Path, ports: Mapping[str, Sequence[Port]],
                 baseline: Mapping[str, str]) -> None:
        self.prefix = prefix
        self.root = root
        self.ports = {s: tuple(ports[s]) for s in ("a", "b")}
        self.baseline = dict(baseline)
        self.gw = {s: Gateway(s, f"{prefix}-{s}", root / s) for s in ("a", "b")}

    def __getitem__(self, side: str) -> Gateway:
        return self.gw[side]

    def __enter__(self) -> "CharonPair":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- build
    def start(self) -> None:
        try:
            for g in self.gw.values():
                self._start_holder(g)
            self._network()
            for g in self.gw.values():
                self._start_charon(g)
            for g in self.gw.values():
                self._wait_vici(g)
        except BaseException:
            self.close()
            raise

    def _network(self) -> None:
        for g in self.gw.values():
            g.ip("link", "set", "lo", "up")
        a_between = [p.name for p in self.ports["a"] if p.between]
        b_between = [p.name for p in self.ports["b"] if p.between]
        if sorted(a_between) != sorted(b_between):
            raise LabError(f"the gateways' wires differ: a has {a_between}, b has {b_between}")
        pid = {s: str(g.holder.pid) for s, g in self.gw.items() if g.holder is not None}
        for name in a_between:  # created straight inside the two namespaces (no name clash here)
            r = subprocess.run(["ip", "link", "add", name, "netns", pid["a"], "type", "veth",
                                "peer", "name", name, "netns", pid["b"]], capture_output=True, text=True, timeout=30)
            if r.returncode != 0:
                raise LabError(f"veth {name} between the gateways: {r.stderr.strip()}")
        for side, g in self.gw.items():
            for p in self.ports[side]:
                if not p.between:  # a LAN port: its far end stays inside (the bench is not needed)
                    g.ip("link", "add", p.name, "type", "veth", "peer", "name", f"{p.name}-far")
                    g.ip("link", "set", f"{p.name}-far", "up")
                g.ip("link", "set", p.name, "up")
                for a in p.addresses:
                    fam = "-6" if ipaddress.ip_interface(a).version == 6 else "-4"
                    extra = ["nodad"] if fam == "-6" else []  # no tentative phase: charon binds at once
                    g.ip(fam, "addr", "add", a, "dev", p.name, *extra)

    def _start_holder(self, g: Gateway) -> None:
        g.run_dir.mkdir(parents=True)
        (g.run_dir / "ovl").mkdir()
        (g.run_dir / "strongswan.conf").write_text(strongswan_conf(g.run_dir))
        fd = os.open(g.run_dir / "swanctl.conf", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.baseline[g.side])
        g.holder = subprocess.Popen(
            [*DIE_WITH_PYTEST, "unshare", "--net", "--mount", "--propagation", "private",
             "bash", "-c", _holder_script(g.run_dir, g.name)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = g.holder.stdout.readline() if g.holder.stdout else ""
        if line.strip() != "ready":
            g.holder.wait(10)
            raise LabError(f"gateway {g.side}: private mounts failed: {g.holder.stderr.read() if g.holder.stderr else ''}")
        g.host = NamespaceHost(f"gw-{g.side}", g.holder.pid)
        own = subprocess.run(["readlink", "/proc/self/ns/net"], capture_output=True, text=True).stdout
        theirs = g.host.run("readlink /proc/self/ns/net").check("readlink").stdout
        if theirs == own:  # the transport must never act on this machine's own network
            raise LabError(f"gateway {g.side}: NamespaceHost does not enter the namespace")

    def _start_charon(self, g: Gateway) -> None:
        out = open(g.run_dir / "charon.out", "wb")
        try:
            g.charon = subprocess.Popen(
                [*DIE_WITH_PYTEST, *g.nsenter(), "bash", "-c", f"exec -a {g.name}-charon {CHARON}"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        finally:
            out.close()

    def _wait_vici(self, g: Gateway) -> None:
        sock = g.run_dir / "charon.vici"
        deadline = time.monotonic() + START_TIMEOUT
        while not sock.exists():
            assert g.charon is not None
            if g.charon.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"gateway {g.side}: charon did not open {sock} "
                               f"(exit {g.charon.poll()}): {(g.run_dir / 'charon.out').read_text()[-600:]}"
                               f"{g.charon_log()[-1500:]}")
            time.sleep(0.05)

    # -- tear down
    def close(self) -> list[str]:
        """Stop every process, the holders last: with them go the namespaces, their veths and
        mounts. Returns what of this run is still there (empty)."""
        for g in self.gw.values():
            for p in [g.charon, *g.procs, g.holder]:
                if p is not None:
                    _stop(p)
            g.procs.clear()
        return self.leftovers()

    def leftovers(self) -> list[str]:
        """Processes of this run (its prefix in their command line) and named namespaces
        carrying its prefix that still exist (it names none; a check, not a cleanup)."""
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        left = [f"netns {l.split()[0]}" for l in ns.splitlines() if l.split() and l.split()[0].startswith(self.prefix)]
        ps = subprocess.run(["pgrep", "-af", self.prefix], capture_output=True, text=True).stdout
        left += [f"process {l}" for l in ps.splitlines() if str(os.getpid()) != l.split()[0] and "pgrep" not in l]
        return left


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            log.error("pid %d did not stop on SIGTERM within 10 s; killing it", p.pid)
            p.kill()
            p.wait()
    for s in (p.stdout, p.stderr):
        if s is not None:
            s.close()
