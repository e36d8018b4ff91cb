"""The transmit loop (esp0 -> ESP) and the receive loop (ESP -> esp0), one process each.

Why two processes: Python's per-packet cost is the limit (machine-facts.md), and a
process per direction roughly doubles what one can do.  Both loops learn about SA and
fault changes without IPC round trips: the control process rewrites DIR/engine.state.json
and bumps a generation counter in the shared counter block; a loop compares that
generation on each packet (one memoryview read) and reloads when it moved.

Own vs forwarded (the FreeBSD gate applies to forwarded packets only): a packet is the
appliance's own when its source address is one of the namespace's addresses (listed by
the control process in the state file).  The routes already separate the two (ip rule
`iif lo` -> "own" table with the exact ESP MTU; everything else -> "fwd" table with the
path MTU); the source-address test tells the loop which counters to move.

Counting (DESIGN.md "Hardware profiles"), per packet, for offloaded SAs:
  octep  tx: tx_encrypt + FROM_KN_TO_IPSEC_ENCR (+ out_taken for own packets); send
             failure -> TX_DROP_QUEUE_FULL.
         rx: FROM_WIRE_TO_IPSEC_DECR per frame of a known SA; replay -> CRYPTO_DROP_REPLAY_OOW;
             ICV/malformed -> rx_bad; inner outside the SA's selectors -> rx_blocked;
             IPv6 inner -> rx_v6; written to esp0 -> rx_done, refused -> rx_queuefail.  Unknown SPI: no driver SA, so the kernel's
             dropped-no-tdb.
  npuep  tx: forwarded -> tx_taken; own -> tx_accel (the offload path), except own packets
             whose FreeBSD route names a gateway off the tunnel's port -> tx_taken (the
             association's output step; the 001 page); send failure -> tx_drop.
         rx: IPv4 inner delivered -> rx_done, IPv6 -> rx_v6; ICV/malformed/replay/outside
             the selectors -> rx_bad; unknown SPI -> rx_nosa.
SAs not offloaded (offload:false, declined, driver not loaded) count FreeBSD's espstat:
sent-packets/sent-bytes, received-packets (every frame of a known SA, before checks, as
esp_input does)/receieve-bytes, dropped-bad-auth, possible-replay-detected,
dropped-bad-length (malformed inner), dropped-policy-violation and the histogram.  Byte counters
count the ESP plaintext (inner + padding + trailer) on both sides, so sent == received.
A packet that no outbound SA selects is counted only as the engine's `tx_no_sa`: no
driver counter represents it (FreeBSD would not have handed it to the driver).
"""
from __future__ import annotations

import ipaddress
import json
import os
import select
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import netio
from .counters import ALG_OF_CIPHER, INDEX, SA_BASE as _SA_BASE, SA_STRIDE, CounterBlock
from .esp import EspError, ReplayWindow, make_suite
from .faultview import JsonWatch, dfbit, fault_params
from .selectors import Selector, parse_selector

IGEN_SA = INDEX["gen:gen_sa"]
IGEN_FAULTS = INDEX["gen:gen_faults"]
IGEN_RESET = INDEX["gen:gen_reset"]
# receive-side counter indexes (the layout is static)
X_NOT_ESP, X_FRAMES, X_NO_TDB, X_NOSA = (INDEX[k] for k in ("eng:rx_not_esp", "eng:rx_frames", "esp:dropped-no-tdb", "rx_nosa"))
X_FROM_WIRE, X_RECEIVED, X_REPLAY_OOW, X_RX_BAD = (INDEX[k] for k in (
    "FROM_WIRE_TO_IPSEC_DECR", "esp:received-packets", "CRYPTO_DROP_REPLAY_OOW", "rx_bad"))
X_POSSIBLE_REPLAY, X_BAD_AUTH, X_BAD_LENGTH, X_BLOCKED, X_POLICY = (INDEX[k] for k in (
    "esp:possible-replay-detected", "esp:dropped-bad-auth", "esp:dropped-bad-length", "rx_blocked",
    "esp:dropped-policy-violation"))
X_RECV_BYTES, X_RX_V6, X_QUEUEFAIL, X_WRITE_FAIL, X_RX_DONE = (INDEX[k] for k in (
    "esp:receieve-bytes", "rx_v6", "rx_queuefail", "eng:rx_write_fail", "rx_done"))


def load_state(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"sas": [], "own_addrs": [], "driver": "octep"}


@dataclass
class OutSa:
    spi: int
    dst: str
    src: str
    outer: str
    cipher: str
    local: list[Selector]
    remote: list[Selector]
    seal: Any
    sock: socket.socket
    addr: tuple
    slot: int
    path_mtu: int
    own_limit: int
    fwd_limit: int
    rate_Bps: float
    inc_own: tuple[int, ...]
    inc_own_step: tuple[int, ...]
    inc_fwd: tuple[int, ...]
    ibytes: int  # esp sent-bytes index or -1
    fail_idx: int
    seq: int = 0
    outer_hdr: int = 20
    fixed: int = 32  # SPI+seq+IV+ICV: 32 for GCM, 40 for CBC


@dataclass
class InSa:
    spi: int
    dst: str
    open_: Any
    replay: ReplayWindow | None
    slot: int
    offloaded: bool
    alg_idx: int
    fixed: int = 32
    local: list[Selector] = field(default_factory=list)
    remote: list[Selector] = field(default_factory=list)
    policy_cache: dict = field(default_factory=dict)

    def allowed(self, inner: bytes) -> bool:
        """Inbound policy: inner source inside remote_ts, destination inside local_ts."""
        key = _fast_key(inner) or _flow(inner)
        ok = self.policy_cache.get(key)
        if ok is None:
            f = _flow(inner)
            if f is None:
                return False
            _v, s, d, proto, sp, dp = f
            ok = (_sel_match(self.remote, ipaddress.ip_address(s), proto, sp)
                  and _sel_match(self.local, ipaddress.ip_address(d), proto, dp))
            if len(self.policy_cache) > 65536:
                self.policy_cache.clear()
            self.policy_cache[key] = ok
        return ok


def _flow(pkt: bytes) -> tuple[int, bytes, bytes, int, int, int] | None:
    """(version, src, dst, proto, sport, dport) of an inner packet, None if not IP."""
    v = pkt[0] >> 4
    if v == 4:
        ihl = (pkt[0] & 15) * 4
        proto = pkt[9]
        if proto in (6, 17) and len(pkt) >= ihl + 4 and not (pkt[6] & 0x1F or pkt[7]):
            sp, dp = struct.unpack_from("!HH", pkt, ihl)
        else:
            sp = dp = -1
        return 4, pkt[12:16], pkt[16:20], proto, sp, dp
    if v == 6 and len(pkt) >= 40:
        proto = pkt[6]
        if proto in (6, 17) and len(pkt) >= 44:
            sp, dp = struct.unpack_from("!HH", pkt, 40)
        else:
            sp = dp = -1
        return 6, pkt[8:24], pkt[24:40], proto, sp, dp
    return None


def _fast_key(pkt: bytes) -> bytes | None:
    """A cheap cache key with the same information as _flow() (None: use _flow)."""
    b0 = pkt[0]
    if b0 == 0x45:
        if pkt[6] & 0x3F or pkt[7]:
            return None  # a non-first fragment: no ports
        return pkt[9:10] + (pkt[12:24] if pkt[9] in (6, 17) else pkt[12:20])
    if b0 >> 4 == 6 and len(pkt) >= 44:
        return pkt[6:7] + (pkt[8:44] if pkt[6] in (6, 17) else pkt[8:40])
    return None


def _specificity(sel: Selector) -> int:
    """More specific (longer prefix, a protocol, ports) is larger."""
    return (sel.net.prefixlen * 4 + (64 if sel.proto is not None else 0)
            + (32 if (sel.port_lo, sel.port_hi) != (0, 65535) else 0))


def _pairs(order: list["OutSa"]) -> list[tuple["OutSa", Selector, Selector]]:
    """Every (SA, local selector, remote selector) pair, most specific first -- as
    strongSwan's policy priorities order the SPD; stable, so of two equal SAs (a
    rekey) the older one is used until it is deleted."""
    pairs = []
    for osa in order:
        for ls in osa.local:
            for rs in osa.remote:
                if ls.net.version == rs.net.version:
                    pairs.append((-(_specificity(ls) + _specificity(rs)), len(pairs), osa, ls, rs))
    pairs.sort(key=lambda p: (p[0], p[1]))
    return [(p[2], p[3], p[4]) for p in pairs]


def _sel_match(sels: list[Selector], addr, proto: int, port: int) -> bool:
    for s in sels:
        if addr.version != s.net.version or addr not in s.net:
            continue
        if s.proto is not None and s.proto != proto:
            continue
        if (s.port_lo, s.port_hi) != (0, 65535) and not (port >= 0 and s.port_lo <= port <= s.port_hi):
            continue
        return True
    return False


class TxLoop:
    """esp0 -> select SA -> FreeBSD gate -> pace -> seal -> raw socket."""

    def __init__(self, host_dir: Path, tun_fd: int, driver: str) -> None:
        self.dir = Path(host_dir)
        self.tun = tun_fd
        self.driver = driver
        self.c = CounterBlock(self.dir / "engine.counters")
        self.a = self.c.a
        self.faults = JsonWatch(self.dir / "faults.json")
        self.sysctl = JsonWatch(self.dir / "sysctl.json")
        self.icmp4, self.icmp6 = netio.icmp_sockets()
        self.socks: dict[str, socket.socket] = {}
        self.sas: dict[tuple[int, str], OutSa] = {}
        self.order: list[OutSa] = []
        self.pairs: list = []
        self.cache: dict = {}
        self.own: set[bytes] = set()
        self.own_step: list = []
        self.gen = (-1, -1, -1)
        self.faults_ver = -1
        self.tokens = 0.0
        self.t_last = time.monotonic()
        self.fault_n = 0
        self.extra_pending = 0
        self.slow = FirstStreamPacer()

    # -- state -------------------------------------------------------------------------
    def reload(self) -> None:
        a = self.a
        gen = (a[IGEN_SA], a[IGEN_FAULTS], a[IGEN_RESET])
        if gen[2] != self.gen[2]:
            self.slow.reset()
            self.sas.clear()
        self.gen = gen
        st = load_state(self.dir / "engine.state.json")
        self.own = {ipaddress.ip_address(x).packed for x in st.get("own_addrs", [])}
        self.own_step = [ipaddress.ip_network(x) for x in st.get("own_output_step", [])]
        new: dict[tuple[int, str], OutSa] = {}
        order = []
        for e in st.get("sas", []):
            if e["direction"] != "out":
                continue
            key = (e["spi"], e["dst"])
            old = self.sas.get(key)
            try:
                osa = self._build(e)
            except (OSError, ValueError, KeyError) as exc:  # e.g. src not an address here
                print(f"engine tx: SA spi={e.get('spi', 0):#x} not usable: {exc}", file=sys.stderr)
                continue
            if old is not None:
                osa.seq = old.seq
            new[key] = osa
            order.append(osa)
        self.sas = new
        self.order = order
        self.pairs = _pairs(order)
        self.cache.clear()
        self.faults.refresh(time.monotonic(), force=True)
        self.sysctl.refresh(time.monotonic(), force=True)
        self._faults_changed()

    def _build(self, e: dict) -> OutSa:
        I = INDEX
        src = e["src"]
        sock = self.socks.get(src)
        if sock is None:
            sock = self.socks[src] = netio.tx_socket(src)
        outer = "ipv6" if ":" in e["dst"] else "ipv4"
        off = e["offloaded"]
        if off and self.driver == "octep":
            inc_fwd = (I["tx_encrypt"], I["FROM_KN_TO_IPSEC_ENCR"])
            inc_own = inc_own_step = inc_fwd + (I["out_taken"],)
            fail = I["TX_DROP_QUEUE_FULL"]
        elif off:
            inc_fwd, inc_own, fail = (I["tx_taken"],), (I["tx_accel"],), I["tx_drop"]
            inc_own_step = inc_fwd
        else:
            inc_fwd = inc_own = inc_own_step = (I["esp:sent-packets"], I["hist:" + ALG_OF_CIPHER[e["cipher"]]])
            fail = I["eng:tx_sendfail"]
        suite = make_suite(e["cipher"], e["spi"], bytes.fromhex(e["enc_key"]),
                           bytes.fromhex(e["auth_key"]) if e.get("auth_key") else None)
        return OutSa(
            spi=e["spi"], dst=e["dst"], src=src, outer=outer, cipher=e["cipher"],
            local=[parse_selector(t) for t in e.get("local_ts", [])],
            remote=[parse_selector(t) for t in e.get("remote_ts", [])],
            seal=suite.seal, sock=sock,
            addr=(e["dst"], 0, 0, 0) if outer == "ipv6" else (e["dst"], 0),
            slot=e["slot"], path_mtu=e["path_mtu"], own_limit=e["own_limit"],
            fwd_limit=e["fwd_limit"], rate_Bps=(e.get("rate_mbit") or 0) * 125000.0,
            inc_own=inc_own, inc_own_step=inc_own_step, inc_fwd=inc_fwd,
            ibytes=-1 if off else I["esp:sent-bytes"], fail_idx=fail,
            outer_hdr=40 if outer == "ipv6" else 20,
            fixed=32 if e["cipher"] == "aes-gcm-16" else 40,
        )

    def _faults_changed(self) -> None:
        if self.faults.version != self.faults_ver:
            self.faults_ver = self.faults.version
            self.extra_pending = 1 if fault_params(self.faults, "count_extra") is not None else 0

    def select(self, pkt: bytes) -> tuple[OutSa | None, bool, tuple[int, ...]]:
        """(SA, own?, counter indexes to bump) for an inner packet, cached per flow."""
        key = _fast_key(pkt) or _flow(pkt)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        f = _flow(pkt)
        if f is None:
            return None, False, ()
        v, s, d, proto, sp, dp = f
        sa_ = ipaddress.ip_address(s)
        da = ipaddress.ip_address(d)
        chosen = None
        for osa, ls, rs in self.pairs:
            if _sel_match((ls,), sa_, proto, sp) and _sel_match((rs,), da, proto, dp):
                chosen = osa
                break
        own = s in self.own
        incs: tuple[int, ...] = ()
        if chosen is not None:
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
        a = self.a
        read = os.read
        tun = self.tun
        mono = time.monotonic
        self.reload()
        i_nosa = INDEX["eng:tx_no_sa"]
        i_ptb = INDEX["eng:tx_ptb"]
        i_big = INDEX["eng:tx_too_big_own"]
        i_faulted = INDEX["eng:tx_faulted"]
        fp = fault_params
        next_check = 0.0
        f_drop = f_icv = f_replay = f_nh = f_frag = f_ptb = f_slow = None
        g_sa, g_f, g_r = self.gen
        select = self.select
        wall = int(time.time())
        while True:
            pkt = read(tun, 65536)
            if not pkt:
                continue
            if a[IGEN_SA] != g_sa or a[IGEN_FAULTS] != g_f or a[IGEN_RESET] != g_r:
                self.reload()
                g_sa, g_f, g_r = self.gen
                next_check = 0.0
            now = mono()
            if now >= next_check:
                next_check = now + 0.1
                wall = int(time.time())
                self.faults.refresh(now, force=True)
                self.sysctl.refresh(now, force=True)
                self._faults_changed()
                F = self.faults
                f_drop, f_icv, f_replay = fp(F, "drop_every"), fp(F, "corrupt_icv"), fp(F, "replay")
                f_nh, f_frag, f_ptb = fp(F, "wrong_next_header"), fp(F, "fragment_instead_of_ptb"), fp(F, "wrong_ptb_mtu")
                f_slow = fp(F, "slow_first_stream")
                # fault ipv4_df_gate: gate forwarded IPv4 by its DF bit (dfbit 2's rule)
                # although net.inet.ipsec.dfbit says 0 -- the 000 page's IPv4 test must fail
                df = 2 if fp(F, "ipv4_df_gate") is not None else dfbit(self.sysctl)
            osa, own, incs = select(pkt)
            if osa is None:
                a[i_nosa] += 1
                continue
            n = len(pkt)
            v = pkt[0] >> 4
            nh = 4 if v == 4 else 41
            # FreeBSD's gate for forwarded packets (ipsec6_check_pmtu / ipsec4_check_pmtu)
            if not own and n > osa.fwd_limit:
                gate = v == 6 or df == 1 or (df == 2 and pkt[6] & 0x40)
                if gate and not (v == 6 and f_frag is not None):
                    mtu = osa.fwd_limit + (int(f_ptb.get("delta", -8)) if f_ptb is not None else 0)
                    try:
                        if v == 6:
                            netio.send_ptb6(self.icmp6, pkt, mtu)
                        else:
                            netio.send_frag_needed(self.icmp4, pkt, mtu)
                        a[i_ptb] += 1
                    except OSError as exc:
                        print(f"engine tx: PTB not sent: {exc}", file=sys.stderr)
                    continue
            elif own and n > osa.own_limit:
                a[i_big] += 1  # only reachable when the own route MTU was raised (fault)
            # pacing: the port is the bottleneck, so wait here and let esp0's queue drop
            if osa.rate_Bps:
                wire = n + 80
                self.tokens += (now - self.t_last) * osa.rate_Bps
                self.t_last = now
                if self.tokens > 65536:
                    self.tokens = 65536.0
                self.tokens -= wire
                if self.tokens < 0:
                    time.sleep(-self.tokens / osa.rate_Bps)
            if f_slow is not None and pkt[9 if v == 4 else 6] == 6:
                self._slow(f_slow, n)
            if f_nh is not None and nh == 41:
                nh = 4  # IPv6 inner announced as IPv4: the peer cannot deliver it
            osa.seq += 1
            seq = osa.seq
            esp = osa.seal(pkt, nh, seq)
            a[incs[0]] += 1
            if len(incs) > 1:
                for i in incs[1:]:
                    a[i] += 1
            if self.extra_pending:
                self.extra_pending = 0
                a[incs[0]] += 1
            if osa.ibytes >= 0:
                a[osa.ibytes] += len(esp) - osa.fixed  # ESP plaintext: inner + pad + 2
            b = SA_STRIDE * osa.slot + _SA_BASE
            a[b] += 1
            a[b + 1] += n
            a[b + 2] = wall
            a[b + 3] = seq
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
                    self._send(osa, esp)
                    a[i_faulted] += 1
            self._send(osa, esp)

    def _send(self, osa: OutSa, esp: bytes) -> None:
        try:
            osa.sock.sendto(esp, osa.addr)
        except OSError as exc:
            self.a[osa.fail_idx] += 1
            if osa.fail_idx != INDEX["eng:tx_sendfail"]:
                self.a[INDEX["eng:tx_sendfail"]] += 1
            if exc.errno not in (105, 11, 90):  # ENOBUFS, EAGAIN, EMSGSIZE
                print(f"engine tx: send failed: {exc}", file=sys.stderr)

    def _slow(self, params: dict, n: int) -> None:
        self.slow.pace(params, n)


class FirstStreamPacer:
    """Issue 531 (fault `slow_first_stream`): after boot/reset, TCP through this
    direction of the engine is paced to `mbit` for `seconds` from the first TCP packet
    (that covers the first stream; iperf3's control connection opens the window).
    Both loops have one, so the fault slows the stream whether the appliance sends or
    receives it (the 001 page's slow run was the first stream *into* the XGS 136)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.first: float | None = None
        self.tokens = 0.0
        self.last = 0.0

    def pace(self, params: dict, n: int) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = self.last = now
            self.tokens = 0.0
        if now - self.first > float(params.get("seconds", 15)):
            return
        rate = max(0.01, float(params.get("mbit", 20))) * 125000.0
        self.tokens += (now - self.last) * rate
        self.last = now
        if self.tokens > 16384:
            self.tokens = 16384.0
        self.tokens -= n
        if self.tokens < 0:
            time.sleep(-self.tokens / rate)


class RxLoop:
    """raw ESP -> SA by (SPI, dst) -> replay check -> ICV -> decrypt -> checks -> esp0."""

    def __init__(self, host_dir: Path, tun_fd: int, driver: str) -> None:
        self.dir = Path(host_dir)
        self.tun = tun_fd
        self.driver = driver
        self.c = CounterBlock(self.dir / "engine.counters")
        self.a = self.c.a
        self.s4 = netio.rx_socket(socket.AF_INET)
        self.s6 = netio.rx_socket(socket.AF_INET6)
        self.sas: dict[tuple[int, bytes], InSa] = {}
        self.gen = (-1, -1, -1)
        self.octep = driver == "octep"
        self.wall = int(time.time())
        self.faults = JsonWatch(self.dir / "faults.json")
        self.f_slow: dict | None = None
        self.slow = FirstStreamPacer()

    def reload(self) -> None:
        a = self.a
        gen = (a[IGEN_SA], a[IGEN_FAULTS], a[IGEN_RESET])
        if gen[2] != self.gen[2]:
            self.sas.clear()
            self.slow.reset()
        self.gen = gen
        self.faults.refresh(time.monotonic(), force=True)
        self.f_slow = fault_params(self.faults, "slow_first_stream")
        st = load_state(self.dir / "engine.state.json")
        new = {}
        for e in st.get("sas", []):
            if e["direction"] != "in":
                continue
            key = (e["spi"], ipaddress.ip_address(e["dst"]).packed)
            try:
                suite = make_suite(e["cipher"], e["spi"], bytes.fromhex(e["enc_key"]),
                                   bytes.fromhex(e["auth_key"]) if e.get("auth_key") else None)
            except (ValueError, KeyError) as exc:
                print(f"engine rx: SA spi={e.get('spi', 0):#x} not usable: {exc}", file=sys.stderr)
                continue
            old = self.sas.get(key)
            w = int(e.get("replay_window", 32))
            replay = old.replay if old is not None and old.replay is not None else (ReplayWindow(w) if w else None)
            new[key] = InSa(spi=e["spi"], dst=e["dst"], open_=suite.open_, replay=replay,
                            slot=e["slot"], offloaded=e["offloaded"],
                            alg_idx=INDEX["hist:" + ALG_OF_CIPHER[e["cipher"]]],
                            fixed=32 if e["cipher"] == "aes-gcm-16" else 40,
                            local=[parse_selector(t) for t in e.get("local_ts", [])],
                            remote=[parse_selector(t) for t in e.get("remote_ts", [])])
        self.sas = new

    def run(self) -> None:
        self.reload()
        ep = select.epoll()
        for s in (self.s4, self.s6):
            s.setblocking(False)
            ep.register(s.fileno(), select.EPOLLIN)
        buf = bytearray(65536)
        mv = memoryview(buf)
        anc = socket.CMSG_SPACE(20)
        s4, s6 = self.s4, self.s6
        f4, f6 = s4.fileno(), s6.fileno()
        while True:
            events = ep.poll()
            self.wall = int(time.time())
            a = self.a
            if a[IGEN_SA] != self.gen[0] or a[IGEN_FAULTS] != self.gen[1] or a[IGEN_RESET] != self.gen[2]:
                self.reload()
            if self.faults.refresh(time.monotonic()):
                self.f_slow = fault_params(self.faults, "slow_first_stream")
            for fd, _ in events:  # at most 64 frames per socket, then re-check generations
                if fd == f4:
                    for _i in range(64):
                        try:
                            n = s4.recv_into(buf)
                        except BlockingIOError:
                            break
                        ihl = (buf[0] & 15) * 4
                        self.frame(bytes(mv[ihl:n]), bytes(buf[16:20]))
                elif fd == f6:
                    for _i in range(64):
                        try:
                            n, ancdata, _fl, _addr = s6.recvmsg_into([buf], anc)
                        except BlockingIOError:
                            break
                        dst = b""
                        for lvl, typ, data in ancdata:
                            if lvl == socket.IPPROTO_IPV6 and typ == socket.IPV6_PKTINFO:
                                dst = bytes(data[:16])
                        self.frame(bytes(mv[:n]), dst)

    def frame(self, esp: bytes, dst: bytes) -> None:
        """One received ESP payload (generation checked per epoll batch by run())."""
        a = self.a
        if len(esp) < 8:
            a[X_NOT_ESP] += 1
            return
        a[X_FRAMES] += 1
        sa = self.sas.get((int.from_bytes(esp[:4], "big"), dst))
        octep = self.octep
        if sa is None:
            a[X_NO_TDB if octep else X_NOSA] += 1
            return
        off = sa.offloaded
        if off:
            if octep:
                a[X_FROM_WIRE] += 1
        else:
            a[X_RECEIVED] += 1
            a[sa.alg_idx] += 1
        seq = int.from_bytes(esp[4:8], "big")
        rp = sa.replay
        if rp is not None and not rp.check(seq):
            if off:
                a[X_REPLAY_OOW if octep else X_RX_BAD] += 1
            else:
                a[X_POSSIBLE_REPLAY] += 1
            return
        try:
            inner, nh = sa.open_(esp)
        except EspError as e:
            if off:
                a[X_RX_BAD] += 1
            else:
                a[X_BAD_AUTH if e.kind == "auth" else X_BAD_LENGTH] += 1
            return
        if rp is not None:
            rp.update(seq)
        if not sa.allowed(inner):
            if off:
                a[X_BLOCKED if octep else X_RX_BAD] += 1
            else:
                a[X_POLICY] += 1
            return
        b = _SA_BASE + SA_STRIDE * sa.slot
        a[b] += 1
        a[b + 1] += len(inner)
        a[b + 2] = self.wall
        if rp is not None:
            a[b + 3] = rp.top
        if not off:
            a[X_RECV_BYTES] += len(esp) - sa.fixed
        if self.f_slow is not None and inner[9 if nh == 4 else 6] == 6:
            self.slow.pace(self.f_slow, len(inner))
        if off and octep and nh == 41:
            a[X_RX_V6] += 1
        try:
            os.write(self.tun, inner)
        except OSError:
            a[X_QUEUEFAIL if off and octep else X_WRITE_FAIL] += 1
            return
        if off:
            if octep:
                a[X_RX_DONE] += 1
            else:
                a[X_RX_DONE if nh == 4 else X_RX_V6] += 1
