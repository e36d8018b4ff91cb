"""The receive loop (ESP -> esp0), one process (ipsec_hil_twin.engine.datapath says why two,
and what each counts): raw ESP by (SPI, destination) -> replay check -> ICV -> decrypt ->
the association's policy -> esp0.

Apart from the transmit loop so each module stays one job (tests/plugin/test_code_size.py);
both share ipsec_hil_twin.engine.loop_base.
"""
from __future__ import annotations

import ipaddress
import os
import select
import socket
import struct
import sys
import time
from pathlib import Path

from ipsec_hil_twin.faults import fault_params
from ipsec_hil_twin.personality import for_driver

from . import netio
from .cost import charge_in, data_frame
from .counters import (ALG_OF_CIPHER, HIST_ALGS, HIST_IN, INDEX, SA_BYTES, SA_PACKETS, PendingCounts, RxCounters,
                       port_drop)
from .esp import EspError, ReplayWindow, make_suite
from .loop_base import IGEN_ANY, Loop as _Loop
from .pacer import CatchUp
from .sa_state import InSa
from .selectors import ADDR4, ADDR6, DST4, DST6, parse_selector
from .sizes import FRAMING

# receive-side kernel/engine counter indexes (the layout is static; driver ones: RxCounters)
X_NOT_ESP, X_FRAMES, X_RECEIVED = (INDEX[k] for k in ("eng:rx_not_esp", "eng:rx_frames", "esp:received-packets"))
X_POSSIBLE_REPLAY, X_BAD_LENGTH, X_POLICY = (INDEX[k] for k in (
    "esp:possible-replay-detected", "esp:dropped-bad-length", "esp:dropped-policy-violation"))
X_RECV_BYTES, X_WRITE_FAIL = (INDEX[k] for k in ("esp:receieve-bytes", "eng:rx_write_fail"))
X_NO_TDB = INDEX["esp:dropped-no-tdb"]
X_SHORT_HEADER = INDEX["esp:dropped-short-header"]
X_CPU = INDEX["cpu:ns_rx"]  # the appliance's CPU this loop charges (ipsec_hil_twin.engine.cost)
ESPSTAT = {k[4:]: i for k, i in INDEX.items() if k.startswith("esp:")}
SPI_SEQ = struct.Struct("!II").unpack_from  # (SPI, 32-bit sequence number) of an ESP header


class RxLoop(_Loop):
    """raw ESP -> SA by (SPI, dst) -> replay check -> ICV -> decrypt -> checks -> esp0."""

    def __init__(self, host_dir: Path, tun_fd: int, driver: str, lan_Bps: float | None = None,
                 cpu_ns: float | None = None, ports: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> None:
        super().__init__(host_dir, tun_fd, driver, cpu_ns)
        self.catch_up = CatchUp(lan_Bps)  # after a stall, out at the port's rate (pacer.CatchUp)
        self.inputs = PortInputs(ports)  # ESP in by port: a frame a socket had no room for is its port's
        self.sas: dict[tuple[int, bytes], InSa] = {}
        self.x = x = RxCounters.of(for_driver(driver).counting)
        # what every delivered frame moves, summed per epoll batch (PendingCounts)
        self.pend = PendingCounts(self.a, (X_FRAMES, X_RECEIVED, X_RECV_BYTES, x.frame, x.inner_v6, x.done_v4,
                                           x.done_v6, X_CPU, *(INDEX[HIST_IN + h] for h in HIST_ALGS)))
        self.wall = int(time.time())
        self.f_slow: dict | None = None
        self.f_icv_ok: dict | None = None
        self.f_pad: int | None = None
        self.f_loss = 0  # fault wire_loss_uncounted's n (0: off)
        self.lost = 0  # frames seen while it is on

    def reload(self) -> None:
        st = self._take_generations()
        self.faults.refresh(time.monotonic(), force=True)
        new = {}
        for e in st.get("sas", []):
            if e["direction"] != "in":
                continue
            key = (e["spi"], ipaddress.ip_address(e["dst"]).packed)
            esn = bool(e.get("esn"))
            try:
                suite = make_suite(e["cipher"], e["spi"], bytes.fromhex(e["enc_key"]),
                                   bytes.fromhex(e["auth_key"]) if e.get("auth_key") else None, esn)
            except (ValueError, KeyError) as exc:
                print(f"engine rx: SA spi={e.get('spi', 0):#x} not usable: {exc}", file=sys.stderr)
                continue
            old = self.sas.get(key)
            w = int(e.get("replay_window", 32))
            replay = old.replay if old is not None and old.replay is not None else (ReplayWindow(w, esn) if w else None)
            new[key] = InSa(spi=e["spi"], dst=e["dst"], open_fitted=suite.open_fitted, replay=replay,
                            fits=suite.fits, open_unverified=suite.open_unverified,
                            slot=e["slot"], base=self.c.sa_slot(e["slot"]), offloaded=e["offloaded"],
                            alg_idx=INDEX[HIST_IN + ALG_OF_CIPHER[e["cipher"]]],
                            fixed=FRAMING[e["cipher"]].fixed,
                            local=[parse_selector(t) for t in e.get("local_ts", [])],
                            remote=[parse_selector(t) for t in e.get("remote_ts", [])],
                            encap=bool(e.get("encap")))
        self.sas = new
        charge_in(new.values(), self.cost)
        self.faults_changed()

    def faults_changed(self) -> None:
        """Receive-side faults: the window's reach and bitmap use are set on each window
        (a driver bug in its replay logic), the rest read per packet."""
        fp, F = fault_params, self.faults
        self.f_slow = fp(F, "slow_first_stream")
        self.f_icv_ok = fp(F, "tampered_icv_delivered")
        loss = fp(F, "wire_loss_uncounted")
        self.f_loss = 0 if loss is None else max(1, int(loss.get("n", 100)))
        pad = fp(F, "pad_length_lost")
        self.f_pad = None if pad is None else int(pad.get("residue", 9))
        off_by_one = fp(F, "replay_window_off_by_one") is not None
        dup_ok = fp(F, "replay_duplicates_accepted") is not None
        no_wrap = fp(F, "esn_rx_high_bits_lost") is not None
        for sa in self.sas.values():
            if sa.replay is not None:
                sa.replay.reach = sa.replay.size + off_by_one
                sa.replay.dup_ok = dup_ok
                sa.replay.no_wrap = no_wrap

    def run(self) -> None:
        self.reload()
        ep = select.epoll()
        kinds = {}  # fd -> (socket, kind: 4, 6 or "udp", its index in self.inputs.socks)
        for i, (s, kind, _slot) in enumerate(self.inputs.socks):
            s.setblocking(False)
            ep.register(s.fileno(), select.EPOLLIN)
            kinds[s.fileno()] = (s, kind, i)
        count_drops = self.inputs.count_drops
        buf = bytearray(65536)
        mv = memoryview(buf)
        anc = socket.CMSG_SPACE(20)
        frame = self.frame
        flush = self.pend.flush
        while True:
            events = ep.poll()
            t = time.time()
            self.wall = int(t)
            if t >= self.cost.until and self.cost.at(t):  # a new epoch of the noise: its CPU factor
                charge_in(self.sas.values(), self.cost)
            a = self.a
            if a[IGEN_ANY] != self.gen_any:
                self.reload()
            if self.faults.refresh(time.monotonic()):
                self.faults_changed()
            for fd, _ in events:  # at most 64 frames per socket, then store the counts, re-check generations
                sock, kind, k = kinds[fd]
                count_drops(a, k)  # a socket that dropped has frames waiting: it is among the events
                if kind == 4:
                    for _i in range(64):
                        try:
                            n = sock.recv_into(buf)
                        except BlockingIOError:
                            break
                        ihl = (buf[0] & 15) * 4
                        frame(bytes(mv[ihl:n]), bytes(buf[16:20]))
                elif kind == 6:
                    for _i in range(64):
                        try:
                            n, ancdata, _fl, _addr = sock.recvmsg_into([buf], anc)
                        except BlockingIOError:
                            break
                        dst = b""
                        for lvl, typ, data in ancdata:
                            if lvl == socket.IPPROTO_IPV6 and typ == socket.IPV6_PKTINFO:
                                dst = bytes(data[:16])
                        frame(bytes(mv[:n]), dst)
                else:
                    self._udp_batch(sock, buf, mv)
            flush(self.wall)

    def _udp_batch(self, su: socket.socket, buf: bytearray, mv: memoryview) -> None:
        """ESP from UDP 4500 (udp_ipsec_input), up to 64 datagrams."""
        for esp, dst in netio.natt_datagrams(su, buf, mv, 64):
            sa = self.sas.get((int.from_bytes(esp[:4], "big"), dst))
            if sa is None or not sa.encap:  # `sav->natt == NULL`: esps_notdb, before any driver
                self.a[X_NO_TDB] += 1
                continue
            self.frame(esp, dst)

    def frame(self, esp: bytes, dst: bytes) -> None:
        """One received ESP payload (generation checked per epoll batch by run()). The
        counters every delivered frame moves go to `self.pend` (stored after the batch),
        the rest to the block at once."""
        a = self.a
        if self.f_loss:  # fault wire_loss_uncounted: every n-th frame lost on the wire, before any counter
            self.lost += 1
            if not self.lost % self.f_loss:
                return
        if len(esp) < 8:  # FreeBSD ipsec_common_input: esps_hdrops before any SA lookup
            a[X_NOT_ESP] += 1
            a[X_SHORT_HEADER] += 1
            return
        p = self.pend.p
        p[X_FRAMES] += 1
        spi, seq = SPI_SEQ(esp)
        sa = self.sas.get((spi, dst))
        if sa is None and a[IGEN_ANY] != self.gen_any:
            # the table changed since this batch began (an SA added while the loop was
            # descheduled mid-batch): FreeBSD's SAD knows an SA once key_add returns, so look again
            self.reload()
            sa = self.sas.get((spi, dst))
        x = self.x
        if sa is None:
            a[x.no_sa] += 1
            return
        off = sa.offloaded
        if off:
            if x.frame >= 0:
                p[x.frame] += 1
        else:
            p[X_RECEIVED] += 1
            p[sa.alg_idx] += 1
        if not sa.fits(len(esp)):  # FreeBSD esp_input: esps_badilen, before the replay check
            a[x.malformed if off else X_BAD_LENGTH] += 1
            return
        rp = sa.replay
        # past the right edge without ESN: ReplayWindow.check's first answer, without the call
        if rp is not None and (seq <= rp.top or rp.esn):
            seq = rp.check(seq)  # the full (ESN) number, 0 to drop
            if not seq:
                a[x.replay if off else X_POSSIBLE_REPLAY] += 1
                return
        try:
            inner, nh = sa.open_fitted(esp, seq >> 32)
        except EspError as e:
            a[(x.bad if e.kind == "auth" else x.malformed) if off else ESPSTAT[e.espstat]] += 1
            if e.kind != "auth" or self.f_icv_ok is None:
                return
            try:  # fault tampered_icv_delivered: counted, and delivered all the same
                inner, nh = sa.open_unverified(esp)
            except EspError:
                return
            rp = None  # an unauthenticated frame never moves the window
        if rp is not None:
            rp.update(seq)
        if data_frame(inner, nh == 4):  # a pure ACK's CPU is in its stream's data frames' (cost.data_frame)
            p[X_CPU] += sa.cpu_ns  # opened: the appliance's CPU for it (kern.cp_time's intr)
        if self.f_pad is not None and len(inner) % 16 == self.f_pad:
            return  # fault pad_length_lost: this padding length never comes out of the driver
        # the policy cache first (nh 4/41: _strip checked the version and length)
        ok = sa.policy_cache.get(inner[ADDR4 if nh == 4 else ADDR6]) if sa.addr_only else None
        if not (ok if ok is not None else sa.allowed(inner)):
            if off:
                a[x.blocked] += 1
            else:
                a[X_POLICY] += 1
            return
        b = sa.base  # its record: packets and bytes here, the rest at the flush
        if not p[b + SA_PACKETS]:
            self.pend.records.append(sa)
        p[b + SA_PACKETS] += 1
        p[b + SA_BYTES] += len(inner)
        if not off:
            p[X_RECV_BYTES] += len(esp) - sa.fixed
        if self.f_slow is not None and inner[9 if nh == 4 else 6] == 6:
            self.slow.pace(self.f_slow, len(inner))
        if off and nh == 41 and x.inner_v6 >= 0:
            p[x.inner_v6] += 1
        if inner[DST4 if nh == 4 else DST6] not in self.own:  # forwarded: onto a LAN port (own: no port)
            self.catch_up.pace(len(inner), nh == 4)
        try:
            os.write(self.tun, inner)
        except OSError:
            a[x.refused if off else X_WRITE_FAIL] += 1
            return
        if off:
            p[x.done_v4 if nh == 4 else x.done_v6] += 1


class PortInputs:
    """The receive loop's sockets: raw ESP (IPv4, IPv6) and UDP 4500, one of each per port
    of host.json (``ports``: (ifname, CIDRs) in order; SO_BINDTODEVICE), or one of each for
    the whole namespace when none is given (a unit test's loop).

    Why per port (issue 52): a frame a socket had no room for (SO_MEMINFO's drops) is a
    frame that port's NIC missed -- FreeBSD's IFCOUNTER_IQDROPS, `netstat -i`'s Idrop --
    so :meth:`count_drops` adds each socket's new drops to its port's input-drop slot
    (engine.counters.port_drop). One socket for all ports could not say whose it was."""

    def __init__(self, ports: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
        names: list[tuple[str | None, int]] = [(ifname, INDEX[port_drop(k, "idrop")])
                                               for k, (ifname, _addrs) in enumerate(ports)] or [(None, -1)]
        #: (socket, kind: 4, 6 or "udp", its port's input-drop slot)
        self.socks: list[tuple[socket.socket, object, int]] = []
        for ifname, slot in names:
            self.socks += [(netio.rx_socket(socket.AF_INET, ifname), 4, slot),
                           (netio.rx_socket(socket.AF_INET6, ifname), 6, slot),
                           (netio.udp_encap_rx_socket(ifname), "udp", slot)]
        self.seen = [0] * len(self.socks)

    def count_drops(self, a, i: int) -> None:
        """Socket ``i``'s drops since the last look, onto its port's slot: one getsockopt,
        for a socket with frames waiting only (one that dropped a frame is full, so readable)."""
        s, _kind, slot = self.socks[i]
        d = netio.socket_drops(s)
        if d != self.seen[i]:
            if slot >= 0:
                a[slot] += d - self.seen[i]
            self.seen[i] = d
