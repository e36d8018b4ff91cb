"""Counters in shared memory: one mmap'ed file of uint64 slots in the host dir.

Why: the transmit and receive loops are separate processes; the control process must
answer `counters` in one read without asking them.  Each slot has exactly one writer
process (tx counters by the tx loop, rx counters by the rx loop, sa_* by control), so
no locking is needed; an aligned 8-byte store is atomic on the platforms we run on.

Layout: DRIVER_NAMES, ESP_KEYS, HIST_ALGS, ENGINE_NAMES, GEN_NAMES, then MAX_SA
per-SA records of SA_STRIDE slots (packets, bytes, last_use, seq: the last sequence
number sent (out) or the highest accepted (in)).
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

OCTEP = ("tx_encrypt", "out_taken", "out_orig", "rx_v6", "rx_done", "rx_queuefail", "rx_bad",
         "rx_blocked", "FROM_KN_TO_IPSEC_ENCR", "FROM_WIRE_TO_IPSEC_DECR",
         "CRYPTO_DROP_REPLAY_OOW", "TX_DROP_QUEUE_FULL", "sa_count", "sa_inet", "sa_inet6")
NPUEP = ("tx_taken", "tx_accel", "rx_done", "rx_v6", "rx_bad", "rx_nosa", "tx_nonhop",
         "tx_drop", "sa_count", "sa_inet", "sa_inet6")
PERSONALITY = {"octep": OCTEP, "npuep": NPUEP}

# FreeBSD 14 struct espstat, JSON keys in netstat's order (typo "receieve-bytes" is FreeBSD's).
ESP_KEYS = ("dropped-short-header", "dropped-bad-protocol", "dropped-no-tdb", "dropped-bad-kcr",
            "dropped-queue-full", "dropped-no-transform", "dropped-bad-length",
            "replay-counter-wraps", "dropped-bad-crypto", "dropped-bad-auth",
            "possible-replay-detected", "received-packets", "sent-packets", "dropped-bad-tdb",
            "receieve-bytes", "sent-bytes", "dropped-too-large", "dropped-policy-violation",
            "crypto-failures", "tunnel-failures")
HIST_ALGS = ("aes-cbc", "aes-gcm-16")
ALG_OF_CIPHER = {"aes-gcm-16": "aes-gcm-16", "aes-cbc-hmac-sha256": "aes-cbc"}

# Engine-private facts that no driver counter represents (reported by `status`):
#   tx_no_sa    read from esp0, no outbound SA selects it (the kernel would never have
#               handed it to the driver, so no driver counter moves)
#   tx_ptb      ICMPv6 PTB / ICMP frag-needed sent by the forwarded-packet gate
#   tx_too_big_own  own packet too big for the SA (route MTU should have prevented it)
#   rx_write_fail   npuep: decrypted packet refused by esp0 (octep counts rx_queuefail)
#   rx_not_esp  frames shorter than an ESP header
ENGINE_NAMES = ("tx_no_sa", "tx_ptb", "tx_too_big_own", "tx_sendfail", "rx_write_fail",
                "rx_not_esp", "tx_faulted", "rx_frames")
GEN_NAMES = ("gen_sa", "gen_faults", "gen_reset")

DRIVER_NAMES = tuple(dict.fromkeys(OCTEP + NPUEP))
MAX_SA = 1024

_NAMES = DRIVER_NAMES + tuple("esp:" + k for k in ESP_KEYS) + tuple("hist:" + a for a in HIST_ALGS) \
    + tuple("eng:" + k for k in ENGINE_NAMES) + tuple("gen:" + k for k in GEN_NAMES)
INDEX = {n: i for i, n in enumerate(_NAMES)}
SA_BASE = len(_NAMES)
SA_STRIDE = 4
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

    def idx(self, name: str) -> int:
        return INDEX[name]

    def __getitem__(self, name: str) -> int:
        return self.a[INDEX[name]]

    def add(self, name: str, n: int = 1) -> None:
        self.a[INDEX[name]] += n

    def set(self, name: str, v: int) -> None:
        self.a[INDEX[name]] = v

    def sa_slot(self, slot: int) -> int:
        if not 0 <= slot < MAX_SA:
            raise ValueError(f"SA slot {slot} outside 0..{MAX_SA - 1}")
        return SA_BASE + SA_STRIDE * slot

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
            "driver": {n: a[INDEX[n]] for n in PERSONALITY[driver]},
            "esp": {k: a[INDEX["esp:" + k]] for k in ESP_KEYS},
            "histogram": {h: a[INDEX["hist:" + h]] for h in HIST_ALGS if a[INDEX["hist:" + h]]},
        }

    def engine_stats(self) -> dict:
        return {k: self.a[INDEX["eng:" + k]] for k in ENGINE_NAMES}

    def close(self) -> None:
        self.a.release()
        self._mm.close()
