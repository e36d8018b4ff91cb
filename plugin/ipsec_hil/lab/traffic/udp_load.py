"""Offered UDP load through a tunnel from the bench: the trial of the NDR/PDR search, and
round-trip times under load for the latency profile (issue 14).

Why iperf3 in UDP mode: it offers a set rate (``-b``) of fixed-size datagrams (``-l``)
and its JSON reports what the receiver counted lost (sequence numbers), which is the
trial's loss. ``-k BLOCKS`` instead of ``-t`` so a trial can last a fraction of a second
(iperf3 reads ``-t`` as whole seconds): blocks = load x duration / datagram bits. Loads
are Mbit/s of UDP payload, as iperf3 counts them.

What a trial offered (issue 41): the load *asked* is not the load *offered*. When the
bench cannot keep up -- its own port is the slowest link, its CPU is busy -- iperf3
blocks in ``sendto`` and sends its blocks over a longer time, or the bench's own queue
drops datagrams that ``sendto`` reported as sent (a UDP socket without IP_RECVERR hears
nothing of a qdisc drop). So each trial measures the load that left: iperf3's sender-side
bytes over its sender-side seconds, scaled down by the bench port's transmitted packets
(``/sys/class/net/IF/statistics/tx_packets`` read before and after, in the same shell as
the client) when they are fewer than the datagrams iperf3 counted. That is
:attr:`TrialResult.achieved`; the search calls a trial short of its load by more than its
tolerance "the bench could not offer X" (ipsec_hil.lab.decision.search).

Loss: iperf3's receiver counts gaps in the sequence numbers (``lost_packets``), so a drop
anywhere before the last datagram received is lost. Datagrams still queued when the trial
ends are *not* cut: iperf3's end-of-test message travels the same path behind them, so
they arrive and count. Instead the trials are long enough against the path's buffer that
a queue can hide at most a stated share of an overload (ipsec_hil.lab.decision.bottleneck,
RFC 2544 section 24, MLRsearch's trial duration). Datagrams the server had not read when
the end message came (its socket buffer, a few per trial) are neither lost nor received:
the receiver's own count of them is smaller than sent minus lost, and that difference is
the reader's lag, not the path's.

Latency: round trips of ``ping`` from the bench to the far end while iperf3 offers the
load (a timestamped probe on one clock; a round trip, stated as such on the page).

In the run's breakdown (ipsec_hil.lab.timeshare) a trial's duration and a probe's seconds
of load are "traffic", like an iperf3 stream's seconds, and the one-off server around
them "stream start/stop"; the test adds the same seconds to its record's traffic asked.

Library code: no pytest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from ipsec_hil.lab.decision.latency import ProbeSample
from ipsec_hil.lab.decision.search import TrialResult
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab import ping_argv
from ipsec_hil.lab.parsers import iperf3
from ipsec_hil.lab.measuring.quiet import load_ended
from ipsec_hil.lab.remote import argv
from ipsec_hil.lab.timeshare import STREAM, TRAFFIC, spent

RTT_RE = re.compile(r"icmp_seq=(\d+) .*time=([0-9.]+) ms")

#: Seconds of load each latency probe offers (:func:`rtt_probe`): its traffic asked.
RTT_LOAD_SECONDS = 3


class LoadError(LabError):
    """iperf3 did not report a UDP trial (it failed, or printed no JSON)."""


def blocks_for(load_mbit: float, duration: float, size: int) -> int:
    return max(1, math.ceil(load_mbit * 1e6 * duration / (8 * size)))


#: Marker lines the trial's shell prints around iperf3 with the bench port's tx_packets.
PORT_TX_BEFORE, PORT_TX_AFTER = "ipsec-hil-port-tx-before", "ipsec-hil-port-tx-after"


def parse_udp_json(text: str, load_mbit: float, duration: float, port_tx: int | None = None) -> TrialResult:
    """iperf3 ``--json`` of a UDP client -> sent and received datagrams, and the load that
    left (Mbit/s of payload): sender-side bytes over sender-side seconds, scaled down by
    ``port_tx`` (packets the bench's port transmitted meanwhile) when that is fewer than
    the datagrams iperf3 counted as sent."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LoadError(f"iperf3 -u printed no JSON ({exc}): {text[:200]!r}") from None
    if data.get("error"):
        raise LoadError(f"iperf3 -u: {data['error']}")
    end = data.get("end") or {}
    sent_sum, recv_sum = end.get("sum_sent") or end.get("sum") or {}, end.get("sum_received") or end.get("sum") or {}
    if "packets" not in sent_sum or "lost_packets" not in recv_sum:
        raise LoadError(f"iperf3 -u JSON without packets/lost_packets in end.sum_sent/sum_received: {list(end)}")
    sent = int(sent_sum["packets"])
    lost = min(sent, max(0, int(recv_sum["lost_packets"])))
    achieved = _achieved(sent_sum, sent, port_tx)
    return TrialResult(offered=load_mbit, sent=sent, received=sent - lost, duration=duration, achieved=achieved,
                       port_tx=port_tx, drain=_drain(sent_sum, recv_sum))


def _drain(sent_sum: dict[str, Any], recv_sum: dict[str, Any]) -> float | None:
    """Receiver seconds minus sender seconds (>= 0): the queue's drain plus the end message's
    trip; None when either is missing (the old ``end.sum`` alone has one clock)."""
    if sent_sum is recv_sum:
        return None
    try:
        return max(0.0, float(recv_sum["seconds"]) - float(sent_sum["seconds"]))
    except (KeyError, TypeError, ValueError):
        return None


def _achieved(sent_sum: dict[str, Any], sent: int, port_tx: int | None) -> float | None:
    """Mbit/s of UDP payload that left: None when iperf3 gave no sender bytes and seconds."""
    try:
        bits, seconds = 8.0 * float(sent_sum["bytes"]), float(sent_sum["seconds"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (seconds > 0 and bits >= 0):
        raise LoadError(f"iperf3 -u JSON end.sum_sent: seconds {sent_sum.get('seconds')!r}, bytes "
                        f"{sent_sum.get('bytes')!r}: expected seconds > 0 and bytes >= 0")
    rate = bits / seconds / 1e6
    if port_tx is not None and sent > 0 and port_tx < sent:
        rate *= port_tx / sent  # the bench's own queue dropped what sendto called sent
    return rate


def split_port_tx(stdout: str) -> tuple[str, int | None]:
    """The trial shell's output -> (iperf3's JSON, packets the bench port sent meanwhile or
    None when its counters were not readable). Output without the markers is all JSON."""
    lines, counts, rest = stdout.splitlines(), {}, []
    for line in lines:
        head, _, value = line.partition(" ")
        if head in (PORT_TX_BEFORE, PORT_TX_AFTER):
            counts[head] = int(value) if value.strip().isdigit() else None
        else:
            rest.append(line)
    before, after = counts.get(PORT_TX_BEFORE), counts.get(PORT_TX_AFTER)
    tx = after - before if before is not None and after is not None and after >= before else None
    return "\n".join(rest), tx


def trial_script(cmd: list[str | int], port_ifname: str | None) -> str:
    """The client's command, between two reads of the bench port's tx_packets when its
    interface is known (Linux sysfs; a bench without it prints no number)."""
    client = argv(*cmd)
    if not port_ifname:
        return client
    read = f"cat /sys/class/net/{argv(port_ifname)}/statistics/tx_packets 2>/dev/null"
    return (f"echo {PORT_TX_BEFORE} $({read})\n{client}\n"
            f"echo {PORT_TX_AFTER} $({read})\n")


def client_argv(addr: str, load_mbit: float, *, blocks: int | None = None, seconds: int | None = None,
                size: int, bind: str | None, port: int) -> list[str | int]:
    """iperf3.CLIENT's argv for one UDP trial: ``-k`` blocks (a search's trial) or ``-t`` seconds (the load
    under the round-trip probe); a list, quoted by the trial's script."""
    cmd: list[str | int] = [*iperf3.CLIENT.argv, addr, "-p", port, "-u", "-b", f"{load_mbit:.3f}M", "-l", size,
                            "--json"]
    cmd += ["-k", blocks] if blocks is not None else ["-t", seconds or 1]
    return cmd + (["-B", bind] if bind else [])


def udp_trial(bench: Any, server: Any, addr: str, *, size: int = 1200, bind: str | None = None,
              port: int = 5201, port_ifname: str | None = None) -> Callable[[float, float], TrialResult]:
    """``trial(load_mbit, duration)`` for :func:`ipsec_hil.lab.decision.search.search`:
    a one-off iperf3 server on ``server``, the UDP client on the bench; ``port_ifname``
    the bench's interface the load leaves by (its tx counters check what left)."""

    @spent(STREAM)
    def once(cmd: list[str | int], duration: float, load_mbit: float) -> TrialResult:
        srv = server.iperf3_server(port=port)
        try:
            with spent(TRAFFIC, cap=duration):
                r = bench.host.run(trial_script(cmd, port_ifname), timeout=duration + 60)
        finally:
            load_ended()  # a settle right after keeps the load's tail (ipsec_hil.lab.measuring.quiet)
            srv.stop()
        text, port_tx = split_port_tx(r.stdout)
        return parse_udp_json(text, load_mbit, duration, port_tx)

    def trial(load_mbit: float, duration: float) -> TrialResult:
        cmd = client_argv(addr, load_mbit, blocks=blocks_for(load_mbit, duration, size), size=size, bind=bind,
                          port=port)
        for _ in range(HANDSHAKE_ATTEMPTS - 1):
            try:
                return once(cmd, duration, load_mbit)
            except LoadError as exc:
                if not handshake_lost(exc):
                    raise
        return once(cmd, duration, load_mbit)  # the last attempt: its error is the trial's

    return trial


#: Attempts of one trial whose UDP handshake datagram was lost (see handshake_lost).
HANDSHAKE_ATTEMPTS = 3


def handshake_lost(exc: LoadError) -> bool:
    """iperf3 -u starts with one UDP datagram each way on the data socket before it offers
    any load; when the path loses one of them (a lossy driver, the very thing a search
    measures), the client gives up with "unable to read from stream socket" before the
    trial began. That is no trial: it is started again, the loss it then measures is the
    trial's. Any other iperf3 failure stays an error."""
    return "stream socket" in str(exc)


def rtt_probe(bench: Any, server: Any, addr: str, *, size: int = 1200, bind: str | None = None, port: int = 5201,
              count: int = 20, seconds: int = RTT_LOAD_SECONDS) -> Callable[[float], list[ProbeSample]]:
    """``probe(load_mbit)`` for :func:`ipsec_hil.lab.decision.latency.latency_profile`: ``count``
    pings (0.05 s apart) while iperf3 offers ``load_mbit``; each reply a ProbeSample of its
    round trip (sent 0, received rtt), each missing reply a lost probe."""

    @spent(STREAM)
    def probe(load_mbit: float) -> list[ProbeSample]:
        load = argv(*client_argv(addr, load_mbit, seconds=seconds, size=size, bind=bind, port=port))
        ping = ping_argv.iputils_under_load(addr, count, source=bind)
        srv = server.iperf3_server(port=port)
        try:
            with spent(TRAFFIC, cap=seconds):
                r = bench.host.run(f"{load} >/dev/null 2>&1 &\nsleep 0.5\n{ping}\nwait\n", timeout=seconds + 60)
        finally:
            load_ended()
            srv.stop()
        rtts = {int(m.group(1)): float(m.group(2)) / 1000 for m in RTT_RE.finditer(r.stdout)}
        if not rtts and r.status not in (0, 1):
            raise LoadError(f"ping under load (exit {r.status}): {(r.stderr or r.stdout).strip()[-200:]}")
        return [ProbeSample(0.0, rtts.get(seq)) for seq in range(1, count + 1)]

    return probe
