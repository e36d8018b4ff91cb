"""The engine's per-association state as the datapath loops hold it (built from the SA
table control.py publishes): what an outbound association seals with and counts into, what
an inbound one opens with and lets through. Apart from the loops so each stays one job."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Any

from .esp import ReplayWindow
from .selectors import Selector, addr_key, addresses_only, fast_key, flow, sel_match


@dataclass
class OutSa:
    spi: int
    dst: str
    src: str
    outer: str
    cipher: str
    local: list[Selector]
    remote: list[Selector]
    # what it seals with and sends through
    seal: Any
    sock: socket.socket
    # the counters a packet moves: its slot's, and the indexes bumped for a forwarded
    # packet, an own one, an own one via the output step, its bytes, a failed send
    slot: int
    base: int  # the slot's first counter in the block (CounterBlock.sa_slot)
    inc_fwd: tuple[int, ...]
    inc_own: tuple[int, ...]
    inc_own_step: tuple[int, ...]
    ibytes: int  # esp sent-bytes index or -1
    fail_idx: int
    # where it sends, and the sizes and rate it lets through
    addr: tuple
    path_mtu: int
    own_limit: int
    fwd_limit: int
    rate_Bps: float
    esn: bool = False
    offloaded: bool = False
    #: what the transmit loop paces to and charges a packet now (ipsec_hil_twin.engine.cost:
    #: rate_Bps times the noise's n_rate when offloaded; the CPU ns of a sealed packet),
    #: set by the loop at each reload and epoch
    pace: float = 0.0
    cpu_ns: int = 0
    seq: int = 0
    seq_mark: int = 0  # the set_seq request last applied (control.py op_set_seq)
    outer_hdr: int = 20
    fixed: int = 32  # SPI+seq+IV+ICV: 32 for GCM, 40 for CBC
    #: hard-expired (control.py op_expire_sa): the kernel freed the SA, its policy is still
    #: installed until charon's DELETE exchange ends; a packet it selects is counted
    #: ips_out_nosa + ips_out_inval (FreeBSD ipsec4/6_allocsa, perform_request) and freed
    dead: bool = False
    #: its port's output-drop slot (engine.counters.port_drop: the port its outer source
    #: address is on), -1 when no port of host.json has that address
    odrop_idx: int = -1

    def record_seq(self) -> int:
        """The sequence number its counter record shows: the last one sent."""
        return self.seq


@dataclass
class InSa:
    spi: int
    dst: str
    open_fitted: Any  # esp.Suite.open_fitted: the loop checks `fits` first itself
    fits: Any
    open_unverified: Any
    replay: ReplayWindow | None
    slot: int
    base: int  # the slot's first counter in the block (CounterBlock.sa_slot)
    offloaded: bool
    alg_idx: int
    fixed: int = 32
    local: list[Selector] = field(default_factory=list)
    remote: list[Selector] = field(default_factory=list)
    encap: bool = False  # NAT-T: takes ESP from UDP 4500 (RxLoop._udp_batch)
    policy_cache: dict = field(default_factory=dict)
    cpu_ns: int = 0  # what an opened packet costs now (ipsec_hil_twin.engine.cost), set by the loop

    def __post_init__(self) -> None:
        # subnet-to-subnet selectors (the usual child) need only the address pair as key
        self.addr_only = addresses_only(self.local + self.remote)
        self.key = addr_key if self.addr_only else fast_key

    def record_seq(self) -> int | None:
        """The sequence number its counter record shows: the highest accepted (none
        without a replay window)."""
        return self.replay.top if self.replay is not None else None

    def allowed(self, inner: bytes) -> bool:
        """Inbound policy: inner source inside remote_ts, destination inside local_ts."""
        key = self.key(inner) or flow(inner)
        ok = self.policy_cache.get(key)
        if ok is None:
            f = flow(inner)
            if f is None:
                return False
            _v, s, d, proto, sp, dp = f
            ok = (sel_match(self.remote, ipaddress.ip_address(s), proto, sp)
                  and sel_match(self.local, ipaddress.ip_address(d), proto, dp))
            if len(self.policy_cache) > 65536:
                self.policy_cache.clear()
            self.policy_cache[key] = ok
        return ok
