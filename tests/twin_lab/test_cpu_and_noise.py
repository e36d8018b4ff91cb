"""Issue 41 on a running virtual lab: the appliance's CPU as FreeBSD shows it, a build that
costs more CPU per packet, and the lab file's run-to-run noise.

The lab (tests/twin_lab/lab_cpu_noise.yaml, engines only) has two XGS 136s on paths of
their own to one XGS 3300; an association pair each, installed over engine.sock.

- kern.cp_time's intr ticks grow by what the pages say a packet costs an XGS 136: page
  002's 29 % of its 2 CPUs for 30 s over 2,358,711 frames (7.377 us a frame at 915
  Mbit/s, scaled to this lab's 20 Mbit/s port: the page's CPU share at line rate), times
  stathz (127), for every ESP packet its engine seals or opens -- within the one tick two
  floored reads can differ by;
- with a build holding `twin-cpu-factor=1.25` loaded the way the suite loads a build
  (kldunload, kldload of the file), each offloaded packet costs 1.25 times that; with the
  same build refusing the associations (fault nic_refuses_sa) the kernel runs them and a
  packet costs the base again (the factor is the driver's time; ipsec_hil_twin.engine.cost
  states that choice);
- noisy136 states `noise: {rate_sd: 0.05, epoch_s: 0.5}`: a stream over its paced port
  carries, epoch by epoch, the pace times that epoch's drawn factor (the lab file's
  documented draw, recomputed here), while quiet136's stream, without noise, carries the
  pace in every epoch.

Each expectation is computed here from the pages and the documented formulas, not read
from the twin's tables: a twin that charged the wrong cost, applied the factor to the
wrong packets or drew other factors fails.
"""
from __future__ import annotations

import ipaddress
import json
import math
import random
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lab_factory import lab_fixture
from ipsec_hil_twin import faults as fault_registry
from ipsec_hil_twin.engine.client import EngineClient

pytestmark = pytest.mark.needs_root

HERE = Path(__file__).parent
lab = lab_fixture(topology=HERE / "lab_cpu_noise.yaml", components=("engine",))

STATHZ = 127
PACE_MBIT = 20  # lab_cpu_noise.yaml: each XGS 136's port8 (its only rated port)
COST_136_S = 0.29 * 2 * 30 / 2_358_711 * 915 / PACE_MBIT
"""Page 002: 29 % busy of the XGS 136's 2 CPUs for the 30 s run, over the 2,358,711 frames
its host handed the engine: CPU seconds a frame (7.377e-6) at the page's 915 Mbit/s; the
twin's links are a scale model, so at this lab's 20 Mbit/s a frame costs 915/20 times
that -- the page's CPU share at the link's rate (ipsec_hil_twin.engine.cost.scaled_ns)."""
PAYLOAD = 1000  # UDP bytes a datagram of the noise test's streams
#: a frame of such a datagram on the wire: inner IPv4 1,028 + ESP GCM (8 + IV 8, padded to
#: 1,032 with its 2-byte trailer, ICV 16) + outer IPv4 20 + Ethernet 14 + preamble/FCS/gap 24
WIRE = 1028 + 8 + 8 + 4 + 16 + 20 + 14 + 24
NOISE = {"rate_sd": 0.05, "cpu_sd": 0.02, "epoch_s": 0.5, "seed": 0}  # the lab file's, defaults filled

ENDS = {  # appliance: (its port8, its LAN, the 3300's port facing it)
    "quiet136": ("203.0.113.2", "198.51.100.64/26", "203.0.113.1"),
    "noisy136": ("203.0.113.18", "198.51.100.128/26", "203.0.113.17"),
}
DUT_LAN, DUT_LAN_IP = "198.51.100.0/26", "198.51.100.1"


def hd(lab, host: str) -> Path:
    return lab.run_dir / "hosts" / host


def engine(lab, host: str, op: str, **kw) -> dict:
    with EngineClient(hd(lab, host) / "engine.sock") as c:
        return c.call(op, **kw)


def in_ns(lab, host: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", lab.namespaces[host], *argv], capture_output=True,
                          text=True, **kw)


def fbsd(lab, host: str, *argv: str) -> subprocess.CompletedProcess:
    """A FreeBSD command of the appliance through its bin/ wrapper (no SSH in this lab)."""
    return subprocess.run([str(hd(lab, host) / "bin" / argv[0]), *argv[1:]], capture_output=True, text=True,
                          timeout=60)


def intr_ticks(lab, host: str) -> int:
    r = fbsd(lab, host, "sysctl", "-n", "kern.cp_time")
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[3])  # user nice sys intr idle


def settled(lab, host: str) -> dict:
    """The engine's counters once two reads 0.1 s apart agree (the loops have flushed)."""
    prev = engine(lab, host, "counters")
    for _ in range(50):
        time.sleep(0.1)
        cur = engine(lab, host, "counters")
        if cur == prev:
            return cur
        prev = cur
    raise AssertionError(f"{host}: counters did not settle")


def handled(c: dict) -> int:
    """ESP packets an XGS 136 sealed or opened: the driver's (npuep) and the kernel's."""
    d, e = c["driver"], c["esp"]
    return d["tx_accel"] + d["tx_taken"] + d["rx_done"] + d["rx_v6"] + e["sent-packets"] + e["received-packets"]


@pytest.fixture(scope="module")
def tunnels(lab):
    """An offloaded GCM association pair between each XGS 136 and the 3300."""
    for app, (wan, lan, dut_wan) in ENDS.items():
        s1, s2 = secrets.randbits(31) | 0x1000, secrets.randbits(31) | 0x1000
        base = {"cipher": "aes-gcm-16", "auth_key": None, "reqid": 1, "child": "net", "conn": app,
                "replay_window": 32, "offload": True}
        k1, k2 = secrets.token_hex(36), secrets.token_hex(36)
        for host, sa in ((app, dict(base, spi=s1, direction="out", src=wan, dst=dut_wan, enc_key=k1,
                                    local_ts=[lan], remote_ts=[DUT_LAN])),
                         ("dut3300", dict(base, spi=s1, direction="in", src=wan, dst=dut_wan, enc_key=k1,
                                          local_ts=[DUT_LAN], remote_ts=[lan])),
                         ("dut3300", dict(base, spi=s2, direction="out", src=dut_wan, dst=wan, enc_key=k2,
                                          local_ts=[DUT_LAN], remote_ts=[lan])),
                         (app, dict(base, spi=s2, direction="in", src=dut_wan, dst=wan, enc_key=k2,
                                    local_ts=[lan], remote_ts=[DUT_LAN]))):
            assert engine(lab, host, "add_sa", sa=sa)["offloaded"] is True
    return ENDS


def pings(lab, host: str, count: int) -> None:
    """`count` echoes from the appliance itself through its association, as fast as they
    come back (each one ESP packet sealed and one opened on the appliance)."""
    r = in_ns(lab, host, ["ping", "-q", "-f", "-l", "16", "-W", "2", "-c", str(count), DUT_LAN_IP], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def charge(lab, host: str, count: int) -> tuple[int, int, int]:
    """(packets handled, ns charged, intr ticks) that `count` pings moved on `host`."""
    c0, i0 = settled(lab, host), intr_ticks(lab, host)
    pings(lab, host, count)
    c1, i1 = settled(lab, host), intr_ticks(lab, host)
    return handled(c1) - handled(c0), c1["cpu_ns"] - c0["cpu_ns"], i1 - i0


def test_cp_time_intr_grows_by_the_pages_cost_and_a_builds_cpu_factor(lab, tunnels):
    host = "quiet136"
    assert fbsd(lab, host, "sysctl", "-n", "hw.ncpu").stdout == "2\n"
    packets, ns, ticks = charge(lab, host, 10_000)
    assert packets >= 2 * 10_000, f"{packets} ESP packets for 10,000 echoes"
    want = packets * COST_136_S * STATHZ
    assert ns == pytest.approx(packets * COST_136_S * 1e9, rel=1e-4)
    assert abs(ticks - want) < 1.01, f"intr +{ticks} ticks for {packets} packets; the pages' cost gives {want:.2f}"

    # a build that costs 25 % more per packet, loaded as the suite loads a build
    root = hd(lab, host) / "root"
    cand = root / "root" / "cand"
    cand.mkdir(parents=True, exist_ok=True)
    (cand / "npuep.ko").write_bytes((root / "boot/modules/npuep.ko").read_bytes() + b"\0twin-cpu-factor=1.25\n")
    try:
        for argv in (("kldunload", "npuep"), ("kldload", "/root/cand/npuep.ko")):
            r = fbsd(lab, host, *argv)
            assert r.returncode == 0, r.stderr
        assert engine(lab, host, "status")["cpu"]["cpu_factor"] == 1.25
        packets2, ns2, ticks2 = charge(lab, host, 10_000)
        want2 = packets2 * COST_136_S * 1.25 * STATHZ
        assert abs(ticks2 - want2) < 1.01, f"intr +{ticks2} ticks for {packets2} packets under x1.25; expected {want2:.2f}"
        assert ns2 / packets2 == pytest.approx(1.25 * ns / packets, rel=1e-3)

        # the same build, its driver refusing the associations: the kernel runs them, and
        # a packet costs the base -- the build's factor is the driver's own time
        fault_registry.set_fault(hd(lab, host), "nic_refuses_sa")
        engine(lab, host, "faults")  # re-read now: the associations are re-decided at once
        assert not any(s["offloaded"] for s in engine(lab, host, "list_sas")["sas"])
        packets3, ns3, ticks3 = charge(lab, host, 5_000)
        assert abs(ticks3 - packets3 * COST_136_S * STATHZ) < 1.01, (
            f"intr +{ticks3} ticks for {packets3} kernel-run packets under the x1.25 build")
    finally:
        fault_registry.clear_fault(hd(lab, host), None)
        engine(lab, host, "faults")
        fbsd(lab, host, "kldunload", "npuep")
        r = fbsd(lab, host, "kldload", "npuep")
    assert r.returncode == 0, r.stderr
    assert engine(lab, host, "status")["cpu"]["cpu_factor"] == 1.0


def n_rate(epoch: int) -> float:
    """The lab file's documented draw (ipsec_hil.lab.topology.parts.NoiseModel): the first
    gauss of Random("seed:host:epoch"), as a rate factor never above 1."""
    r = random.Random(f"{NOISE['seed']}:noisy136:{epoch}")
    return min(1.0, math.exp(r.gauss(0.0, NOISE["rate_sd"])))


RECEIVER = r"""
import json, socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 50)
TS = getattr(socket, "SO_TIMESTAMPNS", 35)
s.setsockopt(socket.SOL_SOCKET, TS, 1)
s.settimeout(0.2)
end, seen = float(sys.argv[1]), {}
while time.time() < end:
    try:
        data, anc, _f, addr = s.recvmsg(4096, 64)
    except socket.timeout:
        continue
    t = next((sum(x / f for x, f in zip(struct.unpack("qq", d[:16]), (1, 1e9))) for lvl, typ, d in anc
              if lvl == socket.SOL_SOCKET and typ == TS), time.time())
    seen.setdefault(addr[0], []).append(t)
print(json.dumps(seen))
"""

SENDER = r"""
import socket, sys, time
src, dst, pps, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((src, 0))
s.connect((dst, 9))
payload, t0, n = bytes(int(sys.argv[5])), time.time(), 0
while (now := time.time()) < end:
    while n < (now - t0) * pps:
        try:
            s.send(payload)
        except OSError:
            pass
        n += 1
    time.sleep(0.001)
"""


#: Windows measured at most: an engine not scheduled for a few hundred ms on a loaded host
#: takes an epoch off its model (CI runs at load 5: quiet136 carried 1,333 frames/s in one
#: epoch against 2,227 in the other five; another time noisy136 8 % under its draw), so a
#: window with an epoch off is measured once more; the draws are seeded, so a twin whose
#: pace or noise is wrong fails both.
NOISE_WINDOWS = 2


def _noise_window(first: int) -> tuple[list[int], list[float]]:
    """The next six epochs from ``first`` with a dip of at least 7 % and two at n_rate 1."""
    for e in range(first, first + 240):
        window = list(range(e, e + 6))
        rates = [n_rate(x) for x in window]
        if min(rates) <= 0.93 and sum(r >= 0.995 for r in rates) >= 2:
            return window, rates
    pytest.fail("no epoch with n_rate <= 0.93 in the next two minutes of draws")


def _per_epoch_rates(lab, tunnels, window: list[int]) -> tuple[list[float], list[float]]:
    """(quiet136's, noisy136's) frames a second in each epoch of ``window``, both streams
    sent 50 % over the pace through their XGS 136 to the DUT."""
    epoch_s = NOISE["epoch_s"]
    start, end = window[0] * epoch_s, (window[-1] + 1) * epoch_s
    pace_pps = PACE_MBIT * 1e6 / 8 / WIRE
    time.sleep(max(0.0, start - 0.8 - time.time()))
    procs = []
    try:
        recv = subprocess.Popen(["ip", "netns", "exec", lab.namespaces["dut3300"], sys.executable, "-c", RECEIVER,
                                 str(end + 0.1)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(recv)
        time.sleep(0.1)
        for app, (_wan, lan, _dut) in tunnels.items():
            src = str(next(ipaddress.ip_network(lan).hosts()))
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", lab.namespaces[app], sys.executable, "-c", SENDER, src, DUT_LAN_IP,
                 str(1.5 * pace_pps), str(end + 0.05), str(PAYLOAD)], stderr=subprocess.PIPE, text=True))
        out, err = recv.communicate(timeout=end - time.time() + 30)
        assert recv.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    seen = json.loads(out)

    def per_epoch(src: str) -> list[float]:
        ts = seen.get(src, [])
        # the middle of each epoch: the backlog admitted at the last epoch's rate (the port's
        # 128 KiB, ~55 ms at the pace) has left by then
        return [sum(1 for t in ts if x * epoch_s + 0.15 <= t < (x + 1) * epoch_s - 0.02) / (epoch_s - 0.17)
                for x in window]

    return per_epoch(ENDS["quiet136"][0]), per_epoch(ENDS["noisy136"][0])


def test_noise_moves_a_paced_streams_rate_epoch_by_epoch(lab, tunnels):
    """Six epochs of one stream each way over the two XGS 136s' paced ports, both streams
    50 % over the pace: quiet136's carries the pace in every epoch, noisy136's the pace
    times each epoch's n_rate -- a window with a dip of at least 7 % is chosen ahead from
    the documented draw, so the two differ where it is."""
    pace_pps = PACE_MBIT * 1e6 / 8 / WIRE
    disturbed = []
    for attempt in range(1, NOISE_WINDOWS + 1):
        window, rates = _noise_window(math.floor((time.time() + 1.5) / NOISE["epoch_s"]))
        quiet, noisy = _per_epoch_rates(lab, tunnels, window)
        table = "\n".join(f"  epoch {x}: n_rate {n:.3f}  quiet {q:7.1f}  noisy {z:7.1f} frames/s"
                          for x, n, q, z in zip(window, rates, quiet, noisy))
        mid = statistics.median(quiet)
        assert mid == pytest.approx(pace_pps, rel=0.05), f"quiet136 is not at its pace {pace_pps:.0f}:\n{table}"
        ref = statistics.median(z for z, n in zip(noisy, rates) if n >= 0.995)
        assert ref == pytest.approx(pace_pps, rel=0.05), f"noisy136 at n_rate 1 is not at its pace:\n{table}"
        if all(abs(q / mid - 1) <= 0.03 for q in quiet) and all(abs(z / ref - n) <= 0.03 for z, n in zip(noisy, rates)):
            break
        disturbed.append(f"window {attempt}:\n{table}")
    else:
        pytest.fail("quiet136 off its pace or noisy136 off its draws in every window:\n" + "\n".join(disturbed))
    if disturbed:
        print("a window the host disturbed (an engine off its model for an epoch), measured again:\n"
              + "\n".join(disturbed))
    dip = rates.index(min(rates))
    assert noisy[dip] / ref <= 0.96 < quiet[dip] / mid, f"the noise's dip is not where it was drawn:\n{table}"
