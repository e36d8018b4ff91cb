"""`iperf3 --json` client output -> IperfResult (esnet/iperf, measured with 3.12 on Debian 12).

The check is keyed on the top-level `error` key, never on the exit status: iperf 3.12
prints `"error": "unable to connect to server: Connection refused"` and exits 0 in JSON
mode (newer releases exit 1). An error gives IperfResult(error=...) with every rate None.
A partial document (`intervals: []`, `end: {}`) without an `error` is a ParseError.
With -R the client's `sum_sent` is the server's sending side and `sum_received` the
client's receiving side; `sent_bps`/`received_bps` follow those two objects.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

_NUM = (int, float)

from ._base import fail, json_line_of, load_json
from ipsec_hil.lab.command import Command

#: a client, ``CLIENT(server, "-p", port, ..., "--json")``: the line this parser reads (the
#: TCP stream's flags: ShellCommands.iperf3_client; the UDP loads': traffic.udp_load's
#: client_argv, traffic.bypass_tax's senders_argv -- each run's flags are its caller's)
COMMAND = CLIENT = Command("iperf3", "-c")
#: the one-off server, ``SERVER("-p", port)`` (``-B ADDR`` to bind): flushed, because its
#: starter waits for its "Server listening" line (ShellCommands.iperf3_server)
SERVER = Command("iperf3", "-s", "-1", "--forceflush")
#: exits 0 when iperf3 is installed (preflight's bench tools, the survey)
VERSION = Command("iperf3", "--version")


@dataclass(frozen=True)
class StreamResult:
    socket: int
    sent_bps: float
    received_bps: float
    sent_bytes: int
    received_bytes: int
    retransmits: Optional[int]  # None when the sender side does not report them


@dataclass(frozen=True)
class Interval:
    start: float
    end: float
    bps: float  # the interval's sum
    stream_bps: tuple[float, ...]  # per stream, in end.streams order
    omitted: bool


@dataclass(frozen=True)
class IperfResult:
    error: Optional[str] = None
    protocol: Optional[str] = None
    num_streams: Optional[int] = None
    reverse: Optional[bool] = None
    duration: Optional[int] = None  # the requested -t
    sent_bps: Optional[float] = None
    received_bps: Optional[float] = None
    sent_bytes: Optional[int] = None
    received_bytes: Optional[int] = None
    seconds: Optional[float] = None  # measured length of the receiving side
    retransmits: Optional[int] = None
    streams: tuple[StreamResult, ...] = ()
    intervals: tuple[Interval, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


def _where(text: str, key: str, value: Any) -> tuple[int, str]:
    """Best-effort line of KEY holding VALUE (iperf3 pretty-prints with tabs)."""
    if not isinstance(value, (dict, list)):
        shown = json.dumps(value)
        for no, line in enumerate(text.splitlines(), start=1):
            if f'"{key}"' in line and shown in line:
                return no, line.strip()
    return json_line_of(text, f'"{key}"')


def _get(text: str, obj: Any, path: str, kind: type | tuple[type, ...], prefix: str = "") -> Any:
    """obj[a][b]... with a type check; ParseError naming the JSON path (PREFIX + PATH) and its line."""
    cur = obj
    for key in path.split("."):
        if isinstance(cur, list) and key.isdigit() and int(key) < len(cur):
            cur = cur[int(key)]
        elif isinstance(cur, dict) and key in cur:
            cur = cur[key]
        else:
            no, line = json_line_of(text, f'"{key}"')
            fail(COMMAND, no, line, f"{prefix}{path}: missing")
    numeric = kind in (int, float, _NUM)
    ok = isinstance(cur, kind) and not (numeric and isinstance(cur, bool))
    if not ok or (numeric and cur < 0):
        no, line = _where(text, path.split(".")[-1], cur)
        want = "a number" if kind == _NUM else getattr(kind, "__name__", str(kind))
        fail(COMMAND, no, line, f"{prefix}{path}: expected {want}, found {cur!r}")
    return cur




def parse(text: str) -> IperfResult:
    if not text.strip():
        fail(COMMAND, 0, text, "empty output (iperf3 --json always prints a document)")
    doc = load_json(COMMAND, text)
    if not isinstance(doc, dict):
        fail(COMMAND, 1, text.splitlines()[0], "expected a JSON object")
    if "error" in doc:
        return IperfResult(error=str(_get(text, doc, "error", str)))
    end = _get(text, doc, "end", dict)
    intervals = _get(text, doc, "intervals", list)
    if not end or not intervals:
        no, line = json_line_of(text, '"end"')
        fail(COMMAND, no, line, "partial result (empty end or intervals) without an error")
    ts = _get(text, doc, "start.test_start", dict)
    protocol = _get(text, ts, "protocol", str, "start.test_start.")
    n = _get(text, ts, "num_streams", int, "start.test_start.")
    streams_json = _get(text, end, "streams", list, "end.")
    if len(streams_json) != n or len(_get(text, doc, "start.connected", list)) != n:
        fail(COMMAND, 0, f"num_streams={n}", "end.streams / start.connected do not match num_streams")
    if protocol != "TCP":
        fail(COMMAND, 0, f"protocol={protocol}", "only TCP results are understood")
    streams = []
    for i in range(n):
        s, r = f"{i}.sender", f"{i}.receiver"
        sender = _get(text, streams_json, s, dict, "end.streams.")
        retr = sender.get("retransmits")
        if retr is not None and (type(retr) is not int or retr < 0):
            fail(COMMAND, 0, f"end.streams.{i}.sender.retransmits={retr!r}", "bad retransmits")
        streams.append(StreamResult(
            socket=_get(text, streams_json, f"{s}.socket", int, "end.streams."),
            sent_bps=float(_get(text, streams_json, f"{s}.bits_per_second", _NUM, "end.streams.")),
            received_bps=float(_get(text, streams_json, f"{r}.bits_per_second", _NUM, "end.streams.")),
            sent_bytes=_get(text, streams_json, f"{s}.bytes", int, "end.streams."),
            received_bytes=_get(text, streams_json, f"{r}.bytes", int, "end.streams."),
            retransmits=retr,
        ))
    out_intervals = []
    for i, iv in enumerate(intervals):
        per = _get(text, iv, "streams", list, f"intervals.{i}.")
        if len(per) != n:
            fail(COMMAND, 0, f"intervals.{i}", f"{len(per)} streams in an interval, expected {n}")
        out_intervals.append(Interval(
            start=float(_get(text, iv, "sum.start", _NUM, f"intervals.{i}.")),
            end=float(_get(text, iv, "sum.end", _NUM, f"intervals.{i}.")),
            bps=float(_get(text, iv, "sum.bits_per_second", _NUM, f"intervals.{i}.")),
            stream_bps=tuple(
                float(_get(text, per, f"{k}.bits_per_second", _NUM, f"intervals.{i}.streams.")) for k in range(n)
            ),
            omitted=bool(_get(text, iv, "sum.omitted", bool, f"intervals.{i}.")),
        ))
    sum_sent = _get(text, end, "sum_sent", dict, "end.")
    retr = sum_sent.get("retransmits")
    if retr is not None and (type(retr) is not int or retr < 0):
        fail(COMMAND, 0, f"end.sum_sent.retransmits={retr!r}", "bad retransmits")
    return IperfResult(
        protocol=protocol, num_streams=n, reverse=bool(_get(text, ts, "reverse", int, "start.test_start.")),
        duration=_get(text, ts, "duration", int, "start.test_start."),
        sent_bps=float(_get(text, end, "sum_sent.bits_per_second", _NUM, "end.")),
        received_bps=float(_get(text, end, "sum_received.bits_per_second", _NUM, "end.")),
        sent_bytes=_get(text, end, "sum_sent.bytes", int, "end."),
        received_bytes=_get(text, end, "sum_received.bytes", int, "end."),
        seconds=float(_get(text, end, "sum_received.seconds", _NUM, "end.")),
        retransmits=retr, streams=tuple(streams), intervals=tuple(out_intervals),
    )
