"""The emulated appliance's kernel memory and kernel log under traffic, for netstat -m, vmstat, dmesg.

Why a model computed on each call: the FreeBSD commands are one-shot processes, and the
engine (whose datapath other work owns) exports only counters.  So what `netstat -m`,
`vmstat -z/-m` and `dmesg` report is a function of the engine's counters and SA table,
the time, and a small ledger (DIR/kmem.json) for what faults did since they were
switched on.  The numbers move the way a FreeBSD 14 box's do (tests/golden/netstat_m's
real capture is the idle baseline):

* idle: the NIC receive rings hold RX_RING_PACKETS mbuf+cluster pairs from the packet
  zone, a few mbufs are held elsewhere; that is "in use" with no traffic;
* traffic: while packets are flowing -- the engine's packet count moves within
  SAMPLE_SECONDS, measured by the command -- each association used within ACTIVE_SECONDS
  (its last_use) has IN_FLIGHT_PER_SA packets queued (packet zone and the driver's packet
  zone); when traffic stops the queues are empty, so in-use is the baseline again;
* every packet processed allocates one packet-zone item (the zones' request counts);
* the driver's SA zone and `<driver>_sa` malloc type hold one item per offloaded
  association; its attach-time malloc exists while the module is loaded;
* fault `mbuf_leak`: n mbufs per packet processed since the fault went on stay in use
  until the next reboot (the ledger is keyed by boot time);
* fault `dmesg_error_under_traffic`: the driver logs one error per N packets, the
  kernel one witness `lock order reversal`; the lines are appended when the message
  buffer is read (nothing else observes it).

A reboot (new boot_time in state.json) starts a fresh ledger: leaked memory is freed.
"""
from __future__ import annotations

import time
from collections import namedtuple

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.personality import for_driver
from ipsec_hil_twin.machinery.runtime import HostDir, read_json, write_json_atomic

TYPE_CHECKING = False  # typing is not imported at run time: every emulated command pays for its imports
if TYPE_CHECKING:
    from typing import Any

RX_RING_PACKETS = 256
"""Packet-zone items the NIC receive rings hold on an idle box (real-fbsd14-amd64 capture)."""
IDLE_MBUFS = 1
IN_FLIGHT_PER_SA = 32
"""Packets queued per association while it carries traffic (driver queue depth)."""
ACTIVE_SECONDS = 1
"""An association used within this many seconds (its last_use, whole seconds) is busy."""
SAMPLE_SECONDS = 0.05
"""Packets flowing now = the engine's count moved across this window (asked only when an
association was used within ACTIVE_SECONDS: an idle box answers at once)."""
MBUF_LIMIT, CLUSTER_LIMIT = 6507312, 1016766
JUMBO_LIMITS = (508383, 150632, 84731)
MBUF_SIZE, CLUSTER_SIZE = 256, 2048
LEDGER = "kmem.json"
SA_REQUESTS_AT_BOOT = 4
"""Requests counts are since boot; the twin does not keep a history of associations,
so an SA zone's requests are this plus the associations present (never below `used`)."""


class Zone(namedtuple("Zone", "name size limit used free requests")):
    """One `vmstat -z` row (collections.namedtuple: typing's import costs every command)."""

    __slots__ = ()


class Malloc(namedtuple("Malloc", "type in_use kib requests sizes")):
    """One `vmstat -m` row (KiB as printed; sizes: the size classes)."""

    __slots__ = ()


class Traffic(namedtuple("Traffic", "packets busy_sas offloaded_sas all_sas")):
    """What the engine says now: packets processed since boot, busy and offloaded SAs."""

    __slots__ = ()


def traffic(hd: HostDir, driver: str | None, sample: float = SAMPLE_SECONDS) -> Traffic:
    """The engine's counters and SA table (a lab without its engine is idle); `sample` 0:
    packets since boot only, no look at whether they are flowing now."""
    try:
        packets = _packets(c.engine(hd, {"op": "counters"}), driver)
        sas = c.engine(hd, {"op": "list_sas"}).get("sas") or []
        now = int(time.time())
        recent = sum(1 for s in sas if int(s.get("last_use") or 0) >= now - ACTIVE_SECONDS)
        if recent and sample > 0:
            time.sleep(sample)  # the measurement window, not a wait for state
            flowing = _packets(c.engine(hd, {"op": "counters"}), driver) != packets
        else:
            flowing = False
    except c.EngineError:
        return Traffic(0, 0, 0, 0)
    offloaded = sum(1 for s in sas if s.get("offloaded"))
    return Traffic(packets, recent if flowing else 0, offloaded, len(sas))


def _packets(counters: dict[str, Any], driver: str | None) -> int:
    """Packets processed since boot: the kernel's ESP in and out, and the driver's."""
    esp = counters.get("esp") or {}
    packets = int(esp.get("sent-packets", 0)) + int(esp.get("received-packets", 0))
    if driver:
        k = for_driver(driver).counting
        drv = counters.get("driver") or {}
        names = {k.tx_forwarded[0], k.tx_own[0], k.tx_own_output_step[0], k.rx_delivered_v4, k.rx_delivered_v6}
        packets += sum(int(drv.get(n, 0)) for n in names if ":" not in n)
    return packets


def _ledger(hd: HostDir, boot_time: float) -> dict[str, Any]:
    led = read_json(hd.path / LEDGER, default={})
    if not isinstance(led, dict) or led.get("boot_time") != boot_time:
        led = {"boot_time": boot_time}
    return led


def _accrue(led: dict[str, Any], fault: str, params: dict[str, Any] | None, packets: int, per: float) -> int:
    """Units a fault produced: `per` per packet since it went on, added to what earlier
    on-periods produced.  The base is the packet count when a command first saw it on."""
    base_key, done_key = f"{fault}_base", f"{fault}_done"
    done = float(led.get(done_key, 0.0))
    base = led.get(base_key)
    if params is None:
        led.pop(base_key, None)
        return int(done)
    if base is None or packets < int(base):
        led[base_key] = base = packets
    total = done + per * (packets - int(base))
    led[done_key], led[base_key] = total, packets
    return int(total)


class KernelMemory(namedtuple("KernelMemory", "zones malloc leaked")):
    """Lists of Zone and Malloc rows, and the items leaked."""

    __slots__ = ()


def kernel_memory(hd: HostDir) -> KernelMemory:
    """The zones and malloc types of this appliance now (the ledger is updated)."""
    st = c.load_state(hd)
    driver = c.host_info(hd).get("driver") if c.driver_loaded(hd, st) else None
    t = traffic(hd, driver)
    led = _ledger(hd, st["boot_time"])
    leak = c.active_faults(hd).get("mbuf_leak")
    leaked = _accrue(led, "mbuf_leak", leak, t.packets, float(leak.get("n", 1)) if leak else 0.0)
    write_json_atomic(hd.path / LEDGER, led)
    inflight = IN_FLIGHT_PER_SA * t.busy_sas
    pkt_used = RX_RING_PACKETS + inflight
    zones = [
        Zone("UMA Kegs", 384, 0, 236, 4, 236), Zone("UMA Zones", 4608, 0, 237, 1, 237),
        Zone("UMA Slabs 0", 112, 0, 52880, 107, 132002), Zone("64 Bucket", 512, 0, 1212, 140, 83013),
        Zone("mbuf_packet", MBUF_SIZE, 0, pkt_used, 506, 4096 + t.packets),
        Zone("mbuf", MBUF_SIZE, MBUF_LIMIT, IDLE_MBUFS + leaked, 512, 2048 + leaked),
        Zone("mbuf_cluster", CLUSTER_SIZE, CLUSTER_LIMIT, 0, 0, 762),
        Zone("mbuf_jumbo_page", 4096, JUMBO_LIMITS[0], 0, 508, 508),
        Zone("mbuf_jumbo_9k", 9216, JUMBO_LIMITS[1], 0, 0, 0),
        Zone("mbuf_jumbo_16k", 16384, JUMBO_LIMITS[2], 0, 0, 0),
        Zone("ipsec_secasvar", 416, 0, t.all_sas, 14, 118 + t.all_sas),
    ]
    malloc = [Malloc("mbuf_tag", 0, 0, 9918, (32, 64)),
              Malloc("ipsec-saq", t.all_sas, (t.all_sas * 512 + 1023) // 1024, 118 + t.all_sas, (256, 512)),
              Malloc("sysctloid", 41125, 2071, 41320, (16, 32, 64, 128)),
              Malloc("pfs_nodes", 20, 5, 20, ())]
    fp = for_driver(driver).footprint if driver else None
    if fp is not None:
        sa_name, sa_size = fp.sa_zone
        pkt_name, pkt_size, pkt_limit = fp.pkt_zone
        zones += [Zone(sa_name, sa_size, 0, t.offloaded_sas, 60, SA_REQUESTS_AT_BOOT + t.offloaded_sas),
                  Zone(pkt_name, pkt_size, pkt_limit, inflight, 93, t.packets)]
        m_name, m_sz = fp.sa_malloc
        a_name, a_n, a_kib, a_sizes = fp.attach_malloc
        malloc += [Malloc(a_name, a_n, a_kib, a_n + 28, a_sizes),
                   Malloc(m_name, t.offloaded_sas, (t.offloaded_sas * m_sz + 1023) // 1024,
                          SA_REQUESTS_AT_BOOT + t.offloaded_sas, (m_sz,))]
    return KernelMemory(zones, malloc, leaked)


def mbuf_statistics(mem: KernelMemory) -> dict[str, int]:
    """netstat -m's numbers from the zones, as usr.bin/netstat/mbuf.c:mbpr() adds them up:
    the packet zone's items are mbufs and clusters at once."""
    z = {zone.name: zone for zone in mem.zones}
    pkt, mb, cl = z["mbuf_packet"], z["mbuf"], z["mbuf_cluster"]
    jp, j9, j16 = z["mbuf_jumbo_page"], z["mbuf_jumbo_9k"], z["mbuf_jumbo_16k"]
    mbuf_cur, mbuf_cache = mb.used + pkt.used, mb.free + pkt.free
    cl_cur, cl_cache = cl.used + pkt.used, cl.free + pkt.free
    used_bytes = mbuf_cur * MBUF_SIZE + cl_cur * CLUSTER_SIZE + jp.used * 4096 + j9.used * 9216 + j16.used * 16384
    cache_bytes = (mbuf_cache * MBUF_SIZE + cl_cache * CLUSTER_SIZE + jp.free * 4096 + j9.free * 9216
                   + j16.free * 16384)
    out = {"mbuf-current": mbuf_cur, "mbuf-cache": mbuf_cache, "mbuf-total": mbuf_cur + mbuf_cache,
           "cluster-current": cl_cur, "cluster-cache": cl_cache, "cluster-total": cl_cur + cl_cache,
           "cluster-max": cl.limit, "packet-count": pkt.used, "packet-free": pkt.free,
           "jumbo-count": jp.used, "jumbo-cache": jp.free, "jumbo-total": jp.used + jp.free,
           "jumbo-max": jp.limit, "jumbo-page-size": 4,
           "jumbo9-count": j9.used, "jumbo9-cache": j9.free, "jumbo9-total": j9.used + j9.free,
           "jumbo9-max": j9.limit,
           "jumbo16-count": j16.used, "jumbo16-cache": j16.free, "jumbo16-total": j16.used + j16.free,
           "jumbo16-limit": j16.limit,
           "bytes-in-use": used_bytes // 1024, "bytes-in-cache": cache_bytes // 1024,
           "bytes-total": (used_bytes + cache_bytes) // 1024}
    zero = ("mbuf-failures", "cluster-failures", "packet-failures", "mbuf-sleeps", "cluster-sleeps",
            "packet-sleeps", "jumbop-sleeps", "jumbo9-sleeps", "jumbo16-sleeps", "jumbop-failures",
            "jumbo9-failures", "jumbo16-failures", "sendfile-syscalls", "sendfile-no-io", "sendfile-io-count",
            "sendfile-pages-sent", "sendfile-pages-valid", "sendfile-pages-bogus",
            "sendfile-requested-readahead", "sendfile-readahead", "sendfile-busy-encounters",
            "sfbufs-alloc-failed", "sfbufs-alloc-wait")
    out.update({k: 0 for k in zero})
    return out


def lor_lines(driver: str) -> list[str]:
    """WITNESS's report of a lock order reversal between the driver's SA lock and the
    kernel's SA lock (kern/subr_witness.c witness_checkorder's text)."""
    return ["lock order reversal:",
            f" 1st 0xfffff80003a4c2d8 {driver}_sa ({driver}_sa, sleep mutex) @ "
            f"/usr/src/sys/dev/{driver}/{driver}_ipsec.c:412",
            " 2nd 0xfffffe00010cf520 ipsec SA (ipsec SA, rw) @ /usr/src/sys/netipsec/key.c:5263",
            "stack backtrace:",
            "#0 0xffffffff80c1e8a5 at witness_debugger+0x65"]


def log_traffic_faults(hd: HostDir) -> None:
    """Append what fault `dmesg_error_under_traffic` made the kernel log since the last read."""
    params = c.active_faults(hd).get("dmesg_error_under_traffic")
    st = c.load_state(hd)
    led = _ledger(hd, st["boot_time"])
    if params is None and "dmesg_error_under_traffic_base" not in led:
        return
    driver = str(c.host_info(hd).get("driver") or "ipsec")
    t = traffic(hd, driver if c.driver_loaded(hd, st) else None, sample=0)
    every = int(params.get("n", 100)) if params else 1
    due = _accrue(led, "dmesg_error_under_traffic", params, t.packets, 1.0 / every if params else 0.0)
    logged = int(led.get("dmesg_logged", 0))
    lines: list[str] = []
    if params is not None and not led.get("dmesg_lor"):
        lines += lor_lines(driver)
        led["dmesg_lor"] = True
    lines += [f"{driver}0: ring 0: tx completion error, status 0x5 (DMA timeout), "
              f"packet {(k + 1) * every} dropped" for k in range(logged, due)]
    led["dmesg_logged"] = max(logged, due)
    write_json_atomic(hd.path / LEDGER, led)
    if lines:
        c.log_dmesg(hd, lines)
