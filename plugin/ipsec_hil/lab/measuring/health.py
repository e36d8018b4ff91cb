"""The appliance's health around a tunnel configuration: snapshot before, snapshot after, compare.

Why (issue 13): a driver can pass every traffic test and still leak an mbuf per packet,
grow its UMA zones, log a lock-order reversal that panics next week, unload itself or
reboot the box. A `HealthSnapshot` records what FreeBSD says about all of that; `compare`
turns two snapshots into a `HealthReport` whose `table()` is the before/after diff for the
measurement page and the assertion message.

Design:
- ONE round trip per snapshot: a single POSIX sh script (through `Host.run`, never the
  login shell) runs every command and prints each one's stdout, exit status and stderr
  between marker lines carrying a random nonce, so no command output can forge a marker.
  A snapshot is then consistent in time and cheap enough to take around every config.
- Each command's output goes through its parser (plugin/ipsec_hil/lab/parsers); a format drift
  is a `HealthSnapshotError` naming the host and the parser's line, never a silent zero.
- Tolerances are a typed `HealthPolicy` (the hardware profile holds one per model); the
  driver's identity (its name in dmesg, its module, its zones and malloc types) is a
  `DriverScope` from the caller.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, TypeVar

from ipsec_hil.lab.errors import LabError, ParseError
from ipsec_hil.lab.parsers import boottime, dmesg, kldstat, netstat_m, vmstat_m, vmstat_z
from ipsec_hil.lab.parsers.boottime import Boottime
from ipsec_hil.lab.parsers.dmesg import DmesgDiff, DmesgLines
from ipsec_hil.lab.parsers.kldstat import KldstatResult
from ipsec_hil.lab.parsers.netstat_m import MbufStats
from ipsec_hil.lab.parsers.vmstat_m import MallocTypes
from ipsec_hil.lab.parsers.vmstat_z import UmaZones
from ipsec_hil.lab.remote import Host
from ipsec_hil.lab.remote.together import each_at_once

T = TypeVar("T")


class _Tolerance(Protocol):
    mbuf_slack: int
    cluster_slack: int
    zone_items_slack: int
    malloc_in_use_slack: int


class _Profile(Protocol):
    """What driver_scope and policy_for read of a hardware profile
    (ipsec_hil.lab.expectations.hardware)."""

    driver: str
    module_file: str
    health: _Tolerance

__all__ = [
    "POLICY", "HealthPolicy", "policy_for", "DriverScope", "driver_scope", "HealthSnapshot", "HealthSnapshotError", "HealthRow", "HealthReport",
    "snapshot_script", "split_sections", "take_snapshot", "compare",
]


class HealthSnapshotError(LabError):
    """A health snapshot could not be taken or read (command failed, output cut, format drift)."""


@dataclass(frozen=True)
class HealthPolicy:
    """How much the appliance may drift across one configuration before it is a driver defect.

    Slack values are absolute increases over the baseline snapshot: mbufs and clusters
    idle in socket buffers and per-CPU caches move by a few hundred on a healthy box;
    a per-packet leak moves them by the packet count. Malloc types are compared by
    allocations in use, not memory: `vmstat -m`'s memory unit differs between releases
    (KiB as printed vs bytes in humanised JSON), the count does not. Patterns are Python regexes,
    matched case-insensitively anywhere in a kernel log line.
    """

    mbuf_slack: int = 512
    cluster_slack: int = 512
    zone_items_slack: int = 16
    malloc_in_use_slack: int = 64
    dmesg_anchor_lines: int = 20
    kernel_trouble: tuple[str, ...] = (r"panic", r"lock order reversal", r"witness", r"fatal trap")
    driver_error: str = r"\b(error|errors|fail|failed|failure|timeout|timed out|fault|hang)\b"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and value < (1 if f.name == "dmesg_anchor_lines" else 0):
                raise ValueError(f"HealthPolicy.{f.name}: expected a number >= "
                                 f"{1 if f.name == 'dmesg_anchor_lines' else 0}, found {value}")
        for pattern in (*self.kernel_trouble, self.driver_error):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"HealthPolicy: bad pattern {pattern!r}: {exc}") from None


@dataclass(frozen=True)
class DriverScope:
    """The driver under test as the health checks see it.

    `name` prefixes its dmesg lines (`octep0: ...`); `module` is its kldstat file
    (`octep.ko`, with or without `.ko`); its UMA zones and malloc types are those whose
    names start with one of the prefixes (default: the driver name).
    """

    name: str
    module: str
    zone_prefixes: tuple[str, ...] = ()
    malloc_prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(f"DriverScope.name: expected a FreeBSD driver name, found {self.name!r}")
        if not self.module:
            raise ValueError("DriverScope.module: empty")

    @property
    def zones(self) -> tuple[str, ...]:
        return self.zone_prefixes or (self.name,)

    @property
    def malloc_types(self) -> tuple[str, ...]:
        return self.malloc_prefixes or (self.name,)

    def owns(self, line: str) -> bool:
        """Whether a kernel log line is the driver's own (`name:` or `name<unit>:`)."""
        return re.match(rf"{re.escape(self.name)}[0-9]*: ", line) is not None


#: The model-independent tolerances (HealthPolicy's defaults, each field says why): the
#: patterns and dmesg anchor every comparison uses. The slack an appliance is judged with
#: is its model's (:func:`policy_for`, HardwareProfile.health): the whole configuration's
#: health in test_health.py takes it; the mbufs around rekeys (ipsec_hil.lab.rekey) still
#: compare with these defaults, the XGS 3300's slack (issue 42 left that one as it was).
POLICY = HealthPolicy()


def policy_for(profile: _Profile) -> HealthPolicy:
    """The health policy of one appliance: :data:`POLICY` with the slack of its model's
    profile (HardwareProfile.health; the XGS 136's pools are far smaller than the XGS
    3300's, so is what it may drift). The patterns and the dmesg anchor stay POLICY's: a
    panic line is a panic on any model."""
    t = profile.health
    return replace(POLICY, mbuf_slack=t.mbuf_slack, cluster_slack=t.cluster_slack,
                   zone_items_slack=t.zone_items_slack, malloc_in_use_slack=t.malloc_in_use_slack)


def driver_scope(profile: _Profile) -> DriverScope:
    """The driver as the health checks see it, from the appliance's hardware profile: its
    name and module file (zones and malloc types by the driver's name)."""
    return DriverScope(name=profile.driver, module=os.path.basename(profile.module_file))


# --------------------------------------------------------------------------- snapshot

#: (section, command, its text form) in the order the script runs them; each the parser's
#: COMMAND, JSON where FreeBSD 14 has libxo, and its TEXT form (a kernel without libxo's
#: JSON), both built in the parser's module (tests/parsers/test_commands.py).
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("boottime", boottime.COMMAND, boottime.COMMAND),
    ("kldstat", kldstat.COMMAND, kldstat.COMMAND),
    ("netstat_m", netstat_m.COMMAND, netstat_m.TEXT),
    ("vmstat_z", vmstat_z.COMMAND, vmstat_z.TEXT),
    ("vmstat_m", vmstat_m.COMMAND, vmstat_m.TEXT),
    ("dmesg", dmesg.COMMAND, dmesg.COMMAND),
)
_MARK = "@@ipsec-hil-health"


@dataclass(frozen=True)
class Section:
    """One command's result inside the snapshot script's output."""

    name: str
    stdout: str
    status: int
    stderr: str


@dataclass(frozen=True)
class HealthSnapshot:
    """What one appliance said about its health at one moment (one round trip)."""

    host: str
    boottime: Boottime
    kldstat: KldstatResult
    mbufs: MbufStats
    zones: UmaZones
    malloc: MallocTypes
    dmesg: DmesgLines
    # (section, stdout) as captured, for evidence; not part of equality (two equal states may print apart)
    outputs: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)


def snapshot_script(nonce: str, *, libxo_json: bool = True) -> str:
    """The sh script that prints every section between `@@ipsec-hil-health <nonce>` markers.

    stdout of a command goes straight to the script's stdout (fd 3); its stderr is caught
    in a variable and printed after the status marker, so the sections stay apart without
    temp files. `v=$(cmd)` has cmd's exit status in POSIX sh.
    """
    if not re.fullmatch(r"[0-9a-f]{8,64}", nonce):
        raise ValueError(f"nonce: expected 8-64 lowercase hex digits, found {nonce!r}")
    mark = f"{_MARK} {nonce}"
    lines = [
        "exec 3>&1",
        "__hil_section() {",
        "  __hil_name=$1; shift",
        f"  printf '%s\\n' \"{mark} begin $__hil_name\"",
        '  __hil_err=$("$@" 2>&1 1>&3 3>&-)',
        "  __hil_rc=$?",
        f"  printf '\\n%s\\n' \"{mark} status $__hil_name $__hil_rc\"",
        "  [ -n \"$__hil_err\" ] && printf '%s\\n' \"$__hil_err\"",
        f"  printf '%s\\n' \"{mark} end $__hil_name\"",
        "}",
    ]
    for name, json_command, text_command in COMMANDS:
        lines.append(f"__hil_section {name} {json_command if libxo_json else text_command}")
    lines.append("exit 0")
    return "\n".join(lines) + "\n"


def split_sections(stdout: str, nonce: str, host: str = "") -> dict[str, Section]:
    """The sections of the script's stdout, each exactly once and in order, or HealthSnapshotError."""
    mark = re.escape(f"{_MARK} {nonce}")
    pattern = re.compile(
        rf"{mark} begin (?P<name>[a-z_]+)\n(?P<out>.*?)\n{mark} status (?P=name) (?P<rc>[0-9]+)\n"
        rf"(?P<err>.*?){mark} end (?P=name)\n", re.S)
    sections: dict[str, Section] = {}
    pos = 0
    for m in pattern.finditer(stdout):
        if stdout[pos:m.start()].strip():
            raise HealthSnapshotError(f"{host}: health script printed outside its sections: "
                                      f"{stdout[pos:m.start()][:200]!r}")
        sections[m["name"]] = Section(m["name"], m["out"], int(m["rc"]), m["err"].rstrip("\n"))
        pos = m.end()
    if stdout[pos:].strip():
        raise HealthSnapshotError(f"{host}: health script output cut or garbled after "
                                  f"{list(sections) or 'the start'}: {stdout[pos:][:200]!r}")
    expected = [name for name, _, _ in COMMANDS]
    if list(sections) != expected:
        raise HealthSnapshotError(f"{host}: health script sections {list(sections)}, expected {expected}")
    return sections


_PARSERS: dict[str, Callable[[str], object]] = {
    "boottime": boottime.parse, "kldstat": kldstat.parse, "netstat_m": netstat_m.parse,
    "vmstat_z": vmstat_z.parse, "vmstat_m": vmstat_m.parse, "dmesg": dmesg.parse,
}


def take_snapshot(host: Host, *, libxo_json: bool = True, timeout: Optional[float] = None) -> HealthSnapshot:
    """Run the health script on HOST once and parse every section."""
    nonce = os.urandom(8).hex()
    result = host.run(snapshot_script(nonce, libxo_json=libxo_json), timeout=timeout)
    if result.status != 0:
        raise HealthSnapshotError(f"{host.name}: health script exited {result.status}; "
                                  f"stderr: {result.stderr.strip()[-500:]!r}")
    sections = split_sections(result.stdout, nonce, host.name)
    parsed: dict[str, object] = {}
    commands = {name: (json_cmd if libxo_json else text_cmd) for name, json_cmd, text_cmd in COMMANDS}
    for name, section in sections.items():
        if section.status != 0:
            raise HealthSnapshotError(f"{host.name}: `{commands[name]}` exited {section.status}: "
                                      f"{section.stderr[-500:]!r}")
        try:
            parsed[name] = _PARSERS[name](section.stdout)
        except ParseError as exc:
            raise HealthSnapshotError(f"{host.name}: `{commands[name]}`: {exc}") from exc
    return HealthSnapshot(
        host=host.name, boottime=parsed["boottime"], kldstat=parsed["kldstat"],  # type: ignore[arg-type]
        mbufs=parsed["netstat_m"], zones=parsed["vmstat_z"], malloc=parsed["vmstat_m"],  # type: ignore[arg-type]
        dmesg=parsed["dmesg"], outputs=tuple((n, s.stdout) for n, s in sections.items()),  # type: ignore[arg-type]
    )


def take_snapshots(hosts: Sequence[Host], *, libxo_json: bool = True,
                   timeout: Optional[float] = None) -> list[HealthSnapshot]:
    """:func:`take_snapshot` of every host at once (ipsec_hil.lab.remote.together): both
    ends' health in one end's round trip."""
    return each_at_once(lambda h: take_snapshot(h, libxo_json=libxo_json, timeout=timeout), hosts,
                        name="hil-health")


def snapshots_of(apps: Sequence[Any]) -> dict[str, HealthSnapshot]:
    """Every appliance's snapshot at once (:func:`take_snapshots`), by appliance name."""
    apps = list(apps)
    return dict(zip((app.name for app in apps), take_snapshots([app.host for app in apps])))


def judge(apps: Sequence[Any], before: Mapping[str, HealthSnapshot],
          after: Mapping[str, HealthSnapshot]) -> list[HealthReport]:
    """Each appliance's before/after diff judged with its own model's tolerances
    (:func:`policy_for`: the XGS 136's pools are smaller than the 3300's) and its driver's scope."""
    return [compare(before[app.name], after[app.name], policy_for(app.profile), driver=driver_scope(app.profile))
            for app in apps]


# --------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class HealthRow:
    """One line of the before/after table; ok=False is a driver defect."""

    check: str
    subject: str
    before: str
    after: str
    change: str
    limit: str
    ok: bool


@dataclass(frozen=True)
class HealthReport:
    """The diff of two snapshots of one appliance: rows, and the kernel log lines added."""

    host: str
    driver: str
    rows: tuple[HealthRow, ...]
    dmesg_added: tuple[str, ...]
    dmesg_anchored: bool
    flagged_lines: tuple[tuple[str, str], ...]  # (why, line) among dmesg_added

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    @property
    def findings(self) -> tuple[HealthRow, ...]:
        return tuple(row for row in self.rows if not row.ok)

    @property
    def mbuf_findings(self) -> tuple[HealthRow, ...]:
        """The findings of netstat -m's rows alone (a test about mbufs around rekeys)."""
        return tuple(row for row in self.findings if row.check in MBUF_CHECKS)

    def table(self) -> str:
        """Plain text for the measurement page, Allure and the assertion message."""
        verdict = "healthy" if self.ok else f"{len(self.findings)} finding(s): driver defect"
        head = ("check", "subject", "before", "after", "change", "limit", "verdict")
        body = [(r.check, r.subject, r.before, r.after, r.change, r.limit, "ok" if r.ok else "DEFECT")
                for r in self.rows]
        widths = [max(len(cells[i]) for cells in [head, *body]) for i in range(len(head))]
        out = [f"health of {self.host} around the configuration (driver {self.driver}): {verdict}"]
        out += ["  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() for cells in [head, *body]]
        anchor = "" if self.dmesg_anchored else " (buffer wrapped or rebooted: whole buffer shown)"
        out.append(f"kernel log lines added: {len(self.dmesg_added)}{anchor}")
        flagged = {line: why for why, line in self.flagged_lines}
        out += [f"  {'!' if line in flagged else ' '} {line}" + (f"    <- {flagged[line]}" if line in flagged else "")
                for line in self.dmesg_added]
        return "\n".join(out) + "\n"


def _growth_row(check: str, subject: str, before: int, after: Optional[int], slack: int) -> HealthRow:
    """A level that may rise by SLACK at most; after=None: the thing is gone (its module unloaded,
    which the module row reports), not a growth."""
    if after is None:
        return HealthRow(check, subject, str(before), "gone", "", "", True)
    change = after - before
    return HealthRow(check, subject, str(before), str(after), f"{change:+d}", f"<= +{slack}", change <= slack)


def _counter_row(check: str, before: int, after: int, subject: str = "-") -> HealthRow:
    """Since-boot counters that must not move (after a reboot they restart: the boot row says so)."""
    change = after - before
    return HealthRow(check, subject, str(before), str(after), f"{change:+d}", "+0", change <= 0)


def _pairs(before: Mapping[str, T], after: Mapping[str, T]) -> list[tuple[str, Optional[T], Optional[T]]]:
    """(name, before or None, after or None) for every name in either snapshot, sorted."""
    return [(name, before.get(name), after.get(name)) for name in sorted(set(before) | set(after))]


def _log_rows(before: HealthSnapshot, after: HealthSnapshot, policy: HealthPolicy, driver: DriverScope,
              ) -> tuple[list[HealthRow], DmesgDiff, list[tuple[str, str]]]:
    diff = dmesg.added_since(before.dmesg, after.dmesg, policy.dmesg_anchor_lines)
    trouble = [re.compile(p, re.I) for p in policy.kernel_trouble]
    driver_error = re.compile(policy.driver_error, re.I)
    flagged: list[tuple[str, str]] = []
    kernel = own = 0
    for line in diff.added:
        hit = next((p.pattern for p in trouble if p.search(line)), None)
        if hit is not None:
            kernel += 1
            flagged.append((f"kernel: /{hit}/", line))
        elif driver.owns(line) and driver_error.search(line):
            own += 1
            flagged.append((f"{driver.name} error", line))
    rows = [HealthRow("kernel log: panic/witness/LOR lines", "-", "-", str(kernel), f"+{kernel}", "+0", kernel == 0),
            HealthRow("kernel log: driver error lines", driver.name, "-", str(own), f"+{own}", "+0", own == 0)]
    return rows, diff, flagged


#: The rows of a HealthReport that come from netstat -m (HealthReport.mbuf_findings).
MBUF_CHECKS = ("mbufs in use", "mbuf clusters in use", "mbuf requests denied", "mbuf requests delayed")


def _memory_rows(before: HealthSnapshot, after: HealthSnapshot, policy: HealthPolicy,
                 driver: DriverScope) -> list[HealthRow]:
    b, a = before.mbufs, after.mbufs
    in_use, clusters, denied, delayed = MBUF_CHECKS
    rows = [_growth_row(in_use, "-", b.mbuf_current, a.mbuf_current, policy.mbuf_slack),
            _growth_row(clusters, "-", b.cluster_current, a.cluster_current, policy.cluster_slack),
            _counter_row(denied, b.denied, a.denied),
            _counter_row(delayed, b.delayed, a.delayed)]
    zones = (before.zones.matching(driver.zones), after.zones.matching(driver.zones))
    for name, zb, za in _pairs(*zones):
        rows.append(_growth_row("UMA zone items in use", name, zb.used if zb else 0,
                                za.used if za else None, policy.zone_items_slack))
        if za is not None:
            rows.append(_counter_row("UMA zone allocation failures", zb.fail if zb else 0, za.fail, name))
    types = (before.malloc.matching(driver.malloc_types), after.malloc.matching(driver.malloc_types))
    for name, tb, ta in _pairs(*types):
        rows.append(_growth_row("malloc allocations in use", name, tb.in_use if tb else 0,
                                ta.in_use if ta else None, policy.malloc_in_use_slack))
    return rows


def compare(before: HealthSnapshot, after: HealthSnapshot, policy: HealthPolicy, *,
            driver: DriverScope) -> HealthReport:
    """Every health check of AFTER against the baseline BEFORE (same appliance)."""
    if before.host != after.host:
        raise ValueError(f"compare: snapshots of different hosts ({before.host!r}, {after.host!r})")
    rebooted = before.boottime.instant != after.boottime.instant
    rows = [HealthRow("boot time", "-", before.boottime.date, after.boottime.date,
                      "REBOOTED" if rebooted else "same", "same", not rebooted)]
    loaded_before = before.kldstat.find(driver.module) is not None
    loaded_after = after.kldstat.find(driver.module) is not None
    rows.append(HealthRow("module loaded", driver.module, "yes" if loaded_before else "no",
                          "yes" if loaded_after else "no", "" if loaded_after else "unloaded", "yes", loaded_after))
    log_rows, diff, flagged = _log_rows(before, after, policy, driver)
    rows += log_rows
    rows += _memory_rows(before, after, policy, driver)
    return HealthReport(host=after.host, driver=driver.name, rows=tuple(rows), dmesg_added=diff.added,
                        dmesg_anchored=diff.anchored, flagged_lines=tuple(flagged))
