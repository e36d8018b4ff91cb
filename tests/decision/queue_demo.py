"""Demonstration (issue 41), run by hand as root: a shaper's queue hides an overload from
short trials, and the NDR/PDR test's physical-limit check catches it.

    .venv/bin/python -m tests.decision.queue_demo [--seconds 1]

Three throw-away namespaces (prefix ``ndq<pid>``): a bench, a router and a far end; the
bench's wire is unshaped (it can offer more than the bottleneck), the router's egress to
the far end is a tbf at 100 Mbit/s -- the bottleneck. The real trial
(ipsec_hil.lab.traffic.udp_load.udp_trial: iperf3 -u, the bench port's tx counters) and
the real search run twice against the same statement of the path (128 KiB queue):

1. the router's tbf as the twin built it before issue 41 (``latency 50ms``, 125 kB bucket,
   about 875 kB in all) with the old 1 s trials: the excess of a load a few % above the
   line rate sits in the queue, is delivered, and counts as received;
2. the tbf holding the stated 128 KiB (netns.tbf_sizes), as the twin builds it now.

It prints both searches' bounds and what ``physical_limit_problems`` says. Without the
plugin, the engine or a lab file: plain kernel forwarding at nice -10, so the machine's
load matters less than in the twin (a busy machine still drops a few datagrams at the
ends, which keeps a search below the line rate and so hides nothing: run it on a quiet one). Everything it creates is removed at the end (also on Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from types import SimpleNamespace

from ipsec_hil.lab.decision.bottleneck import Bottleneck, Hop, TWIN_OVERHEAD, physical_limit_problems, search_plan
from ipsec_hil.lab.decision.search import DEFAULT_GOALS, Goal, search
from ipsec_hil.lab.traffic.udp_load import udp_trial
from ipsec_hil_twin.machinery.netns import tbf_sizes

DATAGRAM = 1200
RATE = 100
STATED_QUEUE = 128 * 1024


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


class NsHost:
    """The bench as udp_trial needs it: ``host.run(script)`` in a namespace."""

    def __init__(self, ns: str) -> None:
        self.ns, self.host = ns, self

    def run(self, script: str, timeout: float) -> SimpleNamespace:
        r = subprocess.run(["ip", "netns", "exec", self.ns, "sh", "-c", script], capture_output=True, text=True,
                           timeout=timeout)
        return SimpleNamespace(stdout=r.stdout, stderr=r.stderr, status=r.returncode)


class NsServer:
    """The far end: a one-off iperf3 server per trial."""

    def __init__(self, ns: str) -> None:
        self.ns, self.proc = ns, None

    def iperf3_server(self, port: int) -> "NsServer":
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, "iperf3", "-s", "-1", "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def build(p: str) -> None:
    for ns in ("b", "r", "f"):
        sh("ip", "netns", "add", f"{p}-{ns}")
        sh("ip", "-n", f"{p}-{ns}", "link", "set", "lo", "up")
    sh("ip", "link", "add", f"{p}b", "type", "veth", "peer", "name", f"{p}r")
    sh("ip", "link", "add", f"{p}o", "type", "veth", "peer", "name", f"{p}f")
    for dev, ns, addr in ((f"{p}b", "b", "10.98.1.2/24"), (f"{p}r", "r", "10.98.1.1/24"),
                          (f"{p}o", "r", "10.98.2.1/24"), (f"{p}f", "f", "10.98.2.2/24")):
        sh("ip", "link", "set", dev, "netns", f"{p}-{ns}")
        sh("ip", "-n", f"{p}-{ns}", "addr", "add", addr, "dev", dev)
        sh("ip", "-n", f"{p}-{ns}", "link", "set", dev, "up")
    sh("ip", "-n", f"{p}-b", "route", "add", "10.98.2.0/24", "via", "10.98.1.1")
    sh("ip", "-n", f"{p}-f", "route", "add", "10.98.1.0/24", "via", "10.98.2.1")
    sh("ip", "netns", "exec", f"{p}-r", "sysctl", "-qw", "net.ipv4.ip_forward=1")


def shape(p: str, old: bool) -> str:
    """The router's egress tbf: the pre-issue-41 one, or one holding the stated queue."""
    if old:
        args = ["burst", "125000", "latency", "50ms"]
    else:
        burst, limit = tbf_sizes(RATE, STATED_QUEUE, 1500)
        args = ["burst", str(burst), "limit", str(limit)]
    sh("ip", "netns", "exec", f"{p}-r", "tc", "qdisc", "replace", "dev", f"{p}o", "root", "tbf", "rate",
       f"{RATE}mbit", *args)
    return sh("ip", "netns", "exec", f"{p}-r", "tc", "qdisc", "show", "dev", f"{p}o").stdout.strip()


def teardown(p: str) -> None:
    for ns in ("b", "r", "f"):
        sh("ip", "netns", "del", f"{p}-{ns}", check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="final trial seconds (the old default: 1)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("queue_demo: needs root (network namespaces)", file=sys.stderr)
        return 4
    os.nice(-10)  # iperf3 inherits it: the machine's other load then drops fewer datagrams at the ends
    p = f"ndq{os.getpid() % 100000}"
    path = Bottleneck((Hop(f"{p}-r.{p}o", f"{p}-f.{p}f", RATE, DATAGRAM + 28 + TWIN_OVERHEAD, DATAGRAM,
                           STATED_QUEUE),))
    goals = tuple(Goal(g.name, g.loss_ratio, width=0.02) for g in DEFAULT_GOALS)
    plan = search_plan(path, width=0.02, trial_seconds=args.seconds)
    try:
        build(p)
        for old in (True, False):
            qdisc = shape(p, old)
            trial = udp_trial(NsHost(f"{p}-b"), NsServer(f"{p}-f"), "10.98.2.2", size=DATAGRAM, port=5399,
                              port_ifname=f"{p}b")
            result = search(trial, max_rate=plan.max_rate, min_rate=plan.min_rate, goals=goals,
                            final_duration=plan.final_duration, initial_duration=plan.final_duration / 4)
            print(f"== router's tbf {'before issue 41' if old else 'holding the stated 128 KiB'}: {qdisc}")
            print("\n".join(plan.lines()))
            print("\n".join(result.summary()))
            final = [t.result for t in result.trials if t.result.duration == plan.final_duration]
            drains = [r.drain for r in final if r.drain is not None and r.loss_ratio <= 0.005]
            if drains:
                print(f"longest drain of a final trial within 0.5 % loss: {1000 * max(drains):.1f} ms "
                      f"(the stated queue drains in {STATED_QUEUE * 8 / (RATE * 1e3):.1f} ms)")
            problems = physical_limit_problems(result, plan)
            print("physical-limit check: " + ("; ".join(problems) if problems else "held"))
            print()
    finally:
        teardown(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
