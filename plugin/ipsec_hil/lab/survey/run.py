"""The survey itself: lease, read, save, compare -- one appliance at a time per thread.

Why read-only and leased: the survey is the first thing run on a lab others may be using.
It changes nothing on an appliance (every command is a read; the pings send echoes only)
and it takes each appliance's lease (ipsec_hil.lab.sharing.lock.ApplianceLock, the lease
every run takes) for the time it reads it, so it never reads a half-built tunnel of a run
in progress and a run never starts under it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import getpass
import importlib
import json
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ipsec_hil.lab.errors import LabError, ParseError
from ipsec_hil.lab.expectations.hardware import HardwareProfile, host_profile
from ipsec_hil.lab.live_lab import build_appliances, close_hosts
from ipsec_hil.lab.parsers import sysctl as sysctl_parser
from ipsec_hil.lab.sharing.lock import ApplianceLock
from ipsec_hil.lab.survey import counters as counters_mod
from ipsec_hil.lab.survey.mask import mask_setkey
from ipsec_hil.lab.survey.reads import Read, appliance_reads, bench_reads, ping_plans, ping_reads
from ipsec_hil.lab.topology import Topology

#: seconds one command may take (dmesg of a long-running appliance is the largest)
READ_TIMEOUT = 60.0

PARSED, NOT_PARSED, RAW, FAILED = "parsed", "not parsed", "raw", "failed"


@dataclass(frozen=True)
class Outcome:
    """One read's result: ``state`` parsed | not parsed | raw (saved, no parser) | failed
    (no answer, or a raw read's status it does not expect); ``detail`` the parser's
    message, or the status and stderr; ``first_line`` the first line the parser could not
    read (its number and text)."""

    host: str
    read: Read
    state: str
    status: int | None = None
    detail: str = ""
    first_line: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    unknown_oids: tuple[str, ...] = ()
    value: Any = None  # the parser's result (kept in memory for the comparisons)

    @property
    def ok(self) -> bool:
        return self.state in (PARSED, RAW)


@dataclass(frozen=True)
class HostSurvey:
    host: str
    role: str
    outcomes: tuple[Outcome, ...] = ()
    error: str = ""  # the host could not be surveyed at all (lease held, unreachable)
    diff: counters_mod.CounterDiff | None = None
    offload: str = ""  # the kernel's IPsec offload framework: present (why) / absent / unknown
    release: str = ""  # FreeBSD (running kernel) and OPNsense release, as read; "" when unread


@dataclass(frozen=True)
class SurveyResult:
    out: Path
    hosts: tuple[HostSurvey, ...]
    proposed_profiles: Path | None = None

    @property
    def unreadable(self) -> list[Outcome]:
        return [o for h in self.hosts for o in h.outcomes if not o.ok]

    @property
    def profile_differs(self) -> bool:
        return any(h.diff is not None and not h.diff.matched for h in self.hosts)

    @property
    def exit_status(self) -> int:
        """0 everything read and parsed and every profile matched; 3 a host could not be
        surveyed (lease held, unreachable); else 4 if a read was not parsed or failed, plus
        8 if a profile differs (12: both)."""
        if any(h.error for h in self.hosts):
            return 3
        return (4 if self.unreadable else 0) | (8 if self.profile_differs else 0)


def normalise(value: Any) -> Any:
    """A parser's dataclass as the golden files hold it (tests/parsers/golden.py's
    ``normalise``: dataclasses.asdict, then through JSON: tuples -> lists, enums -> values)."""
    raw = dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value

    def default(obj: Any) -> Any:
        if isinstance(obj, enum.Enum):
            return obj.value
        raise TypeError(f"not JSON-able: {obj!r}")

    return json.loads(json.dumps(raw, default=default))


def parse_read(read: Read, stdout: str, stderr: str, status: int) -> tuple[Any, dict[str, Any], tuple[str, ...]]:
    """Run ``read``'s parser on its (already masked) output: (value, the kwargs it was
    called with, sysctl's unknown OIDs). ParseError when the parser refuses it."""
    kwargs = dict(read.kwargs)
    unknown: tuple[str, ...] = ()
    if read.unknown_oids:
        unknown = tuple(sysctl_parser.parse_errors(stderr))
        if "names" in kwargs:
            kwargs["names"] = [n for n in kwargs["names"] if n not in unknown]
    module = importlib.import_module(f"ipsec_hil.lab.parsers.{read.parser}")
    fn = getattr(module, read.function)
    value = fn(stdout, stderr, status, **kwargs) if read.stream else fn(stdout, **kwargs)
    return value, kwargs, unknown


def _save(folder: Path, read: Read, stdout: str, stderr: str, status: int | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{read.name}.txt").write_text(stdout, encoding="utf-8")
    (folder / f"{read.name}.stderr").write_text(stderr, encoding="utf-8")
    (folder / f"{read.name}.status").write_text("" if status is None else f"{status}\n", encoding="utf-8")


def run_read(host: Any, name: str, read: Read, folder: Path) -> Outcome:
    """Send one read, save its output (masked where it holds keys) and parse it."""
    try:
        r = host.run(read.command, timeout=READ_TIMEOUT)
    except LabError as exc:
        _save(folder, read, "", f"{type(exc).__name__}: {exc}\n", None)
        return Outcome(name, read, FAILED, None, f"no answer: {type(exc).__name__}: {str(exc)[:200]}")
    stdout = mask_setkey(r.stdout) if read.mask else r.stdout
    stderr = mask_setkey(r.stderr) if read.mask else r.stderr
    _save(folder, read, stdout, stderr, r.status)
    if read.parser is None:
        if r.status in read.ok_status:  # its first line in the table: a person reads what no parser does
            return Outcome(name, read, RAW, r.status, first_line=(stdout.strip().splitlines() or [""])[0][:80])
        why = (stderr.strip().splitlines() or [""])[-1][:200]
        return Outcome(name, read, FAILED, r.status, f"status {r.status}: {why}")
    try:
        value, kwargs, unknown = parse_read(read, stdout, stderr, r.status)
    except ParseError as exc:
        first = f"line {exc.line_no}: {exc.line}"
        (folder / f"{read.name}.error").write_text(f"{exc}\n{first}\n", encoding="utf-8")
        return Outcome(name, read, NOT_PARSED, r.status, str(exc), first)
    (folder / f"{read.name}.parsed.json").write_text(json.dumps(normalise(value), indent=1) + "\n", encoding="utf-8")
    return Outcome(name, read, PARSED, r.status, kwargs=kwargs, unknown_oids=unknown, value=value)


@contextlib.contextmanager
def leased(host: Any) -> Iterator[ApplianceLock]:
    """The lease on one appliance for the time the survey reads it: the one place the survey
    takes it (ipsec_hil.lab.sharing.lock, as every run does); LockHeld when another run has it."""
    lock = ApplianceLock(host, f"{getpass.getuser()}@{socket.gethostname()}: ipsec-hil-survey", run_id="survey")
    with lock:
        yield lock


def offload_framework(outcomes: dict[str, Outcome]) -> str:
    """The kernel's IPsec offload framework (FreeBSD 15, option IPSEC_OFFLOAD): present when
    sysctl knows net.inet.ipsec.offload.* or setkey -D printed an ``hw offl`` line."""
    why = []
    o = outcomes.get("sysctl-ipsec-offload")
    if o is not None and o.state == PARSED and len(o.value):
        why.append(f"sysctl net.inet.ipsec.offload.*: {len(o.value)} leaves")
    s = outcomes.get("setkey-D")
    if s is not None and s.state == PARSED and any(
            e.hw_offload_ifs is not None or e.hw_offload_packets is not None for e in s.value.entries):
        why.append("'hw offl' lines in setkey -D")
    if why:
        return "present (" + "; ".join(why) + ")"
    if o is None or o.state != PARSED:
        return "unknown (sysctl net.inet.ipsec.offload was not read)"
    return "absent (sysctl: unknown oid net.inet.ipsec.offload; no 'hw offl' in setkey -D)"


def release_of(outcomes: dict[str, Outcome]) -> str:
    """``FreeBSD <running kernel> (userland U[, installed kernel K: reboot pending]),
    OPNsense V``: what freebsd-version -kru and opnsense-version said (parsers.osversion);
    the part a read did not give is left out, "" when neither parsed."""
    parts = []
    f = outcomes.get("freebsd-version")
    if f is not None and f.state == PARSED:
        v = f.value
        extra = [f"userland {v.userland.text}"]
        if v.reboot_pending:
            extra.append(f"installed kernel {v.kernel.text}: reboot pending")
        parts.append(f"FreeBSD {v.running.text} ({', '.join(extra)})")
    o = outcomes.get("opnsense-version")
    if o is not None and o.state == PARSED:
        parts.append(f"{o.value.name} {o.value.version}")
    return ", ".join(parts)


def survey_appliance(topology: Topology, name: str, app: Any, out: Path) -> HostSurvey:
    folder = out / name
    try:
        with leased(app.host) as lease:
            done: dict[str, Outcome] = {}
            for read in appliance_reads(topology, name):
                done[read.name] = run_read(app.host, name, read, folder)
                lease.check()  # LeaseLost: someone broke it; stop reading under their run
            sad = done["setkey-D"].value if done["setkey-D"].state == PARSED else None
            for read in ping_reads(ping_plans(topology, name, sad)):
                done[read.name] = run_read(app.host, name, read, folder)
                lease.check()
    except LabError as exc:
        return HostSurvey(name, "appliance", error=f"{type(exc).__name__}: {exc}")
    profile: HardwareProfile = host_profile(topology.hosts[name])
    prof, tree = done["sysctl-profile"], done[f"sysctl-dev.{profile.driver}"]
    diff = None
    if prof.state == PARSED and tree.state == PARSED:
        diff = counters_mod.compare(name, profile, list(prof.unknown_oids), tree.value)
    return HostSurvey(name, "appliance", tuple(done.values()), diff=diff, offload=offload_framework(done),
                      release=release_of(done))


def survey_bench(name: str, host: Any, out: Path) -> HostSurvey:
    return HostSurvey(name, "bench", tuple(run_read(host, name, r, out / name) for r in bench_reads()))


def _manifest(result: SurveyResult) -> dict[str, Any]:
    return {"hosts": {h.host: {
        "role": h.role, "error": h.error, "offload": h.offload, "release": h.release,
        "reads": [{"name": o.read.name, "command": o.read.command, "parser": o.read.parser,
                   "function": o.read.function, "kwargs": o.kwargs or o.read.kwargs, "stream": o.read.stream,
                   "state": o.state, "status": o.status, "detail": o.detail, "first_line": o.first_line,
                   "unknown_oids": list(o.unknown_oids), "why": o.read.why} for o in h.outcomes],
        "counters": None if h.diff is None else {
            "model": h.diff.model, "missing": h.diff.missing, "unknown": h.diff.unknown,
            "proposals": [dataclasses.asdict(p) for p in h.diff.proposals]},
    } for h in result.hosts}, "exit_status": result.exit_status}


def survey(topology: Topology, out: Path) -> SurveyResult:
    """Survey every host of ``topology`` into bundle ``out`` (created); the result says
    what parsed, what differs, and the exit status. Nothing on an appliance is changed."""
    out.mkdir(parents=True, exist_ok=True)
    apps, hosts = build_appliances(topology)
    try:
        bench = [n for n, h in topology.hosts.items() if not h.is_appliance]
        with ThreadPoolExecutor(max_workers=max(1, len(apps) + len(bench))) as pool:
            jobs = [pool.submit(survey_appliance, topology, n, a, out) for n, a in apps.items()]
            jobs += [pool.submit(survey_bench, n, hosts[n], out) for n in bench]
            results = tuple(j.result() for j in jobs)
    finally:
        close_hosts(hosts)
    text = counters_mod.proposed_profiles(
        [(host_profile(topology.hosts[h.host]), h.diff) for h in results if h.diff is not None])
    proposal = None
    if text is not None:
        proposal = out / "proposed-profiles.yaml"
        proposal.write_text(text, encoding="utf-8")
    result = SurveyResult(out, results, proposal)
    (out / "survey.json").write_text(json.dumps(_manifest(result), indent=1) + "\n", encoding="utf-8")
    return result
