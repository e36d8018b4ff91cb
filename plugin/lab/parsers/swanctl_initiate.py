"""`swanctl --initiate --child X` (strongSwan 5.9.8 src/swanctl/commands/initiate.c).

The outcome needs stdout, stderr and the exit status together: the log lines
(`[IKE] ...`) stream on stdout, `initiate failed: <errmsg>` goes to stderr with exit 1,
and a dead charon gives `connecting to 'default' URI failed` with exit = errno. Lines
are classified whatever stream they arrive on, so a `2>&1` capture parses the same.
A failure whose cause is not recognised raises ParseError rather than guessing.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Optional

from ._base import fail, numbered_lines

COMMAND = "swanctl --initiate"


class Outcome(str, enum.Enum):
    ESTABLISHED = "ESTABLISHED"
    TS_UNACCEPTABLE = "TS_UNACCEPTABLE"
    NO_PROPOSAL_CHOSEN = "NO_PROPOSAL_CHOSEN"
    AUTHENTICATION_FAILED = "AUTHENTICATION_FAILED"
    TIMEOUT = "TIMEOUT"
    CONFIG_NOT_FOUND = "CONFIG_NOT_FOUND"
    CHARON_DOWN = "CHARON_DOWN"


@dataclass(frozen=True)
class LogLine:
    group: str  # IKE, CFG, ENC, NET, ...
    message: str


@dataclass(frozen=True)
class InitiateResult:
    outcome: Outcome
    status: int
    child: Optional[str] = None  # child config name (from the established line or errmsg)
    child_uniqueid: Optional[int] = None  # the {N} of "CHILD_SA net{4} established"
    spi_in: Optional[str] = None  # the `_i` SPI (inbound)
    spi_out: Optional[str] = None  # the `_o` SPI (outbound)
    local_ts: tuple[str, ...] = ()
    remote_ts: tuple[str, ...] = ()
    proposal: Optional[str] = None  # last "selected proposal: ESP:..." (CHILD_SA)
    error: Optional[str] = None  # text after "initiate failed: " / the connect error
    timeout_ms: Optional[int] = None  # "not established after Nms"
    retransmits: int = 0  # "retransmit N of request" lines seen
    log: tuple[LogLine, ...] = ()
    warnings: tuple[str, ...] = ()  # "plugin 'x': failed to load - ..." noise

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.ESTABLISHED


_LOG = re.compile(r"\[(?P<group>[A-Z]{3})\] (?P<msg>.*)")
_FAILED = re.compile(r"initiate failed: (?P<err>.+)")
_ERROR_PREFIX = re.compile(r"^[Ee]rror: ")
# libstrongswan complains on stderr about plugins named in its config but not installed
# (seen on Debian 12 for every swanctl run); kept as warnings, not errors
_PLUGIN_WARNING = re.compile(r"plugin '[^']*': failed to load - .+")
_DOWN = re.compile(r"(?:[Ee]rror: )?connecting to '(?P<uri>[^']*)' URI failed: (?P<why>.+)")
_ESTABLISHED = re.compile(
    r"CHILD_SA (?P<child>\S+)\{(?P<id>[0-9]+)\} established with SPIs (?P<spi_in>[0-9a-f]{8})_i "
    r"(?P<spi_out>[0-9a-f]{8})_o and TS (?P<lts>\S+(?: \S+)*) === (?P<rts>\S+(?: \S+)*)"
)
_NOT_FOUND = re.compile(r"CHILD_SA config '(?P<child>[^']*)' not found")
_ESTAB_FAILED = re.compile(r"establishing CHILD_SA '(?P<child>[^']*)' failed")
_NOT_ESTAB = re.compile(r"CHILD_SA '(?P<child>[^']*)' not established after (?P<ms>[0-9]+)ms")
_RETRANSMIT = re.compile(r"retransmit [0-9]+ of request with message ID [0-9]+")
_GIVING_UP = re.compile(r"giving up after [0-9]+ retransmits")
_PROPOSAL = re.compile(r"selected proposal: (?P<p>ESP:\S+|AH:\S+)")
# log messages that explain an "establishing CHILD_SA failed", first match wins
_CAUSES: tuple[tuple[re.Pattern[str], Outcome], ...] = (
    (re.compile(r"received TS_UNACCEPTABLE notify.*"), Outcome.TS_UNACCEPTABLE),
    (re.compile(r"received NO_PROPOSAL_CHOSEN notify.*"), Outcome.NO_PROPOSAL_CHOSEN),
    (re.compile(r"no acceptable proposal found"), Outcome.NO_PROPOSAL_CHOSEN),
    (re.compile(r"received AUTHENTICATION_FAILED notify.*"), Outcome.AUTHENTICATION_FAILED),
    (re.compile(r"tried [0-9]+ shared keys? for .* but MAC mismatched"), Outcome.AUTHENTICATION_FAILED),
    (_GIVING_UP, Outcome.TIMEOUT),
)


def parse(stdout: str, stderr: str = "", status: int = 0) -> InitiateResult:
    log: list[LogLine] = []
    completed = False
    failed: Optional[tuple[int, str, str]] = None
    down: Optional[tuple[int, str, str]] = None
    other: list[tuple[int, str, str]] = []
    warnings: list[str] = []
    numbered = [(f"stdout:{no}", line) for no, line in numbered_lines(stdout)]
    numbered += [(f"stderr:{no}", line) for no, line in numbered_lines(stderr)]
    for where, line in numbered:
        no = int(where.split(":")[1])
        m = _LOG.fullmatch(line)
        if m:
            log.append(LogLine(m["group"], m["msg"]))
            continue
        if _PLUGIN_WARNING.fullmatch(line):
            warnings.append(line)
            continue
        if line == "initiate completed successfully":
            completed = True
            continue
        m = _FAILED.fullmatch(line)
        if m:
            if failed:
                fail(COMMAND, no, line, f"{where.split(':')[0]}: second 'initiate failed' line")
            failed = (no, line, m["err"])
            continue
        m = _DOWN.fullmatch(line)
        if m:
            down = (no, line, _ERROR_PREFIX.sub("", line))
            continue
        if line.strip():
            other.append((no, line, where.split(":")[0]))
    if down:  # swanctl printed its usage text before giving up: the only case with free text
        return InitiateResult(outcome=Outcome.CHARON_DOWN, status=status, error=down[2], log=tuple(log),
                              warnings=tuple(warnings))
    if other:
        no, line, stream = other[0]
        fail(COMMAND, no, line, f"{stream}: not a log line nor a result line")
    proposal = next((_PROPOSAL.fullmatch(l.message)["p"] for l in reversed(log)  # type: ignore[index]
                     if _PROPOSAL.fullmatch(l.message)), None)
    retransmits = sum(1 for l in log if _RETRANSMIT.fullmatch(l.message))
    common = dict(status=status, log=tuple(log), proposal=proposal, retransmits=retransmits,
                  warnings=tuple(warnings))
    if completed:
        if failed or status != 0:
            fail(COMMAND, 0, f"status={status}", "'initiate completed successfully' with a failure")
        est = [m for l in log if (m := _ESTABLISHED.fullmatch(l.message))]
        if not est:
            fail(COMMAND, 0, "initiate completed successfully", "no 'CHILD_SA ... established with SPIs' line")
        m = est[-1]
        return InitiateResult(
            outcome=Outcome.ESTABLISHED, child=m["child"], child_uniqueid=int(m["id"]),
            spi_in=m["spi_in"], spi_out=m["spi_out"], local_ts=tuple(m["lts"].split()),
            remote_ts=tuple(m["rts"].split()), **common,  # type: ignore[arg-type]
        )
    if not failed:
        last = numbered[-1] if numbered else ("stdout:0", "")
        fail(COMMAND, 0, last[1], f"neither 'initiate completed successfully' nor 'initiate failed' (status {status})")
    no, line, err = failed
    if status == 0:
        fail(COMMAND, no, line, "'initiate failed' with exit status 0")
    common["error"] = err
    m = _NOT_FOUND.fullmatch(err)
    if m:
        return InitiateResult(outcome=Outcome.CONFIG_NOT_FOUND, child=m["child"], **common)  # type: ignore[arg-type]
    m = _NOT_ESTAB.fullmatch(err)
    if m:
        return InitiateResult(outcome=Outcome.TIMEOUT, child=m["child"], timeout_ms=int(m["ms"]), **common)  # type: ignore[arg-type]
    m = _ESTAB_FAILED.fullmatch(err)
    if not m:
        fail(COMMAND, no, line, "unknown 'initiate failed' message")
    for rx, outcome in _CAUSES:
        if any(rx.fullmatch(l.message) for l in log):
            return InitiateResult(outcome=outcome, child=m["child"], **common)  # type: ignore[arg-type]
    fail(COMMAND, no, line, "CHILD_SA failed but the log names no known cause")
