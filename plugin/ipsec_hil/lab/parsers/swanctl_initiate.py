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

from ._base import fail
from ._lines import LineTable
from ._swan import CHARON_DOWN, PLUGIN_WARNING, both_streams, charon_error
from ipsec_hil.lab.command import Command

COMMAND = Command("swanctl", "--initiate")


class Outcome(str, enum.Enum):
    ESTABLISHED = "ESTABLISHED"
    TS_UNACCEPTABLE = "TS_UNACCEPTABLE"
    NO_PROPOSAL_CHOSEN = "NO_PROPOSAL_CHOSEN"
    AUTHENTICATION_FAILED = "AUTHENTICATION_FAILED"
    TIMEOUT = "TIMEOUT"
    CONFIG_NOT_FOUND = "CONFIG_NOT_FOUND"
    CHARON_DOWN = "CHARON_DOWN"
    #: this end's kernel (the offload driver's add_sa / policy install) refused the child
    #: (child_create.c: "unable to install ... IPsec SA (SAD) in kernel" / "... policies (SPD)")
    KERNEL_REFUSED = "KERNEL_REFUSED"
    #: the peer answered the child's request with an error notify not named above
    #: (child_create.c: "received <NOTIFY> notify, no CHILD_SA built"; `error` keeps its name)
    PEER_REFUSED = "PEER_REFUSED"


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


# the lines swanctl --initiate prints, on either stream
_LINES = LineTable(COMMAND, {
    "log": r"\[(?P<group>[A-Z]{3})\] (?P<msg>.*)",
    "warning": PLUGIN_WARNING,
    "completed": r"initiate completed successfully",
    "failed": r"initiate failed: (?P<err>.+)",
    "down": CHARON_DOWN,
})
# what a log line's message says about the CHILD_SA
_MESSAGES = LineTable(COMMAND, {
    "established": r"CHILD_SA (?P<child>\S+)\{(?P<id>[0-9]+)\} established with SPIs (?P<spi_in>[0-9a-f]{8})_i "
                   r"(?P<spi_out>[0-9a-f]{8})_o and TS (?P<lts>\S+(?: \S+)*) === (?P<rts>\S+(?: \S+)*)",
    "retransmit": r"retransmit [0-9]+ of request with message ID [0-9]+",
    "proposal": r"selected proposal: (?P<p>ESP:\S+|AH:\S+)",
})
# the <errmsg> of `initiate failed: <errmsg>`
_ERRORS = LineTable(COMMAND, {
    "not_found": r"CHILD_SA config '(?P<child>[^']*)' not found",
    "timeout": r"CHILD_SA '(?P<child>[^']*)' not established after (?P<ms>[0-9]+)ms",
    "failed": r"establishing CHILD_SA '(?P<child>[^']*)' failed",
})
# log messages that explain an "establishing CHILD_SA failed", first match wins
_CAUSES: tuple[tuple[re.Pattern[str], Outcome], ...] = (
    (re.compile(r"received TS_UNACCEPTABLE notify.*"), Outcome.TS_UNACCEPTABLE),
    (re.compile(r"received NO_PROPOSAL_CHOSEN notify.*"), Outcome.NO_PROPOSAL_CHOSEN),
    (re.compile(r"no acceptable proposal found"), Outcome.NO_PROPOSAL_CHOSEN),
    (re.compile(r"received AUTHENTICATION_FAILED notify.*"), Outcome.AUTHENTICATION_FAILED),
    (re.compile(r"tried [0-9]+ shared keys? for .* but MAC mismatched"), Outcome.AUTHENTICATION_FAILED),
    (re.compile(r"giving up after [0-9]+ retransmits"), Outcome.TIMEOUT),
    (re.compile(r"unable to install (?:inbound and outbound |inbound |outbound )?IPsec SA \(SAD\) in kernel"),
     Outcome.KERNEL_REFUSED),
    (re.compile(r"unable to install IPsec policies \(SPD\) in kernel"), Outcome.KERNEL_REFUSED),
    (re.compile(r"received [A-Z0-9_]+ notify, no CHILD_SA built"), Outcome.PEER_REFUSED),
)


def parse(stdout: str, stderr: str = "", status: int = 0) -> InitiateResult:
    log: list[LogLine] = []
    completed = False
    failed: Optional[tuple[int, str, str]] = None
    down: Optional[str] = None
    other: list[tuple[str, int, str]] = []
    warnings: list[str] = []
    lines = both_streams(stdout, stderr)
    for stream, no, line in lines:
        kind, m = _LINES.classify(line)
        if kind == "log":
            log.append(LogLine(m["group"], m["msg"]))
        elif kind == "warning":
            warnings.append(line)
        elif kind == "completed":
            completed = True
        elif kind == "failed":
            if failed:
                fail(COMMAND, no, line, f"{stream}: second 'initiate failed' line")
            failed = (no, line, m["err"])
        elif kind == "down":
            down = charon_error(line)
        elif line.strip():
            other.append((stream, no, line))
    if down is not None:  # swanctl printed its usage text before giving up: the only case with free text
        return InitiateResult(outcome=Outcome.CHARON_DOWN, status=status, error=down, log=tuple(log),
                              warnings=tuple(warnings))
    if other:
        stream, no, line = other[0]
        fail(COMMAND, no, line, f"{stream}: not a log line nor a result line")
    proposal = next((m["p"] for l in reversed(log) if (m := _MESSAGES.match(l.message, "proposal"))), None)
    retransmits = sum(1 for l in log if _MESSAGES.match(l.message, "retransmit"))
    common = dict(status=status, log=tuple(log), proposal=proposal, retransmits=retransmits,
                  warnings=tuple(warnings))
    if completed:
        if failed or status != 0:
            fail(COMMAND, 0, f"status={status}", "'initiate completed successfully' with a failure")
        est = [m for l in log if (m := _MESSAGES.match(l.message, "established"))]
        if not est:
            fail(COMMAND, 0, "initiate completed successfully", "no 'CHILD_SA ... established with SPIs' line")
        m = est[-1]
        return InitiateResult(
            outcome=Outcome.ESTABLISHED, child=m["child"], child_uniqueid=int(m["id"]),
            spi_in=m["spi_in"], spi_out=m["spi_out"], local_ts=tuple(m["lts"].split()),
            remote_ts=tuple(m["rts"].split()), **common,  # type: ignore[arg-type]
        )
    if not failed:
        last = lines[-1][2] if lines else ""
        fail(COMMAND, 0, last, f"neither 'initiate completed successfully' nor 'initiate failed' (status {status})")
    no, line, err = failed
    if status == 0:
        fail(COMMAND, no, line, "'initiate failed' with exit status 0")
    common["error"] = err
    kind, m = _ERRORS.classify(err)
    if kind is None:
        fail(COMMAND, no, line, "unknown 'initiate failed' message")
    if kind == "not_found":
        return InitiateResult(outcome=Outcome.CONFIG_NOT_FOUND, child=m["child"], **common)  # type: ignore[arg-type]
    if kind == "timeout":
        return InitiateResult(outcome=Outcome.TIMEOUT, child=m["child"], timeout_ms=int(m["ms"]), **common)  # type: ignore[arg-type]
    for rx, outcome in _CAUSES:
        hit = next((l.message for l in log if rx.fullmatch(l.message)), None)
        if hit is not None:
            if outcome in (Outcome.KERNEL_REFUSED, Outcome.PEER_REFUSED):
                common["error"] = f"{err}: {hit}"  # which install, which notify
            return InitiateResult(outcome=outcome, child=m["child"], **common)  # type: ignore[arg-type]
    # the whole log in the error: it is the only record of why (a lab's daemon log may be gone)
    fail(COMMAND, no, line, "CHILD_SA failed but the log names no known cause; the log:\n"
         + "\n".join(f"  [{l.group}] {l.message}" for l in log))
