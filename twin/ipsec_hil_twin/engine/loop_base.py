"""What the engine's transmit and receive loops share (ipsec_hil_twin.engine.datapath says why
they are two processes): the host's counter block, its faults, the SA journal, the
first-stream pacer, what a packet costs (ipsec_hil_twin.engine.cost), and the generations
they last loaded."""
from __future__ import annotations

import ipaddress
import time
from pathlib import Path

from ipsec_hil_twin.faults import JsonWatch
from ipsec_hil_twin.personality import for_driver

from .cost import Cost, Noise

from .counters import INDEX, CounterBlock, PendingCounts
from .pacer import FirstStreamPacer
from .satable import SaJournalReader

IGEN_RESET = INDEX["gen:gen_reset"]
IGEN_ANY = INDEX["gen:gen_any"]  # moves on every change, after gen_reset (CounterBlock.bump)


class Loop:
    """What the two loops share: the host's counter block, its faults, the SA journal, the
    first-stream pacer, the packet's cost, and the generations they last loaded (see the
    module docstring)."""

    sas: dict  # this direction's SAs, by the key its packets are looked up with
    pend: PendingCounts  # the per-packet counts not yet stored (set by each loop)

    def __init__(self, host_dir: Path, tun_fd: int, driver: str, cpu_ns: float | None = None) -> None:
        self.dir = Path(host_dir)
        self.tun = tun_fd
        self.driver = driver
        self.c = CounterBlock(self.dir / "engine.counters")
        self.a = self.c.a
        self.faults = JsonWatch(self.dir / "faults.json")
        self.slow = FirstStreamPacer()
        self.table = SaJournalReader(self.dir)
        self.cost = Cost(for_driver(driver).cpu_ns if cpu_ns is None else cpu_ns)  # cost.scaled_ns
        self.own: set[bytes] = set()  # the appliance's addresses, packed (the control's own_addrs)
        self.gen_reset = -1
        self.gen_any = -1

    def _take_generations(self) -> dict:
        """Note the control process's current generations and return its state (the SA
        journal applied).  After a reset (gen_reset moved: the control process dropped
        every SA and zeroed the counters) the loop forgets its SAs and the first stream's
        pace too, so none of them outlives the reset. The build's CPU factor, the noise and
        the appliance's own addresses are taken from the state here (the caller applies the
        first two to its SAs)."""
        a = self.a
        self.gen_any = a[IGEN_ANY]  # read first: a bump after this read is seen next time
        gen_reset = a[IGEN_RESET]
        if gen_reset != self.gen_reset:
            self.pend.discard()  # counts of before the reset
            self.slow.reset()
            self.sas.clear()
        else:
            self.pend.flush(int(time.time()))  # stored before the SAs they count are replaced
        self.gen_reset = gen_reset
        st = self.table.load()
        self.cost.configure(float(st.get("cpu_factor") or 1.0), Noise.of(st.get("noise"), str(st.get("host", ""))))
        self.own = {ipaddress.ip_address(x).packed for x in st.get("own_addrs", [])}
        return st
