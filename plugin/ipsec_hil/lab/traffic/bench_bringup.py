"""`python -m ipsec_hil.lab.traffic.bench_bringup TOPOLOGY [--tunnel many] [--counts 1,6,64,256]`.

Why: the suite's own bring-up (render, write, load, initiate, verify on both ends,
teardown) is what a run pays per tunnel configuration; the lab's IKE daemon alone is flat
per child (``python -m ipsec_hil_twin.ike.bench_scale``) but nothing measured the suite around it.
This brings one tunnel of the topology up with 1, 6, 64, 256 children (its
``children: {count: N, by: tcp_port, first_port: P}`` with N replaced, validated by the
topology model, so the cap applies) through :class:`TunnelProvisioner`, exactly as the
``tunnel`` fixture does (locks held, journal recovered first), times each phase and prints
seconds per child. A figure, not a timed assert: the machine's load moves it.

TOPOLOGY is any lab's topology file: the virtual lab's resolved one (``tools/bench-bringup``
starts the lab, runs this, stops it) or a real lab's. Exit status 2 (ipsec_hil.cli, one
line): a lab file that is missing or invalid, a virtual lab's template (the line names
tools/bench-bringup), a tunnel it lacks, counts it cannot take, an unknown option.
"""

from __future__ import annotations

import getpass
import secrets
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ipsec_hil.cli import ArgumentParser, InputError, load_lab_file
from ipsec_hil.lab.appliance import Appliance
from ipsec_hil.lab.sharing.lock import ApplianceLock
from ipsec_hil.lab.provision import Secret, TunnelPlan, TunnelProvisioner
from ipsec_hil.lab.remote import host_from_mgmt
from ipsec_hil.lab.topology import Topology, TunnelConfig
from ipsec_hil.lab.expectations.hardware import host_profile
from ipsec_hil.lab.topology.messages import describe
from ipsec_hil.lab.topology.tunnels import Children

PHASES = ("install", "load", "initiate", "verify", "terminate", "restore")


class CountingHost:
    """A Host that counts the remote operations and the seconds spent waiting for them.

    Why: the suite's own cost is what it asks the appliance (how many round trips) plus
    what it computes itself (render, parse, judge); the rest is the appliance's work (its
    swanctl, its IKE daemon, its engine). Counting separates the two, so a growth per
    child can be placed on the right side.
    """

    OPS = ("run", "read_file", "write_file_atomic", "exists", "remove", "rename")

    def __init__(self, host: Any) -> None:
        self._host = host
        self.calls = 0
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._host, name)
        if name not in self.OPS:
            return attr

        def counted(*args: Any, **kw: Any) -> Any:
            t0 = time.monotonic()
            try:
                return attr(*args, **kw)
            finally:
                self.calls += 1
                self.seconds += time.monotonic() - t0

        return counted

    def reset(self) -> tuple[int, float]:
        got = (self.calls, self.seconds)
        self.calls, self.seconds = 0, 0.0
        return got


@dataclass
class Figure:
    """One bring-up and teardown of ``children`` children: seconds per phase, and the remote
    operations the suite asked for (count, seconds waiting for them)."""

    children: int
    phases: dict[str, float] = field(default_factory=dict)
    up_s: float = 0.0
    down_s: float = 0.0
    remote_calls: int = 0
    remote_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.up_s + self.down_s

    @property
    def per_child_s(self) -> float:
        return self.total_s / self.children

    @property
    def local_s(self) -> float:
        """The suite's own computing: everything but waiting for the appliances."""
        return self.total_s - self.remote_s


def config_with(topology: Topology, tunnel: str, count: int) -> TunnelConfig:
    """The tunnel's first configuration with ``count`` children split as the topology splits
    them (``by: tcp_port`` from its first_port); the topology model checks the count (its cap,
    the port range) and raises naming the field."""
    t = topology.tunnels[tunnel]
    Children(count=count, by=t.children.by, first_port=t.children.first_port)
    base = t.configs()[0]
    return TunnelConfig(base.outer, base.inner, base.cipher, count)


def measure(apps: dict[str, Appliance], topology: Topology, tunnel: str, count: int, run_id: str) -> Figure:
    """Bring the tunnel up with ``count`` children and down again; the provisioner's timings."""
    plan = TunnelPlan.from_topology(topology, tunnel)
    cfg = config_with(topology, tunnel, count)
    prov = TunnelProvisioner(apps, plan, cfg, Secret(secrets.token_urlsafe(24)), run_id=run_id,
                             initiate_timeout=60)
    fig = Figure(count)
    t0 = time.monotonic()
    try:
        bu = prov.up()
        fig.up_s = time.monotonic() - t0
        if bu.children_up != count:
            raise SystemExit(f"{count} children: only {bu.children_up} up")
    finally:
        t1 = time.monotonic()
        prov.down()
        fig.down_s = time.monotonic() - t1
    fig.phases = dict(prov.timings)
    for a in apps.values():
        calls, seconds = a.host.reset()
        fig.remote_calls += calls
        fig.remote_s += seconds
    return fig


def run(topo: Topology, tunnel: str, counts: list[int]) -> list[Figure]:
    t = topo.tunnels[tunnel]
    names = (t.local.host, t.remote.host)
    apps = {n: Appliance(n, CountingHost(host_from_mgmt(n, topo.hosts[n].mgmt, topo.lab.known_hosts)),
                         host_profile(topo.hosts[n])) for n in names}
    run_id = "bench-" + secrets.token_hex(3)
    holder = f"{getpass.getuser()}@{socket.gethostname()}: bench_bringup {tunnel}"
    locks = [ApplianceLock(a.host, holder, run_id=run_id, wait=600, poll=2) for a in apps.values()]
    figures = []
    try:
        for lk in locks:
            lk.acquire()
        measure(apps, topo, tunnel, 1, run_id)  # warm-up, not shown: first connections, caches
        for n in counts:
            figures.append(measure(apps, topo, tunnel, n, run_id))
            print(row(figures[-1]), flush=True)
    finally:
        for lk in locks:
            lk.release()
        for a in apps.values():
            a.host.close()
    return figures


def header() -> str:
    return (f"{'children':>8} " + " ".join(f"{p:>9}" for p in PHASES)
            + f" {'up s':>7} {'down s':>7} {'s/child':>8} {'remote ops':>10} {'waiting s':>9} {'suite s':>7}")


def row(f: Figure) -> str:
    return (f"{f.children:>8} " + " ".join(f"{f.phases.get(p, 0.0):>9.2f}" for p in PHASES)
            + f" {f.up_s:>7.2f} {f.down_s:>7.2f} {f.per_child_s:>8.4f} {f.remote_calls:>10} {f.remote_s:>9.2f}"
            f" {f.local_s:>7.2f}")


def summary(figs: list[Figure]) -> list[str]:
    """Per child against 6 children's: the whole bring-up and teardown over N (fixed costs --
    files, loads, one --list-sas per end -- shrink with N), the initiate and terminate phases
    over N (where the appliance's per-child work shows), and how many remote operations the
    suite asked for (flat: the suite's side does not grow with N)."""
    six = next((f for f in figs if f.children == 6), None)
    out = []
    for f in figs:
        n = f.children
        parts = [f"{f.per_child_s:.3f} s per child",
                 f"initiate {f.phases.get('initiate', 0) / n:.3f} s/child",
                 f"terminate {f.phases.get('terminate', 0) / n:.3f} s/child",
                 f"{f.remote_calls} remote operations",
                 f"suite's own computing {f.local_s * 1000 / n:.1f} ms/child"]
        if six:
            parts[0] += f" ({f.per_child_s / six.per_child_s:.2f}x 6's)"
            parts[1] += f" ({f.phases.get('initiate', 0) / n / (six.phases.get('initiate', 0) / 6):.2f}x 6's)"
        out.append(f"{n:>8} children: " + ", ".join(parts))
    return out


def _checked(prog: str, args) -> tuple[Topology, list[int]]:
    """The lab file and the counts, refused in one line (InputError) when unusable."""
    topo = load_lab_file(prog, args.topology, then="run this on its lab.resolved.yaml "
                         "(tools/bench-bringup does both, and stops the lab after)")
    if args.tunnel not in topo.tunnels:
        raise InputError(f"{prog}: {args.topology}: no tunnel {args.tunnel!r} (has {', '.join(sorted(topo.tunnels))})")
    try:
        counts = [int(x) for x in args.counts.split(",")]
        for n in counts:
            config_with(topo, args.tunnel, n)
    except ValidationError as exc:  # a count the tunnel's children cannot take: the model's words
        raise InputError(f"{prog}: --counts {args.counts}: {'; '.join(describe(e) for e in exc.errors())}") from None
    except ValueError as exc:  # not a number
        raise InputError(f"{prog}: --counts {args.counts}: {exc}") from None
    return topo, counts


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m ipsec_hil.lab.traffic.bench_bringup", description=__doc__.split("\n")[0])
    ap.add_argument("topology")
    ap.add_argument("--tunnel", default="many")
    ap.add_argument("--counts", default="1,6,64,256")
    args = ap.parse_args(argv)
    try:
        topo, counts = _checked(ap.prog, args)
    except InputError as exc:
        return exc.report()
    print(header(), flush=True)
    figs = run(topo, args.tunnel, counts)
    for line in summary(figs):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
