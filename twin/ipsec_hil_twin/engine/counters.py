"""Counters in shared memory: one mmap'ed file of uint64 slots in the host dir.

Why: the transmit and receive loops are separate processes; the control process must
answer `counters` in one read without asking them.  Each slot has exactly one writer
process (tx counters by the tx loop, rx counters by the rx loop, sa_* by control), so
no locking is needed; an aligned 8-byte store is atomic on the platforms we run on.

Layout: DRIVER_NAMES (every model's counters, ipsec_hil_twin.personality), ESP_KEYS, HIST_ALGS
(twice: one slot per direction, see HIST_OUT), ENGINE_NAMES, GEN_NAMES, CPU_NAMES, then MAX_SA
per-SA records of SA_STRIDE slots (packets, bytes, last_use, seq: the last sequence
number sent (out) or the highest accepted (in)), each on a cache line of its own (LINE).
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ipsec_hil_twin.personality import ALL_DRIVER_COUNTERS, Counting, for_driver

# FreeBSD 14 struct espstat, JSON keys in netstat's order (typo "receieve-bytes" is FreeBSD's).
ESP_KEYS = ("dropped-short-header", "dropped-bad-protocol", "dropped-no-tdb", "dropped-bad-kcr",
            "dropped-queue-full", "dropped-no-transform", "dropped-bad-length",
            "replay-counter-wraps", "dropped-bad-crypto", "dropped-bad-auth",
            "possible-replay-detected", "received-packets", "sent-packets", "dropped-bad-tdb",
            "receieve-bytes", "sent-bytes", "dropped-too-large", "dropped-policy-violation",
            "crypto-failures", "tunnel-failures")
HIST_ALGS = ("aes-cbc", "aes-gcm-16")
# FreeBSD keeps one ESP histogram (esps_hist[sav->alg_enc], bumped by esp_input and by
# esp_output), but here the two directions are two processes: one slot each, summed when
# read. One slot for both lost an increment whenever the two loops' read-modify-writes
# met (a loaded CI run read 9 for 10 packets: the single-writer rule above, broken).
HIST_OUT, HIST_IN = "hist_out:", "hist_in:"
# FreeBSD 14 struct ipsecstat (netstat -s -p ipsec / ipsec6), the counters the engine moves:
# sys/netipsec/ipsec_output.c ipsec4_allocsa/ipsec6_allocsa count ips_out_nosa when an
# outbound policy matches and no SA is there (a hard-expired SA whose policy charon has
# not removed yet), and ipsec4/6_perform_request's `bad:` path counts ips_out_inval for
# the same packet (key_allocsa_policy returned no SA with error 0: "goto bad"); the packet
# is freed, the sender sees success (EINPROGRESS: consumed).
IPSEC_KEYS = ("discarded-no-sa", "discarded-invalid")
IPSEC_FAMILIES = ("ipsec", "ipsec6")
ALG_OF_CIPHER = {"aes-gcm-16": "aes-gcm-16", "aes-cbc-hmac-sha256": "aes-cbc"}

# Engine-private facts that no driver counter represents (reported by `status`):
#   tx_no_sa    read from esp0, no outbound SA selects it (the kernel would never have
#               handed it to the driver, so no driver counter moves)
#   tx_ptb      ICMPv6 PTB / ICMP frag-needed sent by the forwarded-packet gate
#   tx_too_big_own  own packet too big for the SA (route MTU should have prevented it)
#   rx_write_fail   decrypted packet refused by esp0, for drivers without such a counter
#   rx_not_esp  frames shorter than an ESP header
ENGINE_NAMES = ("tx_no_sa", "tx_ptb", "tx_too_big_own", "tx_sendfail", "rx_write_fail",
                "rx_not_esp", "tx_faulted", "rx_frames")
# Generations the control process bumps (CounterBlock.bump): gen_any on every change the
# loops reload for (SA table, faults, reset), gen_reset before it on a reset. A loop reads
# gen_any once a packet (issue 15: it replaced three generations read a packet, ~45 ns).
GEN_NAMES = ("gen_reset", "gen_any")
# The appliance's CPU time the loops charge, in ns (ipsec_hil_twin.engine.cost: the model's
# cost per ESP packet sealed or opened), one slot per writer as the histogram's: ns_tx by the
# transmit loop, ns_rx by the receive loop; `counters` answers their sum as cpu_ns, which
# the emulated sysctl turns into kern.cp_time's CP_INTR ticks (ipsec_hil_twin.fbsd.cptime).
CPU_NAMES = ("ns_tx", "ns_rx")

# Each port's drops that the kernel's own counters do not see (issue 52: "every drop counted
# where FreeBSD counts it"), by the port's place in host.json's `ports` (at most MAX_PORTS):
#   odrop  written by the transmit loop: a packet its model of the port's queue refused
#          (pacer.PortQueue: the stated queue full, or esp0's ring), and what esp0 itself
#          dropped while the loop was behind -- FreeBSD counts a packet its interface's
#          send queue refused in that interface's IFCOUNTER_OQDROPS (if_data.ifi_oqdrops:
#          `netstat -i -d`'s Drop column)
#   idrop  written by the receive loop: ESP frames its receive socket for the port had no
#          room for (SO_MEMINFO's drops) -- a NIC's missed receive ring, IFCOUNTER_IQDROPS
#          (ifi_iqdrops: `netstat -i`'s Idrop column)
# The emulated netstat adds them to what Linux counts for the same port (the tbf qdisc's
# drops, the veth's own): ipsec_hil_twin.fbsd.netstat_if.
PORT_DROP_KINDS = ("odrop", "idrop")
MAX_PORTS = 8

DRIVER_NAMES = ALL_DRIVER_COUNTERS
MAX_SA = 1024


def port_drop(k: int, kind: str) -> str:
    """The counter name of port ``k``'s drops of ``kind`` (PORT_DROP_KINDS)."""
    return f"if:{k}:{kind}"

_NAMES = DRIVER_NAMES + tuple("esp:" + k for k in ESP_KEYS) \
    + tuple(d + a for d in (HIST_OUT, HIST_IN) for a in HIST_ALGS) \
    + tuple(f"{f}:{k}" for f in IPSEC_FAMILIES for k in IPSEC_KEYS) \
    + tuple("eng:" + k for k in ENGINE_NAMES) + tuple("gen:" + k for k in GEN_NAMES) \
    + tuple("cpu:" + k for k in CPU_NAMES) \
    + tuple(port_drop(k, kind) for k in range(MAX_PORTS) for kind in PORT_DROP_KINDS)
# Each named counter and each SA record has a 64-byte cache line to itself (LINE slots of
# 8 bytes): the transmit and receive loops are processes on different cores, and counters
# of both sharing a line made every store move the line between the cores (false
# sharing). Measured (issue 15, 2-core VM, GCM, 8 A/B pairs of 6 s streams each way, the
# order alternated): 689 against 651 Mbit/s on average, better in 6 pairs of 8; the block
# grows from 33 to 67 KiB.
LINE = 8
INDEX = {n: i * LINE for i, n in enumerate(_NAMES)}
SA_BASE = len(_NAMES) * LINE
SA_STRIDE = LINE  # an SA record (SA_FIELDS) at the start of a line of its own
SA_FIELDS = ("packets", "bytes", "last_use", "seq")  # an SA record's slots, from its base
SA_PACKETS, SA_BYTES, SA_LAST_USE, SA_SEQ = range(len(SA_FIELDS))
SLOTS = SA_BASE + SA_STRIDE * MAX_SA


class CounterBlock:
    """The mmap'ed counter array. `c[name]` reads, `c.add(name, n)` adds (single writer)."""

    def __init__(self, path: Path, create: bool = False) -> None:
        self.path = Path(path)
        size = SLOTS * 8
        if create:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.ftruncate(fd, size)
        else:
            fd = os.open(self.path, os.O_RDWR)
        try:
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.a = memoryview(self._mm).cast("Q")
        #: called after every bump (the engine's main sets it: a byte on the pipe that wakes
        #: an idle transmit loop, datapath.TxLoop's ``wake_fd``)
        self.on_bump: Callable[[], None] | None = None

    def idx(self, name: str) -> int:
        return INDEX[name]

    def __getitem__(self, name: str) -> int:
        return self.a[INDEX[name]]

    def add(self, name: str, n: int = 1) -> None:
        self.a[INDEX[name]] += n

    def set(self, name: str, v: int) -> None:
        self.a[INDEX[name]] = v

    def bump(self, reset: bool = False) -> None:
        """Tell the loops to reload: gen_any moves; on a reset gen_reset first, so a loop
        that sees gen_any move also sees the reset."""
        if reset:
            self.a[INDEX["gen:gen_reset"]] += 1
        self.a[INDEX["gen:gen_any"]] += 1
        if self.on_bump is not None:
            self.on_bump()

    def sa_slot(self, slot: int) -> int:
        if not 0 <= slot < MAX_SA:
            raise ValueError(f"SA slot {slot} outside 0..{MAX_SA - 1}")
        return SA_BASE + SA_STRIDE * slot

    def sa_record(self, slot: int) -> dict[str, int]:
        """An SA record by field name (SA_FIELDS)."""
        b = self.sa_slot(slot)
        return {f: self.a[b + i] for i, f in enumerate(SA_FIELDS)}

    def clear_sa(self, slot: int) -> None:
        """Zero an SA record (its slot is given to a new SA)."""
        b = self.sa_slot(slot)
        self.a[b:b + len(SA_FIELDS)] = memoryview(bytes(8 * len(SA_FIELDS))).cast("Q")

    def zero(self, keep_gens: bool = True) -> None:
        """Reset (reboot): every counter and per-SA record to 0, generations kept."""
        gens = {g: self.a[INDEX["gen:" + g]] for g in GEN_NAMES}
        self.a[:] = memoryview(bytes(SLOTS * 8)).cast("Q")
        if keep_gens:
            for g, v in gens.items():
                self.a[INDEX["gen:" + g]] = v

    def snapshot(self, driver: str) -> dict:
        a = self.a
        return {
            "driver": {n: a[INDEX[n]] for n in for_driver(driver).counter_names},
            "esp": {k: a[INDEX["esp:" + k]] for k in ESP_KEYS},
            "histogram": {h: n for h in HIST_ALGS if (n := a[INDEX[HIST_OUT + h]] + a[INDEX[HIST_IN + h]])},
            **{f: {k: a[INDEX[f"{f}:{k}"]] for k in IPSEC_KEYS} for f in IPSEC_FAMILIES},
            "cpu_ns": sum(a[INDEX["cpu:" + k]] for k in CPU_NAMES),
        }

    def port_drops(self) -> list[dict[str, int]]:
        """Each port's engine-counted drops (PORT_DROP_KINDS), in host.json's port order."""
        return [{kind: self.a[INDEX[port_drop(k, kind)]] for kind in PORT_DROP_KINDS} for k in range(MAX_PORTS)]

    def engine_stats(self) -> dict:
        return {k: self.a[INDEX["eng:" + k]] for k in ENGINE_NAMES}

    def close(self) -> None:
        self.a.release()
        self._mm.close()


class PendingCounts:
    """The counters a datapath loop moves for every packet, summed in a plain list and
    stored into the block in one pass (:meth:`flush`).

    Why: an add on the mmap'ed memoryview costs about 100 ns (the buffer protocol and a
    Python int each way), an add on a list about 35 ns, and each loop makes six to nine of
    them a packet (issue 15). The block is exact whenever a loop waits for packets: the
    loops flush before they block -- the receive loop after each epoll batch (at most 64
    frames a socket), the transmit loop when esp0's queue is empty -- and at least every
    0.1 s while packets keep coming; a read in between lags by at most that much (the
    suite's settle needs two equal reads the counter lag apart: 0.1 s on the virtual lab,
    0.5 s after a load). Only the per-packet counters go
    through here (``hot``: fixed for the loop's driver); drops and errors are stored at
    once. An SA record's packets and bytes are summed too, its last use and sequence
    number written at the flush (``record_seq()`` of the SA).
    """

    def __init__(self, a: memoryview, hot: Iterable[int]) -> None:
        self.a = a
        self.p = [0] * SLOTS
        self.hot = tuple(sorted({i for i in hot if i >= 0}))
        self.records: list = []  # SAs whose record has pending counts, each once

    def flush(self, wall: int) -> None:
        """Store every pending count; the SA records' last use is ``wall``."""
        a, p = self.a, self.p
        for i in self.hot:
            v = p[i]
            if v:
                a[i] += v
                p[i] = 0
        for sa in self.records:
            pk, by = sa.base + SA_PACKETS, sa.base + SA_BYTES
            a[pk] += p[pk]
            a[by] += p[by]
            p[pk] = p[by] = 0
            a[sa.base + SA_LAST_USE] = wall
            seq = sa.record_seq()
            if seq is not None:
                a[sa.base + SA_SEQ] = seq
        self.records.clear()

    def discard(self) -> None:
        """Forget every pending count (the block was reset: they belong to before it)."""
        p = self.p
        for i in self.hot:
            p[i] = 0
        for sa in self.records:
            p[sa.base + SA_PACKETS] = p[sa.base + SA_BYTES] = 0
        self.records.clear()


@dataclass(frozen=True)
class RxCounters:
    """The receive loop's driver counter indexes (-1: the driver has no such counter)."""

    frame: int
    no_sa: int
    replay: int
    bad: int
    malformed: int
    blocked: int
    inner_v6: int
    done_v4: int
    done_v6: int
    refused: int

    @classmethod
    def of(cls, c: Counting) -> "RxCounters":
        opt = (lambda n: INDEX[n] if n else -1)
        return cls(frame=opt(c.rx_frame), no_sa=INDEX[c.rx_no_sa], replay=INDEX[c.rx_replay],
                   bad=INDEX[c.rx_bad], malformed=INDEX[c.rx_malformed], blocked=INDEX[c.rx_blocked],
                   inner_v6=opt(c.rx_inner_v6),
                   done_v4=INDEX[c.rx_delivered_v4], done_v6=INDEX[c.rx_delivered_v6],
                   refused=INDEX[c.rx_refused])
