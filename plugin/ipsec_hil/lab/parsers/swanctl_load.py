"""`swanctl --load-all [--noprompt]` (strongSwan 5.9.8 src/swanctl/commands/load_*.c).

stdout: `loaded connection 'x'`, `loaded ike secret 'x'`, `loaded pool 'x'`,
`successfully loaded N connections, M unloaded`, `no pools found, 0 unloaded`.
stderr (non-zero exit): `loading connection 'x' failed: why`,
`loaded a of b connections, c failed to load, d unloaded`, `parsing 'file' failed`,
`connecting to 'default' URI failed: ...`. Lines are classified whatever stream they
arrive on. The per-kind summary must agree with the per-item lines and with the status.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ._base import fail
from ._lines import LineTable
from ._swan import CHARON_DOWN, PLUGIN_WARNING, both_streams, charon_error
from ipsec_hil.lab.command import Command

COMMAND = Command("swanctl", "--load-all", "--noprompt")
_PLURAL = {"connection": "connections", "pool": "pools", "authority": "authorities"}
_SINGULAR = {v: k for k, v in _PLURAL.items()}


@dataclass(frozen=True)
class Summary:
    kind: str  # connection | pool | authority
    loaded: int
    total: int
    failed: int
    unloaded: int


@dataclass(frozen=True)
class Failure:
    kind: str  # connection | pool | authority | secret | ...
    name: str
    message: str


@dataclass(frozen=True)
class LoadResult:
    status: int
    connections: tuple[str, ...] = ()  # names loaded, in order
    pools: tuple[str, ...] = ()
    authorities: tuple[str, ...] = ()
    secrets: tuple[tuple[str, str], ...] = ()  # (type, id) e.g. ("ike", "ike-lab"); never the secret
    credentials: tuple[str, ...] = ()  # "loaded certificate from '...'" etc., verbatim
    summaries: tuple[Summary, ...] = ()
    failures: tuple[Failure, ...] = ()
    config_errors: tuple[str, ...] = ()
    charon_error: Optional[str] = None
    warnings: tuple[str, ...] = ()  # "plugin 'x': failed to load", "opening directory 'x' failed"

    @property
    def ok(self) -> bool:
        return self.status == 0 and not self.failures and not self.config_errors and self.charon_error is None

    def summary(self, kind: str) -> Optional[Summary]:
        return next((s for s in self.summaries if s.kind == kind), None)


_KINDS = r"(?P<kinds>connections|pools|authorities)"
# the lines swanctl --load-all prints, on either stream, in the order they are tried
_LINES = LineTable(COMMAND, {
    # besides libstrongswan's plugin warnings, --load-all names every credential directory it
    # could not open (exit status stays 0), and a missing swanctl.conf or include only says so
    # (measured on 5.9.8: exit status 0)
    "warning": PLUGIN_WARNING + r"|opening directory '[^']*' failed: .+"
                                r"|no files found matching '[^']*'|failed to open config file '[^']*'",
    "loaded": r"loaded (?P<kind>connection|pool|authority) '(?P<name>[^']*)'",
    "secret": r"loaded (?P<type>[A-Za-z0-9]+) secret '(?P<name>[^']*)'",
    "credential": r"loaded (?:certificate|[A-Za-z0-9]+ key) from '[^']*'",
    "summary_ok": rf"successfully loaded (?P<n>[0-9]+) {_KINDS}, (?P<u>[0-9]+) unloaded",
    "summary_none": rf"no {_KINDS} found, (?P<u>[0-9]+) unloaded",
    "summary_partial": rf"loaded (?P<n>[0-9]+) of (?P<t>[0-9]+) {_KINDS}, (?P<f>[0-9]+) failed to load, "
                       r"(?P<u>[0-9]+) unloaded",
    "failed": r"loading (?P<kind>[a-z0-9 ]+?) (?:'(?P<name>[^']*)' )?failed: (?P<why>.+)",
    "unload_failed": r"unloading (?P<kind>[a-z]+) '(?P<name>[^']*)' failed: (?P<why>.+)",
    "config_error": r"parsing '(?P<file>[^']*)' failed",
    "down": CHARON_DOWN,
    "config_detail": r"\S+:[0-9]+(?::[0-9]+)?: .+",
})


def parse(stdout: str, stderr: str = "", status: int = 0) -> LoadResult:
    names: dict[str, list[str]] = {"connection": [], "pool": [], "authority": []}
    secrets: list[tuple[str, str]] = []
    creds: list[str] = []
    summaries: dict[str, Summary] = {}
    failures: list[Failure] = []
    config_errors: list[str] = []
    charon: Optional[str] = None
    free_text: list[tuple[int, str, str]] = []
    warnings: list[str] = []
    last = ("stdout", 0, "")
    for stream, no, line in both_streams(stdout, stderr):
        if not line.strip():
            continue
        last = (stream, no, line)
        kind, m = _LINES.classify(line)
        if kind == "warning":
            warnings.append(line)
        elif kind == "loaded":
            names[m["kind"]].append(m["name"])
        elif kind == "secret":
            secrets.append((m["type"], m["name"]))
        elif kind == "credential":
            creds.append(line)
        elif kind in ("summary_ok", "summary_none", "summary_partial"):
            of = _SINGULAR[m["kinds"]]
            if of in summaries:
                fail(COMMAND, no, line, f"{stream}: second summary for {m['kinds']}")
            n = int(m.groupdict().get("n") or 0)
            f = int(m.groupdict().get("f") or 0)
            t = int(m.groupdict().get("t") or n)
            if n + f != t:
                fail(COMMAND, no, line, f"{stream}: loaded + failed != total")
            summaries[of] = Summary(of, n, t, f, int(m["u"]))
        elif kind in ("failed", "unload_failed"):
            failures.append(Failure(m["kind"], m["name"] or "", m["why"]))
        elif kind in ("config_error", "config_detail"):
            config_errors.append(line)
        elif kind == "down":
            charon = charon_error(line)
        else:
            free_text.append((no, line, stream))
    if charon is None and free_text:  # usage text accompanies only the connect error
        no, line, stream = free_text[0]
        fail(COMMAND, no, line, f"{stream}: unexpected line")
    if charon is None and not config_errors and "connection" not in summaries:
        fail(COMMAND, last[1], last[2], "no connections summary (output truncated?)")
    for kind, summary in summaries.items():
        if len(names[kind]) != summary.loaded:
            fail(COMMAND, 0, f"{summary}", f"{len(names[kind])} 'loaded {kind}' lines but the summary says {summary.loaded}")
    bad = charon is not None or config_errors or failures or any(s.failed for s in summaries.values())
    if bool(bad) != (status != 0):
        fail(COMMAND, last[1], last[2], f"exit status {status} contradicts the output")
    return LoadResult(
        status=status, connections=tuple(names["connection"]), pools=tuple(names["pool"]),
        authorities=tuple(names["authority"]), secrets=tuple(secrets), credentials=tuple(creds),
        summaries=tuple(summaries.values()), failures=tuple(failures), config_errors=tuple(config_errors),
        charon_error=charon, warnings=tuple(warnings),
    )
