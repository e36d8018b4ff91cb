"""`python -m ipsec_hil_twin.bench`: one TCP stream, 10 s each way, through (a) the twin's ESP
engine (AES-GCM-16, and AES-CBC + HMAC-SHA-256), (b) strongSwan 5.9.8's user-space ESP
(charon-systemd with kernel-libipsec, ESP in UDP 4500, AES-GCM-16-256), (c) plain
forwarding and (d) the engine design's floor (ipsec_hil_twin.engine.floor: TUN, ESP and raw sockets,
nothing of the engine), all on the same four-namespace layout (hostA | gwA | gwB | hostB,
ipsec_hil_twin.engine.minilab).  ``--runs N`` (default 3) measures every path N times, one run
after the other (the paths of one run side by side), and reports each run and the median
per path and direction; the ratios twin/ipsec_hil_twin/strongSwan (issue 15's target: >= 14x both ways)
and CBC/GCM (target within 30 %) are those of the medians. When 14x is missed, the floor
says whether the design (per-packet Python) or the engine falls short, and the floor's
kernel share whether any datapath of one system call per packet could reach it here.
With ``--jumbo always`` (or ``auto`` when 1,500 misses the target) the same is measured
at MTU 9000, labelled so.

Why strongSwan is configured from files in the run dir: each charon gets its own
strongswan.conf (STRONGSWAN_CONF), vici socket and swanctl.conf, so nothing in /etc is
touched and several instances coexist with other labs on the machine.  The PSK is a
random per-run value that is never printed.  Everything (namespaces, veths, daemons,
files) is removed at the end, also on failure or Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ipsec_hil_twin.machinery.cpustat import machine_cpu_seconds
from ipsec_hil_twin.engine.minilab import ADDR, LAN, REPO, MiniLab
from ipsec_hil_twin.machinery.runtime import stop_process, wait_for_socket

CHARON = shutil.which("charon-systemd") or "/usr/sbin/charon-systemd"
SWANCTL = shutil.which("swanctl") or "/usr/sbin/swanctl"
PLUGINS = ("random nonce aes sha1 sha2 hmac gcm kdf openssl pem pkcs1 x509 pubkey "
           "kernel-libipsec kernel-netlink socket-default vici")
HB4 = ADDR["hB"]["lan"][0].split("/")[0]


def _ip4(role: str, port: str) -> str:
    return ADDR[role][port][0].split("/")[0]


@dataclass
class PathResult:
    name: str
    fwd: float | None = None
    rev: float | None = None
    notes: list[str] = field(default_factory=list)
    kernel_ceiling: list[float] = field(default_factory=list)
    """Mbit/s all cores would carry if the datapath's own user time were zero (the kernel's
    share per packet alone: both ends' system time and the rest), one per profiled stream."""


def iperf(lab: MiniLab, seconds: int, reverse: bool) -> float:
    """One TCP stream hostA -> hostB (reverse: hostB -> hostA); receiver's Mbit/s."""
    srv = lab.popen("hB", ["iperf3", "-s", "-1", "-B", HB4], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.4)
        argv = ["iperf3", "-c", HB4, "-t", str(seconds), "-J"] + (["-R"] if reverse else [])
        r = lab.run("hA", argv, timeout=seconds + 60)
        if r.returncode != 0:
            raise RuntimeError(f"iperf3 failed: {r.stdout[-300:]} {r.stderr[-300:]}")
        return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
    finally:
        if srv.poll() is None:
            srv.kill()
        srv.wait()


def ip_fragments_made(lab: MiniLab) -> int:
    """IPv4 fragments both gateways' kernels have made (/proc/net/snmp Ip: FragCreates)."""
    total = 0
    for gw in ("gA", "gB"):
        head, values = [ln.split() for ln in lab.run(gw, ["cat", "/proc/net/snmp"], check=True).stdout.splitlines()
                        if ln.startswith("Ip:")][:2]
        total += int(values[head.index("FragCreates")])
    return total


def both_ways(lab: MiniLab, name: str, seconds: int, profile=None, into: PathResult | None = None) -> PathResult:
    """One stream each way (into ``into`` when given); ``profile(direction, measure)``
    wraps each to read CPU. Notes the outer fragments the gateways made meanwhile: the
    twin models FreeBSD's net.inet.ipsec.dfbit 0 (a forwarded IPv4 packet of any size is
    encrypted and its outer DF cleared), so hostA's 1,500-byte packets leave as two
    fragments each, which the peer's kernel reassembles; strongSwan's TUN (MTU 1,400) and
    the floor's route (the exact ESP limit) make the sender send what fits instead. On
    12-05, five alternating pairs of 4 s A->B streams on one twin tunnel (routes' PMTU cache
    flushed between them) carried a median 1,001 Mbit/s with dfbit 0 (two fragments a
    packet) and 964 with dfbit 1 (none): more, smaller packets cost what fragments do."""
    res = into if into is not None else PathResult(name)
    for role in ("hA", "gA", "gB", "hB"):
        # a path MTU an earlier path taught the hosts (the floor's route, strongSwan's TUN)
        # would otherwise size this path's packets: each path starts from the link MTU
        lab.run(role, ["ip", "route", "flush", "cache"], check=True)
    frags = ip_fragments_made(lab)
    if profile is None:
        res.fwd = iperf(lab, seconds, False)
        res.rev = iperf(lab, seconds, True)
    else:
        res.fwd = profile("A->B", lambda: iperf(lab, seconds, False))
        res.rev = profile("B->A", lambda: iperf(lab, seconds, True))
    res.notes.append(f"IPv4 fragments the gateways made during the two streams: {ip_fragments_made(lab) - frags}")
    print(f"  {name:<34} A->B {res.fwd:8.0f}  B->A {res.rev:8.0f} Mbit/s", flush=True)
    return res


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process and all its descendants (live ones)."""
    user = system = 0.0
    todo, seen = [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            user += int(fields[11]) / _TICK
            system += int(fields[12]) / _TICK
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return user, system


def cpu_profiler(res: PathResult, pids: dict[str, int], sealed: Callable[[str], int]):
    """Why a path's rate is what it is: CPU seconds of each gateway's datapath processes
    (``pids``: gateway -> process, its workers included) per ESP packet it sealed or opened
    (``sealed(gateway)``: packets sealed so far), user and system apart, and how busy the
    machine's cores were, during each stream -- issue 15 asks for the profile that shows
    whether Python's per-packet cost can reach the target on two cores. System time is
    the kernel's per-packet work any engine on TUN and raw sockets pays; user time is the
    engine's own."""

    def profile(direction: str, measure):
        src, dst = ("gA", "gB") if direction == "A->B" else ("gB", "gA")
        c0 = {gw: tree_cpu_seconds(pids[gw]) for gw in (src, dst)}
        n0 = sealed(src)
        m0, w0 = machine_cpu_seconds()
        mbit = measure()
        m1, w1 = machine_cpu_seconds()
        n = sealed(src) - n0
        c1 = {gw: tree_cpu_seconds(pids[gw]) for gw in (src, dst)}
        if n:
            us = {gw: [(c1[gw][k] - c0[gw][k]) / n * 1e6 for k in (0, 1)] for gw in (src, dst)}
            seal, opened = sum(us[src]), sum(us[dst])
            cores = os.cpu_count() or 1
            whole = (m1 - m0) / n * 1e6
            rest = whole - seal - opened
            busy = (m1 - m0) / max(w1 - w0, 1e-9)
            kernel = us[src][1] + us[dst][1] + rest
            res.kernel_ceiling.append(mbit / max(busy, 1e-9) * whole / max(kernel, 1e-9))
            res.notes.append(
                f"{direction}: {n} ESP packets; CPU per packet: sealing {seal:.1f} us (user {us[src][0]:.1f}, "
                f"system {us[src][1]:.1f}), opening {opened:.1f} us (user {us[dst][0]:.1f}, system "
                f"{us[dst][1]:.1f}) (the datapath processes' own time), everything else (iperf3 "
                f"both ends, the kernel's forwarding, TUN and sockets in interrupt context) {rest:.1f} us, the "
                f"machine {whole:.1f} us in all, {busy * 100:.0f} % busy on {cores} cores; at this cost "
                f"all {cores} cores would carry {mbit / max(busy, 1e-9):.0f} Mbit/s, and "
                f"{res.kernel_ceiling[-1]:.0f} Mbit/s with no user time at all (the kernel's {kernel:.1f} us alone)")
        return mbit

    return profile


def plain(lab: MiniLab, seconds: int) -> PathResult:
    routes = (("gA", LAN["gB"][0], _ip4("gB", "wan")), ("gB", LAN["gA"][0], _ip4("gA", "wan")))
    for gw, dst, via in routes:
        lab.run(gw, ["ip", "route", "add", dst, "via", via], check=True)
    try:
        return both_ways(lab, "plain forwarding", seconds)
    finally:
        for gw, dst, via in routes:
            lab.run(gw, ["ip", "route", "del", dst, "via", via])


def decoy_tunnels(lab: MiniLab, cipher: str, count: int) -> None:
    """``count`` SA pairs the stream never uses (each its own TCP port of the same LANs,
    below iperf3's 5201), installed BEFORE the measured pair: a lookup that walked the
    table would pay for all of them on every packet (issue 15: the engine's per-packet
    cost flat in the number of associations)."""
    for i in range(count):
        port = 1000 + i
        lab.tunnel(cipher, "ipv4", local_ts=[f"{LAN['gA'][0]}[tcp/{port}]"], remote_ts=[f"{LAN['gB'][0]}[tcp/{port}]"],
                   v6_routes=False)


def twin(lab: MiniLab, seconds: int, cipher: str, sas: int = 1) -> PathResult:
    for gw in ("gA", "gB"):
        lab.start_engine(gw)
    try:
        decoy_tunnels(lab, cipher, sas - 1)
        lab.tunnel(cipher, "ipv4")
        a0 = lab.call("gA", "counters")["driver"]
        b0 = lab.call("gB", "counters")["driver"]
        res = PathResult(f"twin engine {cipher}" + (f", {sas} SA pairs" if sas > 1 else ""))
        profile = cpu_profiler(res, {gw: lab.engines[gw].pid for gw in ("gA", "gB")},
                               lambda gw: lab.call(gw, "counters")["driver"]["tx_encrypt"])
        both_ways(lab, res.name, seconds, profile=profile, into=res)
        time.sleep(0.5)
        a1 = lab.call("gA", "counters")["driver"]
        b1 = lab.call("gB", "counters")["driver"]
        ab = (a1["tx_encrypt"] - a0["tx_encrypt"], b1["FROM_WIRE_TO_IPSEC_DECR"] - b0["FROM_WIRE_TO_IPSEC_DECR"])
        ba = (b1["tx_encrypt"] - b0["tx_encrypt"], a1["FROM_WIRE_TO_IPSEC_DECR"] - a0["FROM_WIRE_TO_IPSEC_DECR"])
        res.notes.append(f"ESP frames A->B sent/received {ab[0]}/{ab[1]}, B->A {ba[0]}/{ba[1]}")
        return res
    finally:
        for gw in ("gA", "gB"):
            lab.stop_engine(gw)


FLOOR_TUN = "floor0"


def floor(lab: MiniLab, seconds: int) -> PathResult:
    """The design's floor (ipsec_hil_twin.engine.floor) on the same layout: ESP between TUN and raw
    sockets, one process per direction, nothing of the engine's FreeBSD model -- what any
    per-packet Python engine of this design carries on this machine."""
    res = PathResult("floor: TUN + ESP + raw sockets only")
    spis = (secrets.randbits(31) | 0x1000, secrets.randbits(31) | 0x1000)
    keys = (secrets.token_hex(36), secrets.token_hex(36))
    procs: dict[str, subprocess.Popen] = {}
    try:
        for k, (gw, peer) in enumerate((("gA", "gB"), ("gB", "gA"))):
            d = lab.host_dir(gw)
            ready, log = d / "floor.ready", d / "floor.log"
            ready.unlink(missing_ok=True)
            with open(log, "wb") as out:
                p = procs[gw] = lab.popen(gw, [sys.executable, "-m", "ipsec_hil_twin.engine.floor", "--src", _ip4(gw, "wan"),
                                               "--peer", _ip4(peer, "wan"), "--lan", LAN[peer][0], "--path-mtu",
                                               str(lab.mtu), "--tun", FLOOR_TUN, "--ready", str(ready)],
                                          stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, cwd=str(REPO))
            p.stdin.write(json.dumps({"out": {"spi": spis[k], "enc_key": keys[k]},
                                      "in": {"spi": spis[1 - k], "enc_key": keys[1 - k]}}).encode())
            p.stdin.close()
            deadline = time.monotonic() + 15
            while not ready.exists():
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"floor forwarder in {gw} not ready (exit {p.poll()}): "
                                       f"{log.read_text(errors='replace')[-1500:]}")
                time.sleep(0.05)

        def sealed(gw: str) -> int:  # packets its TUN handed to the forwarder
            out = lab.run(gw, ["ip", "-s", "-j", "link", "show", "dev", FLOOR_TUN], check=True).stdout
            return int(json.loads(out)[0]["stats64"]["tx"]["packets"])

        both_ways(lab, res.name, seconds, profile=cpu_profiler(res, {gw: p.pid for gw, p in procs.items()}, sealed),
                  into=res)
        return res
    finally:
        for p in procs.values():
            stop_process(p)


class StrongSwan:
    """Two charon-systemd instances (kernel-libipsec) in gwA/gwB, one child."""

    def __init__(self, lab: MiniLab) -> None:
        self.lab = lab
        self.procs: list[subprocess.Popen] = []
        self.psk = secrets.token_hex(16)

    def _dir(self, gw: str) -> Path:
        return self.lab.run_dir / f"strongswan-{gw}"

    def _env(self, gw: str) -> dict:
        return dict(os.environ, STRONGSWAN_CONF=str(self._dir(gw) / "strongswan.conf"))

    def start(self) -> None:
        peers = {"gA": ("gB",), "gB": ("gA",)}
        for gw, (other,) in peers.items():
            d = self._dir(gw)
            d.mkdir(parents=True, exist_ok=True)
            me, peer = _ip4(gw, "wan"), _ip4(other, "wan")
            (d / "strongswan.conf").write_text(
                "charon-systemd {\n"
                f"  load = {PLUGINS}\n"
                "  journal {\n    default = -1\n  }\n"
                "  filelog {\n    log {\n"
                f"      path = {d}/charon.log\n      default = 1\n    }}\n  }}\n"
                "  plugins {\n"
                f"    vici {{\n      socket = unix://{d}/charon.vici\n    }}\n"
                "    kernel-libipsec {\n      load = yes\n    }\n"
                "  }\n}\n"
                f"swanctl {{\n  socket = unix://{d}/charon.vici\n}}\n")
            conf = (
                "connections {\n  bench {\n"
                f"    local_addrs = {me}\n    remote_addrs = {peer}\n"
                "    proposals = aes256-sha256-ecp256\n"
                f"    local {{\n      auth = psk\n      id = {me}\n    }}\n"
                f"    remote {{\n      auth = psk\n      id = {peer}\n    }}\n"
                "    children {\n      net {\n"
                f"        local_ts = {LAN[gw][0]}\n        remote_ts = {LAN[other][0]}\n"
                "        esp_proposals = aes256gcm16\n"
                "      }\n    }\n  }\n}\n"
                "secrets {\n  ike-bench {\n"
                f"    id-1 = {me}\n    id-2 = {peer}\n    secret = {self.psk}\n"
                "  }\n}\n")
            fd = os.open(d / "swanctl.conf", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(conf)
            log = open(d / "charon.out", "wb")
            self.procs.append(self.lab.popen(gw, [CHARON], env=self._env(gw), stdout=log,
                                             stderr=subprocess.STDOUT))
        for gw, proc in zip(peers, self.procs):
            d = self._dir(gw)
            wait_for_socket(d / "charon.vici", proc, f"charon in {gw}", d / "charon.out", timeout=20)
            self._swanctl(gw, "--load-all", "--file", str(self._dir(gw) / "swanctl.conf"))
        out = self._swanctl("gA", "--initiate", "--child", "net", timeout=60)
        if "initiate completed successfully" not in out:
            raise RuntimeError("strongSwan child did not come up")

    def _swanctl(self, gw: str, *args: str, timeout: float = 30) -> str:
        r = subprocess.run(["ip", "netns", "exec", self.lab.ns(gw), SWANCTL, *args], env=self._env(gw),
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"swanctl {args[0]} in {gw} failed ({r.returncode}): {r.stdout[-400:]}")
        return r.stdout

    def stop(self) -> None:
        for p in self.procs:
            stop_process(p, timeout=10)
        self.procs.clear()


def strongswan(lab: MiniLab, seconds: int) -> PathResult:
    ss = StrongSwan(lab)
    try:
        ss.start()
        res = both_ways(lab, "strongSwan 5.9.8 libipsec aes-gcm-16", seconds)
        res.notes.append("ESP in UDP 4500 (kernel-libipsec always encapsulates)")
        return res
    finally:
        ss.stop()


def run_layout(mtu: int, seconds: int, sas: int = 1) -> dict[str, PathResult]:
    print(f"layout hostA|gwA|gwB|hostB, MTU {mtu}, one TCP stream, {seconds} s each way", flush=True)
    lab = MiniLab(mtu=mtu)
    lab.build(engines=False)
    try:
        out = {"plain": plain(lab, seconds)}
        out["twin_gcm"] = twin(lab, seconds, "aes-gcm-16")
        out["twin_cbc"] = twin(lab, seconds, "aes-cbc-hmac-sha256")
        out["floor"] = floor(lab, seconds)
        if sas > 1:
            out["twin_gcm_many"] = twin(lab, seconds, "aes-gcm-16", sas=sas)
        out["strongswan"] = strongswan(lab, seconds)
        return out
    finally:
        lab.close()


def ratios(r: dict[str, PathResult]) -> dict[str, float]:
    g, c, s = r["twin_gcm"], r["twin_cbc"], r["strongswan"]
    out = {"twin/ipsec_hil_twin/strongswan A->B": g.fwd / s.fwd, "twin/ipsec_hil_twin/strongswan B->A": g.rev / s.rev,
           "cbc/gcm A->B": c.fwd / g.fwd, "cbc/gcm B->A": c.rev / g.rev,
           "twin/ipsec_hil_twin/plain A->B": g.fwd / r["plain"].fwd}
    if "twin_gcm_many" in r:
        m = r["twin_gcm_many"]
        out.update({"many SAs/one A->B": m.fwd / g.fwd, "many SAs/one B->A": m.rev / g.rev})
    if "floor" in r:
        f = r["floor"]
        out.update({"floor/strongswan A->B": f.fwd / s.fwd, "floor/strongswan B->A": f.rev / s.rev,
                    "twin/ipsec_hil_twin/floor A->B": g.fwd / f.fwd, "twin/ipsec_hil_twin/floor B->A": g.rev / f.rev})
    return out


#: issue 15: the twin's engine at least this many times strongSwan kernel-libipsec, each way
TARGET_RATIO = 14.0
#: ... and AES-CBC + HMAC-SHA-256 within this fraction of AES-GCM
CBC_WITHIN = 0.30


def median_run(runs: list[dict[str, PathResult]]) -> dict[str, PathResult]:
    """Per path and direction, the median over the runs (notes of every run kept)."""
    out: dict[str, PathResult] = {}
    for key in runs[0]:
        m = PathResult(runs[0][key].name)
        m.fwd = statistics.median(r[key].fwd for r in runs)
        m.rev = statistics.median(r[key].rev for r in runs)
        m.notes = [n for i, r in enumerate(runs, 1) for n in (f"run {i}: {x}" for x in r[key].notes)]
        m.kernel_ceiling = [c for r in runs for c in r[key].kernel_ceiling]
        out[key] = m
    return out


def report(mtu: int, runs: list[dict[str, PathResult]]) -> bool:
    r = median_run(runs)
    if len(runs) > 1:
        print(f"median of {len(runs)} runs at MTU {mtu} (Mbit/s):")
        for key, p in r.items():
            each = ", ".join(f"{x[key].fwd:.0f}/{x[key].rev:.0f}" for x in runs)
            print(f"  {p.name:<34} A->B {p.fwd:8.0f}  B->A {p.rev:8.0f}   (runs A->B/B->A: {each})")
    q = ratios(r)
    print(f"ratios at MTU {mtu}{' (medians)' if len(runs) > 1 else ''}:")
    for k, v in q.items():
        print(f"  {k:<24} {v:6.2f}")
    if len(runs) > 1:
        print(per_run_ratios(runs))
    for p in r.values():
        for n in p.notes:
            print(f"  note ({p.name}): {n}")
    ok = q["twin/ipsec_hil_twin/strongswan A->B"] >= TARGET_RATIO and q["twin/ipsec_hil_twin/strongswan B->A"] >= TARGET_RATIO
    ok30 = abs(1 - q["cbc/gcm A->B"]) <= CBC_WITHIN and abs(1 - q["cbc/gcm B->A"]) <= CBC_WITHIN
    print(f"  target twin >= {TARGET_RATIO:g}x strongSwan both ways: {'met' if ok else 'NOT met'}; "
          f"CBC within {CBC_WITHIN:.0%} of GCM: {'met' if ok30 else 'NOT met'}")
    if not ok and "floor/strongswan A->B" in q:
        print("  " + floor_verdict(q, r["floor"], r["strongswan"]))
    return ok


def per_run_ratios(runs: list[dict[str, PathResult]]) -> str:
    """The target ratios of each run on its own, with their median: shown beside the
    verdicts (which are those of the medians per path, as issue 15 asks), because the
    paths of one run are measured within a minute or two of each other and the machine's
    speed drifts between runs (stop 36: the same code 6.1 to 10.0 us of user time a packet)."""
    keys = ("twin/ipsec_hil_twin/strongswan A->B", "twin/ipsec_hil_twin/strongswan B->A", "cbc/gcm A->B", "cbc/gcm B->A")
    each = [ratios(r) for r in runs]
    lines = ["ratios run by run (not the verdict's basis):"]
    for k in keys:
        vals = [q[k] for q in each]
        lines.append(f"  {k:<24} {', '.join(f'{v:.2f}' for v in vals)}   (median {statistics.median(vals):.2f})")
    return "\n".join(lines)


def floor_verdict(q: dict[str, float], floor_path: PathResult | None = None, ss: PathResult | None = None) -> str:
    """What the floor says about a missed target: the design's limit, or the engine's gap;
    with the floor's profile, also whether the kernel's share alone leaves room for it."""
    low = min(q["floor/strongswan A->B"], q["floor/strongswan B->A"])
    kernel = ""
    if floor_path is not None and ss is not None and floor_path.kernel_ceiling:
        top = statistics.median(floor_path.kernel_ceiling)
        need = TARGET_RATIO * max(ss.fwd, ss.rev)
        kernel = (f"; the kernel's per-packet work on this path alone (TUN, raw sockets, forwarding: the floor's "
                  f"system time and the rest) would let the cores carry {top:.0f} Mbit/s, "
                  + (f"below the {need:.0f} Mbit/s of {TARGET_RATIO:g}x: not even a datapath without user time "
                     f"(C) reaches it with one system call per packet" if top < need else
                     f"above the {need:.0f} Mbit/s of {TARGET_RATIO:g}x: a datapath with little user time (C) could"))
    if low < TARGET_RATIO:
        return (f"the design's floor (TUN + ESP + raw sockets, per-packet Python, nothing of the engine) carries "
                f"only {low:.2f}x strongSwan here: no change to the engine's own code reaches {TARGET_RATIO:g}x on "
                f"this machine; that takes another design (fewer system calls and Python calls per packet: "
                f"TUN offloads with GSO/GRO, batched sockets, or the per-packet loop in C){kernel}")
    return (f"the design's floor carries {low:.2f}x strongSwan here: the target is within this design's reach; "
            f"the engine runs at {min(q['twin/ipsec_hil_twin/floor A->B'], q['twin/ipsec_hil_twin/floor B->A']):.2f}x its floor{kernel}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ipsec_hil_twin.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3, help="measure every path this many times; medians reported")
    ap.add_argument("--sas", type=int, default=1,
                    help="also measure GCM with this many SA pairs installed (the stream's last): per-packet cost vs N")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--jumbo", choices=("auto", "always", "never"), default="auto",
                    help=f"also measure at MTU 9000 (auto: when 1500 misses {TARGET_RATIO:g}x)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("ipsec_hil_twin.bench: needs root (network namespaces)", file=sys.stderr)
        return 2
    if args.runs < 1:
        ap.error(f"--runs must be at least 1, got {args.runs}")
    if not 1 <= args.sas <= 512:
        ap.error(f"--sas must be 1..512, got {args.sas}")

    def measure(mtu: int) -> list[dict[str, PathResult]]:
        runs = []
        for i in range(1, args.runs + 1):
            if args.runs > 1:
                print(f"-- run {i} of {args.runs} --", flush=True)
            runs.append(run_layout(mtu, args.seconds, args.sas))
        return runs

    results = {args.mtu: measure(args.mtu)}
    met = report(args.mtu, results[args.mtu])
    if args.jumbo == "always" or (args.jumbo == "auto" and not met and args.mtu != 9000):
        print("\n-- the same layout at MTU 9000 (jumbo frames; labelled, not the 1,500-byte result) --")
        results[9000] = measure(9000)
        report(9000, results[9000])
    if args.json:
        args.json.write_text(json.dumps(
            {str(m): {"runs": [{k: {"fwd": v.fwd, "rev": v.rev, "notes": v.notes, "kernel_ceiling": v.kernel_ceiling}
                                for k, v in r.items()} for r in runs],
                      "median": {k: {"fwd": v.fwd, "rev": v.rev} for k, v in median_run(runs).items()}}
             for m, runs in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
