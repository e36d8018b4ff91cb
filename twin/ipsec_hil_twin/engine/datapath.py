"""The transmit loop (esp0 -> ESP) and the receive loop (ESP -> esp0), one process each.

Why two processes: Python's per-packet cost is the limit (machine-facts.md), and a
process per direction roughly doubles what one can do.  Both loops learn about SA and
fault changes without IPC round trips: the control process appends SA changes to a
journal (ipsec_hil_twin.engine.satable), rewrites DIR/engine.state.json and bumps a generation
counter in the shared counter block; a loop compares that generation on each packet
(one memoryview read) and reloads when it moved.

Own vs forwarded (the FreeBSD gate applies to forwarded packets only): a packet is the
appliance's own when its source address is one of the namespace's addresses (listed by
the control process in the state file).  The routes already separate the two (ip rule
`iif lo` -> "own" table with the exact ESP MTU; everything else -> "fwd" table with the
path MTU); the source-address test tells the loop which counters to move.

Counting, per packet, for offloaded SAs: the driver's rules are data in
ipsec_hil_twin.personality (`Counting`: which counters a forwarded, own or own-via-output-step
packet moves; which one a frame, a replay, an ICV failure, a selector miss, an IPv6
inner, a delivery or a refusal moves).  The loops resolve those names to counter
indexes once and have no per-driver branches.
SAs not offloaded (offload:false, declined, driver not loaded) count FreeBSD's espstat:
sent-packets/sent-bytes, received-packets (every frame of a known SA, before checks, as
esp_input does)/receieve-bytes, dropped-bad-auth, possible-replay-detected,
dropped-bad-length (malformed inner), dropped-policy-violation and the histogram.  Byte counters
count the ESP plaintext (inner + padding + trailer) on both sides, so sent == received.
A packet that no outbound SA selects is counted only as the engine's `tx_no_sa`: no
driver counter represents it (FreeBSD would not have handed it to the driver).
Every packet sealed (here) or opened (ipsec_hil_twin.engine.rxloop) also charges the
appliance's CPU model (ipsec_hil_twin.engine.cost: kern.cp_time's intr ticks), and the lab
file's noise scales an offloaded SA's pace per epoch (the same module says why).
A packet whose policy is still installed but whose SA hard-expired (the SA entry carries
`expired`: the kernel freed it at its hard lifetime, charon removes the policy when its
DELETE exchange ends) is FreeBSD's "policy with no SA": ipsec4_allocsa/ipsec6_allocsa count
ips_out_nosa, the request's `bad:` path ips_out_inval, the packet is freed (netstat -s -p
ipsec / ipsec6: discarded-no-sa, discarded-invalid). Fault `expired_drops_uncounted` frees
it without counting.
"""
from __future__ import annotations

import ipaddress
from dataclasses import replace
import os
import select
import socket
import sys
import time
from typing import Callable
from pathlib import Path

from ipsec_hil_twin.faults import JsonWatch, dfbit, fault_params
from ipsec_hil_twin.personality import for_driver

from . import netio
from .cost import charge_out, data_frame
from .counters import HIST_ALGS, HIST_OUT, INDEX, SA_BYTES, SA_PACKETS, PendingCounts
from .esp import SEQ_LOW
from .pacer import WIRE_EXTRA, PortQueue
from .loop_base import IGEN_ANY, Loop as _Loop
from .out_build import counter_indexes as _idx
from .out_build import odrop_slots, out_sa_of
from .rxloop import RxLoop
from .sa_state import OutSa
from .selectors import ADDR4, ADDR6, addr_key, addresses_only, fast_key, flow, policy_pairs, sel_match
from .txfaults import ClearLeak, OutputQueueFull
from .sizes import forwarded_gate, gate_checks, outer_df

__all__ = ["DRAIN_S", "RxLoop", "TxLoop"]  # RxLoop lives in .rxloop (this module grew past one job's size)

X_WRAPS = INDEX["esp:replay-counter-wraps"]  # a 32-bit counter that would cycle (RFC 4303 3.3.3)


#: seconds a deleted outbound SA's selectors still match packets already in esp0's queue
DRAIN_S = 0.5
#: how long the idle transmit loop waits for a packet before it looks at the control's
#: generation again: without it a delete was applied at the next packet, and a packet sent
#: long after the delete still met the deleted SA's drain (tests/engine: the 256-child test)
IDLE_POLL_MS = 100
#: the same with a wake pipe (``wake_fd``: the control writes a byte on every generation
#: bump, CounterBlock.on_bump), where the wait is only a fallback. Why: woken ten times a
#: second, an idle loop cost 2.2 ms of CPU a second, and a virtual lab's transmit loops are
#: idle most of their life (issue 39: ~7,000 appliance-seconds in one run of the own tests)
WOKEN_IDLE_POLL_MS = 2000


def idle_wait(tun: int, wake: int | None) -> Callable[[], None]:
    """The idle transmit loop's wait for esp0 (readable) or the control's wake pipe (a
    generation bump), at most IDLE_POLL_MS -- WOKEN_IDLE_POLL_MS with a pipe; the pipe's
    bytes are read away (the generation says what changed)."""
    waiter = select.poll()
    waiter.register(tun, select.POLLIN)
    if wake is not None:
        os.set_blocking(wake, False)
        waiter.register(wake, select.POLLIN)
    timeout = IDLE_POLL_MS if wake is None else WOKEN_IDLE_POLL_MS

    def wait() -> None:
        if waiter.poll(timeout) and wake is not None:
            try:
                os.read(wake, 4096)
            except BlockingIOError:
                pass
    return wait


class TxLoop(_Loop):
    """esp0 -> select SA -> FreeBSD gate -> pace -> seal -> raw socket."""

    def __init__(self, host_dir: Path, tun_fd: int, driver: str, queue_bytes: int | None = None,
                 cpu_ns: float | None = None, wake_fd: int | None = None,
                 ports: tuple[tuple[str, tuple[str, ...]], ...] = (), tun_name: str = "esp0") -> None:
        super().__init__(host_dir, tun_fd, driver, cpu_ns)
        self.odrop_of = odrop_slots(ports)  # address -> its port's output-drop slot (host.json's ports)
        self.esp0_drops = EspRingDrops(tun_name)  # esp0's own drops: the paced port's
        self.wake_fd = wake_fd  # read end of the control's wake pipe (WOKEN_IDLE_POLL_MS), or None
        self.counting = cnt = for_driver(driver).counting
        self.pend = PendingCounts(self.a, _idx(cnt.tx_forwarded + cnt.tx_own + cnt.tx_own_output_step) + _idx(
            ("esp:sent-packets", "esp:sent-bytes", "cpu:ns_tx", *(HIST_OUT + h for h in HIST_ALGS))))
        self.sysctl = JsonWatch(self.dir / "sysctl.json")
        self.icmp4, self.icmp6 = netio.icmp_sockets()
        self.socks: dict[str, socket.socket] = {}
        self.sas: dict[tuple[int, str], OutSa] = {}
        self.order: list[OutSa] = []
        self.pairs: list = []
        self.cache: dict = {}
        self.keyf = fast_key  # the flow cache's key: addr_key when every selector allows it
        self.own_step: list = []
        self.faults_ver = -1
        self.port = PortQueue(tun_fd, queue_bytes, counts=self.a)  # the paced port and its stated queue
        self.fault_n = 0
        self.oq = OutputQueueFull()  # fault oq_drop_counted
        self.extra_pending = 0
        self.outer_df = netio.OuterDf()  # outer DF per dfbit (ipsec_output.c ipsec_encap)
        self.leak = ClearLeak()  # fault cleartext_leak
        self.gone: dict[tuple[int, str], tuple[OutSa, float]] = {}  # deleted SAs draining (reload)

    # -- state -------------------------------------------------------------------------
    def reload(self) -> None:
        st = self._take_generations()
        self.own_step = [ipaddress.ip_network(x) for x in st.get("own_output_step", [])]
        new: dict[tuple[int, str], OutSa] = {}
        order = []
        for e in st.get("sas", []):
            if e["direction"] != "out":
                continue
            key = (e["spi"], e["dst"])
            old = self.sas.get(key)
            try:
                osa = out_sa_of(e, self.counting, self.socks, self.c, self.odrop_of)
            except (OSError, ValueError, KeyError) as exc:  # e.g. src not an address here
                print(f"engine tx: SA spi={e.get('spi', 0):#x} not usable: {exc}", file=sys.stderr)
                continue
            if old is not None:
                osa.seq, osa.seq_mark = old.seq, old.seq_mark
            mark = e.get("seq_set")  # [request number, last sequence number sent]
            if mark and mark[0] != osa.seq_mark:
                osa.seq_mark, osa.seq = mark
            new[key] = osa
            order.append(osa)
        # An SA deleted now leaves packets the kernel already routed into esp0 (its policy
        # matched them) waiting in the queue: strongSwan deletes a child's SAs before its
        # policies (child_sa.c destroy), so such a packet is FreeBSD's policy-with-no-SA,
        # counted as the expired SA's are. Its selectors stay matchable for DRAIN_S only.
        now = time.monotonic()
        for key, old in self.sas.items():
            if key not in new:  # an expired one too: its policy went with it
                self.gone[key] = (old if old.dead else replace(old, dead=True), now + DRAIN_S)
        for key in list(self.gone):
            if key in new or self.gone[key][1] <= now:
                del self.gone[key]
        self.sas = new
        self.order = order
        charge_out(order, self.cost)  # the build's CPU factor and the noise, as _take_generations read them
        self._pair_up()

    def _pair_up(self) -> None:
        """The selector pairs of the table's SAs, then of the deleted ones still draining."""
        order = self.order + [d for d, _ in self.gone.values()]
        self.pairs = policy_pairs(order)
        self.keyf = addr_key if all(addresses_only(o.local + o.remote) for o in self.order + [
            d for d, _ in self.gone.values()]) else fast_key
        self.cache.clear()
        self.faults.refresh(time.monotonic(), force=True)
        self.sysctl.refresh(time.monotonic(), force=True)
        self._faults_changed()

    def _faults_changed(self) -> None:
        if self.faults.version != self.faults_ver:
            self.faults_ver = self.faults.version
            self.extra_pending = 1 if fault_params(self.faults, "count_extra") is not None else 0

    def select(self, pkt: bytes, key: object) -> tuple[OutSa | None, bool, tuple[int, ...]]:
        """(SA, own?, counter indexes to bump) for an inner packet not yet in the flow
        cache; cached under `key` (the loop's `keyf(pkt)`, see reload)."""
        f = flow(pkt)
        if f is None:
            return None, False, ()
        v, s, d, proto, sp, dp = f
        sa_ = ipaddress.ip_address(s)
        da = ipaddress.ip_address(d)
        chosen = None
        for osa, ls, rs in self.pairs:
            if sel_match((ls,), sa_, proto, sp) and sel_match((rs,), da, proto, dp):
                chosen = osa
                break
        own = s in self.own
        incs: tuple[int, ...] = ()
        if chosen is not None and chosen.dead:
            fam = "ipsec" if v == 4 else "ipsec6"
            incs = (INDEX[fam + ":discarded-no-sa"], INDEX[fam + ":discarded-invalid"])
        elif chosen is not None:
            if not own:
                incs = chosen.inc_fwd
            elif any(da.version == n.version and da in n for n in self.own_step):
                incs = chosen.inc_own_step
            else:
                incs = chosen.inc_own
        res = (chosen, own, incs)
        if len(self.cache) > 65536:
            self.cache.clear()
        self.cache[key] = res
        return res

    # -- loop --------------------------------------------------------------------------
    def run(self) -> None:
        """The per-packet path.  Every name it touches per packet is a local: Python's
        cost per packet is the engine's rate (issue 15), and a local costs less than an
        attribute or a global.  Faults and sysctls are re-read every 0.1 s; SA changes
        (the generations) are seen on the next packet, a noise epoch (.cost) at its first
        packet.  esp0 is read without blocking: when its queue is empty the loop stores its
        pending counts, then waits.  The receive loop's writes share the fd's O_NONBLOCK; a
        TUN write never waits for buffer space anyway (Linux tun_chr_open: sk_sndbuf = INT_MAX)."""
        a = self.a
        tun = self.tun
        os.set_blocking(tun, False)
        idle = idle_wait(tun, self.wake_fd)
        mono = time.monotonic
        pend = self.pend
        p, records, flush = pend.p, pend.records, pend.flush
        self.reload()
        i_nosa = INDEX["eng:tx_no_sa"]
        i_ptb = INDEX["eng:tx_ptb"]
        i_big = INDEX["eng:tx_too_big_own"]
        i_faulted = INDEX["eng:tx_faulted"]
        i_cpu, cost = INDEX["cpu:ns_tx"], self.cost
        ig_any = IGEN_ANY
        seq_low = SEQ_LOW
        fp = fault_params
        next_check = 0.0
        f_drop = f_icv = f_replay = f_nh = f_frag = f_ptb = f_slow = f_esn = f_pad = None
        f_uncounted = f_oq = f_clear = None
        f_padx = f_nonce = False
        df = 0
        df_work = False  # an outer DF to set or to clear (dfbit, or sockets left with DF)
        df_by = (False, False)
        df_on = self.outer_df.on  # the sockets sending with DF now (OuterDf keeps this dict)
        gated: dict[int, tuple[bool, bool]] = {}  # version -> (gate checks it?) by inner DF
        g_any = self.gen_any
        pick = self.select
        cache_get = self.cache.get
        keyf = self.keyf
        addr_only = keyf is addr_key  # then the key is one slice of the header, no call
        wall = int(time.time())
        port = self.port
        ahead, fill = port.ahead, port.fill
        popleft = ahead.popleft
        dep = 0.0
        while True:
            # esp0 is drained into the port's queue (pacer.PortQueue), a packet's departure
            # time set as it is admitted
            if ahead or fill():
                pkt, dep = popleft() if ahead else (b"", 0.0)  # (a batch all dropped: nothing)
            else:
                flush(wall)
                idle()  # an idle loop still sees a delete soon: its drain starts then
                pkt = b""
            if a[ig_any] != g_any:
                self.reload()
                g_any = self.gen_any
                keyf = self.keyf
                addr_only = keyf is addr_key
                next_check = 0.0
            if not pkt:
                continue
            now = mono()
            if now >= next_check:
                wall = int(t := time.time())
                if t >= cost.until and cost.at(t):  # a new epoch of the noise: its draws
                    charge_out(self.order, cost)
                next_check = now + min(0.1, cost.until - t)  # looked at again by the epoch's end
                flush(wall)
                self.esp0_drops.count(port)
                if self.gone and min(t for _, t in self.gone.values()) <= now:
                    self.gone = {k: v for k, v in self.gone.items() if v[1] > now}
                    self._pair_up()
                self.faults.refresh(now, force=True)
                self.sysctl.refresh(now, force=True)
                self._faults_changed()
                F = self.faults
                (f_drop, f_icv, f_replay, f_nh, f_frag, f_ptb, f_slow, f_uncounted, f_padx, f_nonce, f_clear, f_oq,
                 f_esn, f_pad) = tx_fault_params(F)
                # fault ipv4_df_gate: gate forwarded IPv4 by its DF bit (dfbit 2's rule)
                # although net.inet.ipsec.dfbit says 0 -- the 000 page's IPv4 test must fail
                df = 2 if fp(F, "ipv4_df_gate") is not None else dfbit(self.sysctl)
                df_work = bool(df or self.outer_df.on)
                df_by = (outer_df(df, False), outer_df(df, True))  # by the inner's DF
                gated = {v: (gate_checks(v, df, False), gate_checks(v, df, True)) for v in (4, 6)}
            v = pkt[0] >> 4
            # addr_key's slices inline: esp0 carries only whole IPv4 and IPv6 packets (what
            # the kernel routes to it), for which they are addr_key's answer
            key = (pkt[ADDR4] if v == 4 else pkt[ADDR6]) if addr_only else (keyf(pkt) or flow(pkt))
            hit = cache_get(key)
            osa, own, incs = hit if hit is not None else pick(pkt, key)
            if osa is None:
                a[i_nosa] += 1
                continue
            if osa.dead:  # policy without SA: FreeBSD's two counts, the packet freed
                if f_uncounted is None:
                    for i in incs:
                        a[i] += 1
                continue
            if dep is None and osa.offloaded:  # the port's queue was full before the driver took it
                if osa.odrop_idx >= 0:
                    a[osa.odrop_idx] += 1
                continue
            n = len(pkt)
            nh = 4 if v == 4 else 41
            # FreeBSD's gate for forwarded packets (ipsec_hil_twin.engine.sizes.forwarded_gate)
            if own:
                if n > osa.own_limit:
                    a[i_big] += 1  # only reachable when the own route MTU was raised (fault)
            elif n > osa.fwd_limit and gated[v][pkt[6] >> 6 & 1]:
                verdict = forwarded_gate(n, v, osa.path_mtu, osa.outer, df, v == 4 and bool(pkt[6] & 0x40))
                if verdict.action == "icmp" and not (v == 6 and f_frag is not None):
                    mtu = verdict.mtu + (int(f_ptb.get("delta", -8)) if f_ptb is not None else 0)
                    try:
                        if v == 6:
                            netio.send_ptb6(self.icmp6, pkt, mtu)
                        else:
                            netio.send_frag_needed(self.icmp4, pkt, mtu)
                        a[i_ptb] += 1
                    except OSError as exc:
                        print(f"engine tx: PTB not sent: {exc}", file=sys.stderr)
                    continue
                if verdict.action == "drop":
                    continue  # pmtu <= hlen: FreeBSD frees the packet without an error
            if f_slow is not None and pkt[9 if v == 4 else 6] == 6:
                self.slow.pace(f_slow, n)
            if df_work and osa.outer_hdr == 20:
                # an IPv6 inner counts as no DF (FreeBSD: `setdf` unset); a call only on a change
                on = df_by[v == 4 and pkt[6] >> 6 & 1]
                if df_on.get(osa.sock, False) != on:
                    self.outer_df.set(osa.sock, on)
            if f_nh is not None and nh == 41:
                nh = 4  # IPv6 inner announced as IPv4: the peer cannot deliver it
            seq = osa.seq + 1
            if seq > seq_low and not osa.esn:  # RFC 4303 3.3.3: a 32-bit counter never cycles
                osa.seq = seq_low
                a[X_WRAPS] += 1
                continue
            osa.seq = seq
            # fault esn_high_bits_lost: the ICV/AAD covers 0 as the high half
            esp = osa.seal(pkt, nh, seq if f_esn is None else seq & seq_low, f_padx, f_nonce)
            # pacing: the port is the bottleneck; the frame leaves when the port's model sends
            # it (its stated queue full: dropped as it was admitted), costed as the wire does:
            # ESP, the outer header, Ethernet's header and its 24 bytes of preamble, FCS, gap
            if osa.pace and dep is not None:  # (dep None: counted below, then dropped: queue_full)
                port.wait(dep, osa.pace, len(esp) + osa.outer_hdr + WIRE_EXTRA, n, osa.odrop_idx)
            elif not osa.pace:
                port.rate = 0.0  # an unpaced SA's packets model no port queue
            for i in incs:
                p[i] += 1
            if data_frame(pkt, v == 4):  # a pure ACK's CPU is in its stream's data frames' (cost.data_frame)
                p[i_cpu] += osa.cpu_ns  # the appliance's CPU for this packet (kern.cp_time's intr)
            if self.extra_pending:
                self.extra_pending = 0
                p[incs[0]] += 1
            if osa.ibytes >= 0:
                p[osa.ibytes] += len(esp) - osa.fixed  # ESP plaintext: inner + pad + 2
            b = osa.base  # its record: packets and bytes here, the rest at the flush
            if not p[b + SA_PACKETS]:
                records.append(osa)
            p[b + SA_PACKETS] += 1
            p[b + SA_BYTES] += n
            if f_pad is not None and n % 16 == f_pad.get("residue", 9):
                a[i_faulted] += 1  # fault pad_length_lost: counted, never sent
                continue
            if dep is None or f_oq is not None and self.oq.full(a, osa, f_oq):  # fault oq_drop_counted
                queue_full(a, osa, dep)
                continue
            if f_clear is not None:
                self.leak.send(osa.src, pkt)
            if f_drop is not None or f_icv is not None or f_replay is not None:
                self.fault_n += 1
                k = self.fault_n
                if f_drop is not None and k % max(1, int(f_drop.get("n", 100))) == 0:
                    a[i_faulted] += 1
                    continue
                if f_icv is not None and k % max(1, int(f_icv.get("every", 50))) == 0:
                    esp = esp[:-1] + bytes((esp[-1] ^ 0x01,))
                    a[i_faulted] += 1
                if f_replay is not None and k % max(1, int(f_replay.get("every", 50))) == 0:
                    _send(a, osa, esp)
                    a[i_faulted] += 1
            _send(a, osa, esp)


def tx_fault_params(F: JsonWatch) -> tuple:
    """The transmit loop's faults, in the order TxLoop.run unpacks them (read every 0.1 s):
    each one's parameters or None; esp_pad_extra and gcm_nonce_swapped as booleans."""
    fp = fault_params
    return (fp(F, "drop_every"), fp(F, "corrupt_icv"), fp(F, "replay"), fp(F, "wrong_next_header"),
            fp(F, "fragment_instead_of_ptb"), fp(F, "wrong_ptb_mtu"), fp(F, "slow_first_stream"),
            fp(F, "expired_drops_uncounted"), fp(F, "esp_pad_extra") is not None,
            fp(F, "gcm_nonce_swapped") is not None, fp(F, "cleartext_leak"), fp(F, "oq_drop_counted"),
            fp(F, "esn_high_bits_lost"), fp(F, "pad_length_lost"))


class EspRingDrops:
    """esp0's own drops (its ring full while the transmit loop was behind: Linux's TUN
    counts them in tx_dropped), added to the paced port's output-drop slot as they appear.
    On FreeBSD the kernel hands a packet to the interface's send queue and counts one it
    refuses there (IFCOUNTER_OQDROPS); esp0 is the twin's way into the engine, so its
    drops are that port's. Read every 0.1 s of traffic (the loop's check), not per packet."""

    def __init__(self, tun_name: str) -> None:
        self.path = f"/sys/class/net/{tun_name}/statistics/tx_dropped"
        self.seen = self._read()

    def _read(self) -> int | None:
        try:
            with open(self.path) as fh:
                return int(fh.read())
        except (OSError, ValueError):
            return None  # no such device here (a unit test's loop): nothing to count

    def count(self, port: PortQueue) -> None:
        now = self._read()
        if now is None or self.seen is None:
            self.seen = now
            return
        if now > self.seen:
            port.count_drops(now - self.seen)
        self.seen = now


def queue_full(a, osa: OutSa, dep: float | None) -> None:
    """A kernel-run SA's packet that found its port's queue full (``dep`` None: the port
    model refused it, pacer.PortQueue.admit): FreeBSD's esp_output counted it (esps_output,
    the bytes, the histogram: done above), ip_output then met the full send queue:
    IFCOUNTER_OQDROPS, the port's output drops. (An offloaded SA's packet never reaches
    here: the port's queue refused it before the driver counted it.) ``dep`` set: fault
    oq_drop_counted already counted it (txfaults.OutputQueueFull)."""
    if dep is None and osa.odrop_idx >= 0:
        a[osa.odrop_idx] += 1


def _send(a, osa: OutSa, esp: bytes) -> None:
    """Send a sealed frame (netio.send_frame), or count it as a failed send."""
    try:
        netio.send_frame(osa.sock, esp, osa.addr)
    except OSError as exc:
        _send_failed(a, osa, exc)


def _send_failed(a, osa: OutSa, exc: OSError) -> None:
    """A send the kernel refused, counted on the SA's index and the engine's: for an
    offloaded SA the driver's transmit drop (the port's queue was full after the driver
    counted the frame: ENOBUFS, netio.tx_socket says why it is seen)."""
    a[osa.fail_idx] += 1
    if osa.fail_idx != INDEX["eng:tx_sendfail"]:
        a[INDEX["eng:tx_sendfail"]] += 1
    if exc.errno not in netio.FRAME_ERRNOS:
        print(f"engine tx: send failed: {exc}", file=sys.stderr)
