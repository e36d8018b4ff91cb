"""What an OPNsense appliance can be asked, answered in typed values.

Why: every measurement on the pages was a handful of commands typed into a csh over SSH,
and four of them were lost to csh's quoting (the 000 page's ``2>&1``). Here each question
is ONE POSIX sh script sent through :class:`ipsec_hil.lab.remote.Host` (stdin of ``/bin/sh -s``,
never a csh string), with every argument quoted by ``argv``, and its output parsed by the
parser of that command (``ipsec_hil.lab.parsers.<cmd>``), so an unexpected output is a
ParseError naming the line instead of a silent zero.

Each parser module is imported here by name and each method returns its parser's type
(``snapshot`` -> ``sysctl.parse`` -> ``SysctlValues`` -> ``Snapshot.counters``;
``esp_stats`` -> ``netstat_esp.EspStats``; ``list_sas`` -> ``SaList``...), so a reader (and
a type checker) follows a counter from the command's text to the test's assertion.

Multi-command questions (``snapshot``, ``module_info``) print sections separated by marker
lines (``@@hil <section>``) so one round trip gives a consistent reading.

Secrets: ``setkey_sas()`` returns the keys (the independent decryption needs them); they
are never logged here, and nothing here logs command output at all.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

from ipsec_hil.lab.command import REBOOT, ROUTE, SWANCTL_TERMINATE
from ipsec_hil.lab.errors import CommandTimeout, LabError, ParseError, ProfileError, TransportError
from ipsec_hil.lab.expectations.hardware import HardwareProfile
from ipsec_hil.lab.measuring import offload
from ipsec_hil.lab.measuring.measure import Snapshot, unchanged_since
from ipsec_hil.lab.parsers import (
    boottime,
    cputime,
    ifconfig,
    iperf3,
    kldstat,
    md5,
    netstat_esp,
    netstat_if,
    ping,
    route_get,
    setkey,
    setkey_spd,
    swanctl_initiate,
    swanctl_list_sas,
    swanctl_load,
    sysctl,
)
from ipsec_hil.lab.parsers._swan import SaList
from ipsec_hil.lab.parsers.kldstat import KldstatResult
from ipsec_hil.lab.remote import RunResult, argv
from ipsec_hil.lab import ping_argv

T = TypeVar("T")
log = logging.getLogger(__name__)

#: seconds between echoes when a caller does not say (FreeBSD ping -i, iputils -i; root
#: may go below 1 s on both): 0.05 s, so the five and three echoes of the size and matrix
#: tests cost 0.2 and 0.1 s of waiting instead of 0.8 and 0.4 (issue 15); 20 echoes a
#: second stay far below FreeBSD's ICMP error rate limits (icmp6 errppslimit 100/s)
PING_INTERVAL = 0.05

MARK = "@@hil"
_SECTION = re.compile(rf"^{MARK} (\S+)(?: (.*))?$")


def sections(stdout: str) -> dict[str, str]:
    """Split output printed as ``@@hil NAME`` marker lines followed by that section's text."""
    out: dict[str, str] = {}
    cur: str | None = None
    buf: list[str] = []
    for line in stdout.splitlines(keepends=True):
        m = _SECTION.match(line.rstrip("\n"))
        if m:
            if cur is not None:
                out[cur] = "".join(buf)
            cur, buf = m.group(1), []
            if m.group(2) is not None:
                out[cur + ".arg"] = m.group(2)
        elif cur is not None:
            buf.append(line)
        elif line.strip():
            raise ParseError("sections", 0, line.rstrip("\n"), f"output before the first {MARK} marker")
    if cur is not None:
        out[cur] = "".join(buf)
    return out


def _mark(name: str, arg: str | None = None) -> str:
    """sh line printing a section marker (arg may be a sh expansion like "$?")."""
    return f"printf '%s\\n' \"{MARK} {name}{(' ' + arg) if arg else ''}\""


@dataclass(frozen=True)
class ModuleInfo:
    """The driver module: where it is, whether loaded, and which build (md5/size)."""

    name: str
    path: str
    loaded: bool
    md5: str | None
    size: int | None
    kldstat: KldstatResult | None = None  # parsed kldstat


@dataclass(frozen=True)
class KernelInfo:
    osrelease: str
    version: str

    @property
    def release(self) -> Any:
        """kern.osrelease parsed (parsers.osversion.FreeBsdRelease): major/minor, and
        whether the kernel has the IPsec offload framework (FreeBSD 15 on), whose setkey -D
        lines and sysctl node exist only there (issue 43)."""
        from ipsec_hil.lab.parsers import osversion

        return osversion.parse_osrelease(self.osrelease)


@dataclass(frozen=True)
class RouteChange:
    """A route this suite added, so it can be removed exactly (teardown)."""

    prefix: str
    family: str  # ipv4 | ipv6
    gateway: str | None = None  # route via this next hop, or
    interface: str | None = None  # out of this interface (route add -interface)


@dataclass
class IperfServer:
    """A background one-off iperf3 server; ``stop()`` kills it if it is still running."""

    host: Any
    port: int
    pid: int
    log_path: str

    def stop(self) -> None:
        try:
            self.host.run(
                f"kill {self.pid} 2>/dev/null; rm -f {shlex.quote(self.log_path)}; exit 0", timeout=15
            )
        except TransportError as e:  # the server is one-off; a dead host is reported elsewhere
            log.warning("%s: stopping iperf3 server %s failed: %s", getattr(self.host, "name", "?"), self.pid, e)


def _family_of(address: str) -> str:
    addr = address.split("%", 1)[0].split("/", 1)[0]
    return "ipv6" if ipaddress.ip_address(addr).version == 6 else "ipv4"


class ShellCommands:
    """Commands an appliance and the bench share (ping, iperf3); needs ``self.host``."""

    host: Any
    name: str
    command_timeout: float = 60.0

    def _run(self, script: str, timeout: float | None = None) -> RunResult:
        return self.host.run(script, timeout=timeout or self.command_timeout)

    def ping(
        self,
        dst: str,
        size: int | None = None,
        count: int = 5,
        dont_fragment: bool = False,
        source: str | None = None,
        family: str | None = None,
        interval: float | None = None,
        timeout: float | None = None,
    ) -> ping.PingResult:
        """``ping`` -> parsers.ping PingResult; ``timeout`` bounds the program (default:
        one interval per echo plus three seconds). The flags are :meth:`ping_argv`'s.

        Echoes go :data:`PING_INTERVAL` apart unless ``interval`` says otherwise: the
        programs' default of one second made three echoes cost two seconds of waiting
        (issue 15); root may ping faster on FreeBSD and Linux alike.

        A ping killed by a signal before its statistics raises TransportError, as a lost
        session does: a reboot's SIGTERM may end the ping before it ends the SSH session,
        and the truncated output is the appliance going away, not a parser's matter."""
        if interval is None and count > 1:
            interval = PING_INTERVAL
        deadline = int(timeout if timeout is not None else count * (interval or 1.0) + 3)
        req = ping_argv.PingRequest(dst, family or _family_of(dst), count, deadline, size, dont_fragment, source,
                                    interval)
        r = self._run(argv(*self.ping_argv(req)), timeout=deadline + 15)
        try:
            return ping.parse(r.stdout, r.stderr, r.status)
        except ParseError as exc:
            if r.status > 128:  # sh's 128 + signal: killed before its statistics, as a shutdown does
                raise TransportError(f"{self.name}: ping was killed by signal {r.status - 128} before its "
                                     f"statistics (the appliance shutting down under it?): {exc}") from exc
            raise

    def ping_argv(self, req: ping_argv.PingRequest) -> list[str | int]:
        """FreeBSD's ping (the appliances); the bench overrides it with iputils'."""
        return ping_argv.freebsd(req)

    def iperf3_server(self, port: int = 5201, bind: str | None = None, ready_timeout: float = 10.0) -> IperfServer:
        """Start a one-off (``-1``) iperf3 server in the background and wait until it listens."""
        logp = f"/tmp/hil-iperf3-{port}-{int(time.time() * 1000) % 10**9}.log"
        cmd = iperf3.SERVER("-p", port, *(["-B", bind] if bind else []))  # we wait for "Server listening"
        # it listens within tens of ms: looked for every 20 ms, not every 100 (one stream's
        # start is "stream start/stop" time, paid before each of a run's ~55 streams)
        tries = int(ready_timeout / 0.02)
        s = "\n".join(
            [
                f"nohup {cmd} > {shlex.quote(logp)} 2>&1 < /dev/null &",
                "pid=$!",
                "i=0",
                f"while [ $i -lt {tries} ]; do",
                f"  if grep -q 'Server listening' {shlex.quote(logp)} 2>/dev/null; then echo \"$pid\"; exit 0; fi",
                "  if ! kill -0 $pid 2>/dev/null; then break; fi",
                "  sleep 0.02; i=$((i+1))",
                "done",
                f"cat {shlex.quote(logp)} >&2",
                "kill $pid 2>/dev/null",
                "exit 3",
            ]
        )
        r = self._run(s, timeout=ready_timeout + 15)
        if r.status != 0:
            raise LabError(f"{self.name}: iperf3 server on port {port} did not start listening: {r.stderr.strip()[-300:]}")
        return IperfServer(self.host, port, int(r.stdout.strip().splitlines()[-1]), logp)

    def iperf3_client(
        self,
        server: str,
        port: int = 5201,
        seconds: float = 10,
        streams: int = 1,
        reverse: bool = False,
        bind: str | None = None,
        family: str | None = None,
        extra: Sequence[str] = (),
    ) -> iperf3.IperfResult:
        """``iperf3 -c SERVER --json`` -> parsers.iperf3 IperfResult (errors included, not raised)."""
        family = family or _family_of(server)
        # iperf3 reads -t with atoi: a fraction would be cut; round up to whole seconds
        cmd = iperf3.CLIENT(server, "-p", port, "-t", max(1, math.ceil(seconds)), "-P", streams, "--json",
                            "-6" if family == "ipv6" else "-4", *(["-R"] if reverse else []),
                            *(["-B", bind] if bind else []), *extra)
        r = self._run(cmd, timeout=seconds + 60)
        return iperf3.parse(r.stdout)


class Appliance(ShellCommands):
    """An OPNsense appliance reached through a Host, described by its hardware profile."""

    def __init__(self, name: str, host: Any, profile: HardwareProfile, command_timeout: float = 60.0,
                 ports: tuple[str, ...] = ()) -> None:
        self.name = name
        self.host = host
        self.profile = profile
        self.command_timeout = command_timeout
        #: the lab file's ports of this appliance (their FreeBSD interface names): each
        #: snapshot reads their input and output drops (netstat -i -d), a ledger's doors
        self.ports = tuple(ports)
        #: (time.monotonic() since when, the snapshot): the last counter read and since when
        #: its values were read unchanged (measure.unchanged_since), from which
        #: measure.settle_all may start instead of reading and waiting again.
        self.last_read: tuple[float, Snapshot] | None = None
        self._offload_framework: bool | None = None  # offload_framework, once read
        #: reboots asked of this appliance (reboot()), and what to call once one is back: a
        #: health baseline taken before a reboot is stale (ipsec_hil.config_health retakes it)
        self.reboots = 0
        self.after_reboot: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"Appliance({self.name!r}, model={getattr(self.profile, 'model', '?')!r})"

    # ------------------------------------------------------------------ counters
    @property
    def counter_oids(self) -> Mapping[str, str]:
        return dict(self.profile.counters)

    @property
    def offload_framework(self) -> bool:
        """Does the kernel have the inline IPsec offload framework (FreeBSD 15 on: setkey -D's
        per-SA ``hw offl`` lines)? Read once from kern.osrelease (the release does not change
        under a run; a reboot keeps the installed kernel)."""
        if self._offload_framework is None:
            self._offload_framework = bool(self.kernel_version().release.has_ipsec_offload)
        return self._offload_framework

    def snapshot(self) -> Snapshot:
        """All driver counters and the kernel's ESP statistics in ONE round trip; on a kernel
        with the offload framework also each SA's offload counters (``setkey -D``: parsed
        here and reduced to measuring.offload.SaOffload, the keys dropped)."""
        oids = self.counter_oids
        framework = self.offload_framework
        # Each command's stderr in a section of its own, caught by a command substitution
        # (stdout straight to the script's, fd 3), not in a temporary file: mktemp, a cat per
        # command and rm were five more processes in every snapshot (issue 39).
        lines = ["exec 3>&1"]
        for k, (name, command) in enumerate([("sysctl", sysctl.COMMAND(*oids.values())),
                                             ("netstat", netstat_esp.COMMAND),
                                             *([("netstat-if", netstat_if.COMMAND)] if self.ports else []),
                                             *([("setkey", setkey.COMMAND)] if framework else [])], 1):
            lines += [_mark(name), f"e=$({command} 2>&1 >&3); s{k}=$?", _mark(f"{name}-stderr", f'"$s{k}"'),
                      '[ -z "$e" ] || printf \'%s\\n\' "$e"']
        s = "\n".join(lines + [_mark("end")])
        r = self._run(s)
        t = time.time()
        if r.status != 0:
            raise TransportError(f"{self.name}: snapshot script failed with status {r.status}: {r.stderr.strip()[-300:]}")
        sec = sections(r.stdout)
        if "end" not in sec:
            raise ParseError("snapshot", 0, r.stdout[-200:], "output ended before the end marker")
        unknown = sysctl.parse_errors(sec.get("sysctl-stderr", ""))
        if unknown:
            names = {oid: n for n, oid in oids.items()}
            raise ProfileError(
                f"{self.name}: the appliance does not know "
                + ", ".join(f"{o} ({names.get(o, '?')})" for o in unknown)
                + " -- the hardware profile's OIDs do not match this driver build; override them"
                " under the host's `profile:` in the topology file"
            )
        values = sysctl.parse(sec["sysctl"], mode="name", names=list(oids.values()))
        counters: dict[str, int] = {}
        for logical, oid in oids.items():
            v = values[oid]
            if not isinstance(v, int):
                raise ParseError("sysctl", 0, f"{oid}: {v}", f"counter {logical} is not an integer")
            counters[logical] = v
        if sec.get("netstat-stderr.arg", "0") != "0":
            raise TransportError(f"{self.name}: netstat -s -p esp failed: {sec.get('netstat-stderr', '').strip()}")
        esp = netstat_esp.parse(sec["netstat"])
        ifs = _port_drops(self.name, self.ports, sec) if self.ports else {}
        sas: tuple[offload.SaOffload, ...] = ()
        if framework:
            if sec.get("setkey-stderr.arg", "0") != "0":
                raise TransportError(f"{self.name}: setkey -D failed: {sec.get('setkey-stderr', '').strip()}")
            sas = offload.from_setkey(setkey.parse(sec["setkey"]))
        snap = Snapshot(self.name, t, counters, _esp_counts(esp), bool(esp.loaded), sas, ifs)
        self.last_read = unchanged_since(self.last_read, snap, time.monotonic())
        return snap

    def esp_stats(self) -> netstat_esp.EspStats:
        """``netstat -s -p esp --libxo json`` -> parsers.netstat_esp EspStats."""
        return netstat_esp.parse(self._run(netstat_esp.COMMAND).check(netstat_esp.COMMAND).stdout)

    def sysctl_get(self, *names: str) -> dict[str, sysctl.Value]:
        r = self._run(cmd := sysctl.COMMAND(*names))
        unknown = sysctl.parse_errors(r.stderr)
        if unknown:
            raise LabError(f"{self.name}: unknown sysctl {', '.join(unknown)}")
        r.check(cmd)
        return dict(sysctl.parse(r.stdout, mode="name", names=list(names)))

    def cpu_times(self) -> cputime.CpuTimes:
        """``sysctl kern.clockrate hw.ncpu kern.cp_time`` -> parsers.cputime CpuTimes: the
        CPU time the appliance spent so far; two of them bracket a trial's CPU cost."""
        r = self._run(cputime.COMMAND)
        r.check(cputime.COMMAND)
        return cputime.parse(r.stdout)

    def sysctl_set(self, name: str, value: int | str) -> tuple[sysctl.Value, sysctl.Value]:
        """Set one sysctl; returns (old, new) as sysctl printed them."""
        r = self._run(sysctl.COMMAND(f"{name}={value}"))
        r.check(f"{sysctl.COMMAND(name)}=...")
        return sysctl.parse_set(r.stdout)[name]

    # ------------------------------------------------------------------ strongSwan
    def swanctl_load(self) -> swanctl_load.LoadResult:
        """``swanctl --load-all --noprompt`` -> parsers.swanctl_load result."""
        r = self._run(swanctl_load.COMMAND)
        return swanctl_load.parse(r.stdout, r.stderr, r.status)

    def swanctl_initiate(self, child: str, ike: str | None = None, timeout: float = 30) -> swanctl_initiate.InitiateResult:
        """``swanctl --initiate --child X [--ike Y] --timeout S`` -> parsers.swanctl_initiate outcome."""
        more: list[str | int] = ["--child", child]
        if ike:
            more += ["--ike", ike]
        more += ["--timeout", int(max(1, timeout))]
        r = self._run(swanctl_initiate.COMMAND(*more), timeout=timeout + 30)
        return swanctl_initiate.parse(r.stdout, r.stderr, r.status)

    def swanctl_terminate(self, ike: str | None = None, child: str | None = None, timeout: float = 30) -> RunResult:
        """``swanctl --terminate --ike X`` (or ``--child``); returns the RunResult (status kept)."""
        if not ike and not child:
            raise LabError("swanctl_terminate needs ike= or child=")
        which = ["--ike", ike] if ike else ["--child", child]
        return self._run(SWANCTL_TERMINATE(*which, "--timeout", int(max(1, timeout))), timeout=timeout + 30)

    def list_sas(self) -> SaList:
        """``swanctl --list-sas`` (text) -> parsers.swanctl_list_sas SaList."""
        return swanctl_list_sas.parse(self._run(swanctl_list_sas.COMMAND).check(swanctl_list_sas.COMMAND).stdout)

    def setkey_sas(self) -> setkey.SadDump:
        """``setkey -D`` -> parsers.setkey (KEYS INSIDE: never log or report the result)."""
        return setkey.parse(self._run(setkey.COMMAND).check(setkey.COMMAND).stdout)

    def setkey_policies(self) -> setkey_spd.SpdDump:
        """``setkey -DP`` -> parsers.setkey_spd SpdDump: the SPD, the policies each child installed."""
        return setkey_spd.parse(self._run(setkey_spd.COMMAND).check(setkey_spd.COMMAND).stdout)

    # ------------------------------------------------------------------ routes, interfaces
    def route_add(
        self, prefix: str, gateway: str | None = None, interface: str | None = None, family: str | None = None
    ) -> RouteChange:
        """``route [-6] add -net PREFIX (GATEWAY | -interface IF)``; raises if the kernel refuses."""
        if (gateway is None) == (interface is None):
            raise LabError("route_add needs exactly one of gateway= or interface=")
        family = family or _family_of(prefix)
        cmd = ROUTE[family]("add", "-net", prefix, *([gateway] if gateway else ["-interface", interface]))
        r = self._run(cmd)
        if r.status != 0:
            raise LabError(f"{self.name}: {cmd} failed: {(r.stdout + r.stderr).strip()[-300:]}")
        return RouteChange(prefix, family, gateway, interface)

    def route_delete(self, prefix: str, family: str | None = None) -> bool:
        """Delete a net route; False (not an error) if it was not in the table."""
        family = family or _family_of(prefix)
        r = self._run(cmd := ROUTE[family]("delete", "-net", prefix))
        if r.status != 0 and "not in table" in r.stdout + r.stderr:
            return False
        if r.status != 0:
            raise LabError(f"{self.name}: {cmd} failed: {(r.stdout + r.stderr).strip()[-300:]}")
        return True

    def route_get(self, dst: str, family: str | None = None) -> route_get.RouteGet | None:
        """``route [-6] -n get DST`` -> parsers.route_get result, or None when there is no route."""
        family = family or _family_of(dst)
        r = self._run(route_get.BY_FAMILY[family](dst))
        res = route_get.parse(r.stdout, r.stderr, r.status)
        return res if res.found else None

    def interface(self, name: str) -> ifconfig.Interface:
        """``ifconfig NAME`` -> parsers.ifconfig result (incl. ``ifdisabled``)."""
        r = self._run(cmd := ifconfig.COMMAND(name))
        r.check(cmd)
        try:
            return ifconfig.parse(r.stdout).get(name)
        except KeyError:
            raise ParseError("ifconfig", 0, r.stdout[:80], f"interface {name} not in the output") from None

    def ifconfig(self, name: str, *args: str) -> RunResult:
        """``ifconfig NAME ARGS...`` (e.g. ``inet6 -ifdisabled``); raises on a non-zero status."""
        return self._run(cmd := ifconfig.COMMAND(name, *args)).check(cmd)

    # ------------------------------------------------------------------ module, kernel, reboot
    def module_info(self) -> ModuleInfo:
        """kldstat, md5 and size of the driver module in one round trip."""
        path = str(self.profile.module_file)
        fname = path.rsplit("/", 1)[-1]
        q = shlex.quote(path)
        s = "\n".join(
            [
                _mark("kldstat"),
                kldstat.COMMAND,
                _mark("md5"),
                f"if [ -f {q} ]; then {md5.COMMAND(path)}; fi",
                _mark("size"),
                f"if [ -f {q} ]; then wc -c < {q}; fi",
                _mark("end"),
            ]
        )
        r = self._run(s).check("module_info")
        sec = sections(r.stdout)
        kld = kldstat.parse(sec["kldstat"])
        digest = None
        if sec.get("md5", "").strip():
            digest = md5.parse(sec["md5"]).digest()
        size = int(sec["size"].strip()) if sec.get("size", "").strip() else None
        loaded = fname in _kld_names(kld)
        return ModuleInfo(name=str(getattr(self.profile, "driver", fname)), path=path, loaded=loaded, md5=digest,
                          size=size, kldstat=kld)

    def kernel_version(self) -> KernelInfo:
        s = "\n".join([_mark("osrelease"), sysctl.COMMAND("-n", "kern.osrelease"),
                       _mark("version"), sysctl.COMMAND("-n", "kern.version")])
        r = self._run(s).check("kernel_version")
        sec = sections(r.stdout)
        version = next((l.strip() for l in sec.get("version", "").splitlines() if l.strip()), "")
        return KernelInfo(sec.get("osrelease", "").strip(), version)

    def reboot(self, wait: bool = True, timeout: float = 600, poll: float = 2.0) -> None:
        """``shutdown -r now``; with ``wait`` poll until the appliance answers with a new boot time."""
        before = self._boottime()
        self.reboots += 1
        try:
            self._run(REBOOT, timeout=30)
        except TransportError as e:  # expected: the session drops as the machine goes down
            log.debug("%s: shutdown -r now ended the session: %s", self.name, e)
        if not wait:
            return

        def rebooted() -> str | None:
            now = self._boottime()
            return (now or "answering") if before is None or (now is not None and now != before) else None

        self.when_back(rebooted, timeout=timeout, poll=poll, first_wait=True, what=REBOOT)
        for call in list(self.after_reboot):
            call()

    def when_back(self, read: Callable[[], T | None], *, timeout: float = 600, poll: float = 2.0,
                  first_wait: bool = False, what: str = "losing its session") -> T:
        """``read()`` once the appliance answers again: retried while its SSH session is gone
        (TransportError: rebooting -- minutes on hardware) or while it returns None, until
        ``timeout``; CommandTimeout then. The one wait for an appliance coming back, for
        reboot() and for a test whose appliance rebooted under it."""
        deadline = time.monotonic() + timeout
        while True:
            if first_wait:
                time.sleep(poll)
            first_wait = True
            try:
                got = read()
            except TransportError:
                got = None
            if got is not None:
                return got
            if time.monotonic() >= deadline:
                raise CommandTimeout(f"{self.name}: not back {timeout:g} s after {what}")

    def wait_charon(self, timeout: float = 300, poll: float = 1.0) -> None:
        """Until charon answers on its VICI socket (``swanctl --list-sas`` exits 0).

        Why: a boot ends for SSH before it ends for IPsec. A rebooted OPNsense may accept a
        login before its IKE daemon listens; a load or initiate sent then fails with
        "connecting to 'default' URI failed", which is the boot still going, not a defect."""
        def answers() -> bool | None:
            return True if self._run(swanctl_list_sas.COMMAND, timeout=20).status == 0 else None

        self.when_back(answers, timeout=timeout, poll=poll, what="its boot (charon not answering)")

    def _boottime(self) -> str | None:
        r = self._run(boottime.COMMAND, timeout=20)
        return r.stdout.strip() if r.status == 0 and r.stdout.strip() else None


def _port_drops(name: str, ports: tuple[str, ...], sec: dict[str, str]) -> dict[str, tuple[int, int | None]]:
    """Each of ``ports``' (input drops, output drops) from a snapshot's `netstat -i` section."""
    command = netstat_if.COMMAND
    if sec.get("netstat-if-stderr.arg", "0") != "0":
        raise TransportError(f"{name}: {command} failed: {sec.get('netstat-if-stderr', '').strip()}")
    table = netstat_if.parse(sec["netstat-if"])
    out: dict[str, tuple[int, int | None]] = {}
    for port in ports:
        row = table.get(port)
        if row is None:
            raise TransportError(f"{name}: {command} shows no interface {port} (the lab file's port); it shows "
                                 f"{', '.join(i.name for i in table.interfaces) or 'none'}")
        out[port] = (row.idrops, row.odrops)
    return out


def _esp_counts(esp: netstat_esp.EspStats) -> dict[str, int]:
    """EspStats -> {freebsd-key: int} (the kernel's own key names, as DESIGN.md says)."""
    if not esp.loaded:
        return {}
    keys = netstat_esp.COUNTERS
    out: dict[str, int] = {}
    for field_name, key, _ in keys:
        v = getattr(esp, field_name)
        if v is not None:
            out[key] = int(v)
    return out


def _kld_names(kld: kldstat.KldstatResult) -> set[str]:
    return {f.name for f in kld.files}
