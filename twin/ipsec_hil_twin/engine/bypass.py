"""Fault `bypass_tax`: a per-packet cost on every packet the appliance's stack takes in
while the offload driver is loaded -- the forwarded packets that match no SA included.

Why (page 003, seeds/003): with IPsec in the kernel, every packet FreeBSD forwards or
sends passes the SPD lookup (ipsec4_forward/ipsec4_output -> key_allocsp), which takes
and drops a reference on the default policy (key_addref/key_freesp): one atomic on one
cache line that every CPU bounces, ~20 % of a multi-threaded UDP transmit (16.8 vs 13.8
Mpps, 32 senders).  An offload driver that hooks that path adds its own share.  Such a
cost is a serialisation point: every packet holds the same resource for c seconds, so
the path carries at most 1/c packets a second, queues behind it, and drops beyond.

How the twin models it (Linux forwards the packets that no SA selects, not the engine):
while the fault is on AND the driver is loaded, every port's ingress is redirected
(tc ingress + u32 match-all + mirred) into one IFB device of the namespace, `bt0`, whose
root qdisc is a tbf at 10 Gbit/s with a size table adding `us` microseconds of that rate
to every packet (stab overhead): one server for the whole appliance, `us` per packet,
a 50 ms queue, the excess dropped.  At 10 Gbit/s a packet's own bytes cost next to
nothing (1,500 bytes: 1.2 us), so the cost is per packet, not per byte.  Driver
unloaded or fault off: the redirect and bt0 are removed, the path is Linux's own again.
The kernel here has no police action nor netem (tbf, htb, ingress, u32, mirred, ifb are
what it has), hence the IFB.

The engine's control process calls :meth:`BypassCost.sync` from its fault check (every
0.1 s) and on set_driver; a fresh engine first removes whatever an earlier one left.
"""
from __future__ import annotations

import subprocess
import sys

TC = "/usr/sbin/tc"
IP = "/usr/sbin/ip"
IFB = "bt0"
RATE_BPS = 10_000_000_000  # bt0's server: fast enough that bytes cost ~nothing
QUEUE_S = 0.05  # the backlog the cost may build before packets drop (a NIC ring's worth)
BURST_PACKETS = 40  # packets the server may take back to back after an idle spell


def overhead_bytes(cost_us: float) -> int:
    """Bytes the size table adds to each packet so that it costs `cost_us` at RATE_BPS."""
    return max(1, round(cost_us * 1e-6 * RATE_BPS / 8))


class BypassCost:
    """Owns bt0 and the ingress redirects of the namespace's ports (`ifnames`)."""

    def __init__(self, ifnames: list[str]) -> None:
        self.ifnames = list(ifnames)
        self.cost_us: float | None = None
        self.clear()

    def _run(self, *args: str, check: bool = True) -> bool:
        r = subprocess.run(list(args), capture_output=True, text=True)
        if check and r.returncode != 0:
            print(f"engine: bypass_tax: {' '.join(args)}: {r.stderr.strip()}", file=sys.stderr, flush=True)
        return r.returncode == 0

    def clear(self) -> None:
        """No redirect, no bt0 (absent is fine: a fresh namespace has neither)."""
        for ifn in self.ifnames:
            self._run(TC, "qdisc", "del", "dev", ifn, "ingress", check=False)
        self._run(IP, "link", "del", IFB, check=False)
        self.cost_us = None

    def sync(self, cost_us: float | None) -> None:
        """Make the namespace carry `cost_us` per packet (None: no cost)."""
        if cost_us == self.cost_us:
            return
        if cost_us is None or cost_us <= 0:
            self.clear()
            return
        over = overhead_bytes(cost_us)
        burst = BURST_PACKETS * (over + 65536)
        if self.cost_us is None:
            self._run(IP, "link", "add", IFB, "type", "ifb")
            self._run(IP, "link", "set", IFB, "up")
        ok = self._run(TC, "qdisc", "replace", "dev", IFB, "root", "handle", "1:", "stab", "overhead", str(over),
                       "tbf", "rate", f"{RATE_BPS // 1_000_000}mbit", "burst", str(burst),
                       "latency", f"{int(QUEUE_S * 1000)}ms")
        if self.cost_us is None:
            for ifn in self.ifnames:
                ok &= self._run(TC, "qdisc", "add", "dev", ifn, "handle", "ffff:", "ingress")
                ok &= self._run(TC, "filter", "add", "dev", ifn, "parent", "ffff:", "protocol", "all", "pref", "41",
                                "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect",
                                "dev", IFB)
        self.cost_us = cost_us
        print(f"engine: bypass_tax: {cost_us:g} us a packet on {', '.join(self.ifnames)} "
              f"({'applied' if ok else 'INCOMPLETE'})", file=sys.stderr, flush=True)
