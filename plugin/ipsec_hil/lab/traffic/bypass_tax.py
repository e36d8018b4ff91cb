"""The bypass tax (page 003): what traffic that matches no SA pays for the IPsec stack and
the offload driver being there.

Page 003 (FreeBSD review D20163): with IPsec in the kernel every packet passes the SPD
lookup, which takes a reference on the default policy; a multi-threaded UDP transmit lost
~20 % (16.8 vs 13.8 Mpps, 32 senders). The offload drivers hook the same path. The
measurement: many UDP senders of small datagrams from the bench, forwarded through the
appliance by addresses no SA selects, received beyond it -- once with the IPsec stack and
the driver loaded and the tunnel up ("on"), once with the tunnel down and the driver
unloaded ("off"), interleaved on-off-off-on (ABBA: a drift of the machine's speed
during the four trials weighs on both conditions alike, and only two switches are paid).
The figure is the share of the "off" rate that "on" keeps: delivered datagrams over the
trials' seconds, summed per condition.

Why a set offered load and not the bench's most: a trial knows what it offered
(:func:`udp_senders`: iperf3's own count of datagrams written, against the target;
short by more than :data:`OFFER_TOLERANCE` is "the bench could not offer X", an error,
never a result at X). On hardware the load is the bench port's line rate of small
frames, above what the appliance forwards, so both conditions measure the appliance; a
virtual bench shares two cores with everything and offers 20-45 kpps, varying by 30 %
from second to second under load, so a figure at "the bench's most" would measure the
machine: there the load is set below what the bench keeps up under load (the test states
it), and a cost shows as what the appliance could not forward of it.

Library code: no pytest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ipsec_hil.lab.measuring.quiet import load_ended
from ipsec_hil.lab.parsers import iperf3
from ipsec_hil.lab.timeshare import STREAM, TRAFFIC, spent
from ipsec_hil.lab.remote import argv
from ipsec_hil.lab.traffic.udp_load import LoadError, parse_udp_json

#: A trial whose sender wrote fewer than (1 - this) x the datagrams asked for did not offer
#: its load: the bench, not the path, was the limit (iperf3 catches up a late start within
#: its test, so a loaded machine's sender still meets its count or says it did not).
OFFER_TOLERANCE = 0.10


class BenchShort(LoadError):
    """The bench could not offer the load asked for (its own sender count says so)."""


@dataclass(frozen=True)
class SendersResult:
    """One trial of many UDP senders: what left the bench and what arrived."""

    target_pps: float
    sent: int
    delivered: int
    seconds: float

    @property
    def offered_pps(self) -> float:
        return self.sent / self.seconds

    @property
    def delivered_pps(self) -> float:
        return self.delivered / self.seconds


def senders_argv(addr: str, *, pps: float, senders: int, size: int, seconds: int, bind: str | None,
                 port: int) -> list[str | int]:
    """iperf3 -u with ``senders`` parallel streams of ``size``-byte datagrams, ``pps`` in all
    (``-b`` is per stream, in bits of UDP payload)."""
    per_stream_bits = pps / senders * size * 8
    cmd: list[str | int] = [*iperf3.CLIENT.argv, addr, "-p", port, "-u", "-P", senders, "-l", size,
                            "-b", f"{per_stream_bits / 1e6:.4f}M", "-t", seconds, "--json"]
    return cmd + (["-B", bind] if bind else [])


def udp_senders(bench: Any, server: Any, addr: str, *, pps: float, senders: int = 8, size: int = 64,
                seconds: int = 1, bind: str | None = None, port: int = 5201) -> Callable[[], SendersResult]:
    """``trial()``: ``senders`` UDP senders on the bench to a one-off iperf3 server on
    ``server`` at ``addr``; raises :class:`BenchShort` when the bench wrote fewer than
    (1 - OFFER_TOLERANCE) of ``pps x seconds`` datagrams."""
    cmd = senders_argv(addr, pps=pps, senders=senders, size=size, seconds=seconds, bind=bind, port=port)

    @spent(STREAM)
    def trial() -> SendersResult:
        srv = server.iperf3_server(port=port)
        try:
            with spent(TRAFFIC, cap=seconds):
                r = bench.host.run(argv(*cmd), timeout=seconds + 60)
        finally:
            load_ended()
            srv.stop()
        t = parse_udp_json(r.stdout, pps * size * 8 / 1e6, seconds)
        res = SendersResult(pps, t.sent, t.received, float(seconds))
        asked = math.floor(pps * seconds)
        if res.sent < (1 - OFFER_TOLERANCE) * asked:
            raise BenchShort(f"the bench could not offer {pps:,.0f} datagrams/s of {size} bytes from {senders} "
                             f"senders: it wrote {res.sent:,} of {asked:,} in {seconds} s "
                             f"({res.offered_pps:,.0f}/s, more than {100 * OFFER_TOLERANCE:g} % short); "
                             "no result at that load")
        return res

    return trial


@dataclass(frozen=True)
class TaxTrial:
    index: int
    condition: str  # "on" | "off"
    result: SendersResult


@dataclass(frozen=True)
class BypassTax:
    """The interleaved trials and the share of the "off" rate that "on" kept."""

    trials: tuple[TaxTrial, ...]

    def rate(self, condition: str) -> float:
        """Delivered datagrams a second over the condition's trials together."""
        ts = [t.result for t in self.trials if t.condition == condition]
        return sum(r.delivered for r in ts) / sum(r.seconds for r in ts)

    @property
    def share(self) -> float:
        off = self.rate("off")
        return self.rate("on") / off if off else 0.0

    def table(self) -> str:
        rows = [f"{'#':>2} {'condition':<38} {'asked/s':>8} {'sent':>7} {'delivered':>9} {'delivered/s':>11}"]
        for t in self.trials:
            r = t.result
            rows.append(f"{t.index:>2} {CONDITIONS[t.condition]:<38} {r.target_pps:>8,.0f} {r.sent:>7,} "
                        f"{r.delivered:>9,} {r.delivered_pps:>11,.0f}")
        return "\n".join(rows)


CONDITIONS = {"on": "IPsec + driver loaded, tunnel up", "off": "tunnel down, driver unloaded"}

#: on-off-off-on: starts and ends in the state the tunnel's other tests expect
ORDER = ("on", "off", "off", "on")


def measure_bypass_tax(trial: Callable[[], SendersResult], *, switch_off: Callable[[], None],
                       switch_on: Callable[[], None]) -> BypassTax:
    """Run ``trial`` in :data:`ORDER`, switching between the conditions; the "on" state is
    restored even when a trial or a switch fails (the caller's tunnel is shared)."""
    trials: list[TaxTrial] = []
    state = "on"
    try:
        for i, cond in enumerate(ORDER, 1):
            if cond != state:
                (switch_off if cond == "off" else switch_on)()
                state = cond
            trials.append(TaxTrial(i, cond, trial()))
    finally:
        if state != "on":
            switch_on()
    return BypassTax(tuple(trials))
