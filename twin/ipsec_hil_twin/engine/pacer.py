"""The datapath's pacers: an SA's port with its stated queue (the transmit loop) and issue
531's slow first stream (fault `slow_first_stream`, both loops)."""
from __future__ import annotations

import os
import select
import time
from collections import deque

from ipsec_hil_twin.machinery.netns import DEFAULT_QUEUE_BYTES, ETHERNET_WIRE_OVERHEAD, tbf_sizes

from .netio import RING_PACKETS

#: What an Ethernet frame adds on the wire to its IP packet: its 14-byte header and the
#: preamble, FCS and gap the shaped links' tbf counts too
WIRE_EXTRA = 14 + ETHERNET_WIRE_OVERHEAD


class PortQueue:
    """The port an SA is paced to, with the egress queue the topology states (`queue_kib`),
    held HERE: the engine reads esp0 ahead of its pacing into a queue of its own, admits
    each packet against a model of that queue, and sends it at the time the model's port
    would.

    Why (issue 41): the engine paces offloaded SAs to their port's rate, so an overload
    queues in front of it. While it slept to pace, the overload queued in esp0's ring:
    Linux's 1,000 packets hid ~1.2 MB (100 ms at 100 Mbit/s), so a 1 s trial 9 % over the
    rate lost nothing and the NDR search read 110 on a 100 Mbit/s path. A ring cut to the
    stated queue (87 frames for 128 KiB) dropped paced sweeps whenever the engine waited
    ~11 ms for a busy CPU: packets that arrived at a trickle during the stall were read as
    one burst. Here the ring holds RING (a stall never drops) and the queue is a model
    the stall cannot fool:

    - esp0 is drained in batches (:meth:`fill`); the packets of a batch arrived at unknown
      times since the last look, and are taken to have arrived evenly over that gap (the
      assumption most favourable to the sender: a stall of the engine never turns a load
      at or under the rate into a burst);
    - the model's backlog drains at the rate; a packet that finds backlog + itself above
      the stated queue is dropped (a full port queue's tail drop), others leave at
      arrival + backlog / rate (:meth:`wait` holds the loop until then, still draining
      esp0 into the queue meanwhile).

    A load at the rate loses nothing; a 1 s trial 10 % over it loses all but the stated
    queue's worth of its excess. ``queue_bytes`` None: no model, the queue holds RING
    packets as esp0's ring did (the state before issue 41; ``TWIN_ENGINE_QUEUE=off``). A
    frame costs what the wire carries:
    its ESP packet, outer header and Ethernet's 38 bytes (the tbf of the twin's shaped
    links counts the same); before issue 41 the pacer counted 80 a packet, less than
    the wire, so a shaped link's queue filled behind a line-rate stream."""

    OVERHEAD = 96  # ESP in IPv4 (~58 with GCM) and Ethernet's 38, until a frame is paced
    BATCH = 4096  # packets read in one look at esp0: all the ring holds (RING), so a stall's whole
    # backlog is spread over the stall, never a later look's few milliseconds (a burst)
    RING = RING_PACKETS  # packets the queue holds at most, model or not: esp0's ring
    BURST = 65536  # bytes the port may send at once after a stall at most (the token bucket's depth)

    def __init__(self, tun: int, queue_bytes: int | None, clock=time.monotonic, counts=None) -> None:
        self.tun, self.q, self.clock = tun, queue_bytes, clock
        self.ahead: deque = deque()  # (packet, departure time)
        self.rate = 0.0  # bytes a second the port drains at: the last paced SA's
        self.backlog = 0.0  # the model's queue in bytes at time self.t
        self.t = self.seen = clock()
        self.dropped = 0
        #: where a drop is counted for FreeBSD to show (issue 52): ``counts[drop_slot]``, the
        #: paced port's IFCOUNTER_OQDROPS slot (engine.counters.port_drop), set with the rate
        #: by :meth:`leave_at`; None (unit tests): ``dropped`` only
        self.counts = counts
        self.drop_slot = -1
        self.overhead = self.OVERHEAD  # bytes a packet adds on the wire (the last paced frame's)
        self.tokens, self.last = 0.0, self.t  # the actual output's token bucket (:meth:`wait`)
        self.depth = float(self.BURST)  # its depth at the current rate (:meth:`bucket`)
        self._poll = None

    def admit(self, n: int, arrival: float) -> float | None:
        """The departure time of a packet of ``n`` bytes arriving at ``arrival`` (not before
        the last one's), or None when the stated queue is full (dropped). It costs its bytes
        plus the last paced frame's overhead on the wire (ESP, outer header, Ethernet)."""
        rate = self.rate
        if not rate:
            return arrival
        b = self.backlog - (arrival - self.t) * rate
        if b < 0.0:
            b = 0.0
        self.t = arrival
        if self.q is not None and b > 0.0 and b + n > self.q:
            self.backlog = b
            self.dropped += 1  # the transmit loop counts it where FreeBSD does (datapath: dep None)
            return None
        b += n + self.overhead
        self.backlog = b
        return arrival + b / rate

    def fill(self) -> int:
        """Read what esp0 holds now (at most BATCH packets) into the queue; how many were read."""
        read, tun, got = os.read, self.tun, []
        try:
            while len(got) < self.BATCH:
                got.append(read(tun, 65536))
        except BlockingIOError:
            pass
        now = self.clock()
        k = len(got)
        if k:
            start, span = self.seen, now - self.seen
            admit, put, ahead, ring = self.admit, self.ahead.append, self.ahead, self.RING
            for i, pkt in enumerate(got, 1):
                if len(ahead) >= ring:  # the ring's limit, what esp0 itself would drop: not queued, not modelled
                    self._drop()
                    continue
                # refused (None): still queued, for the loop to count where FreeBSD would --
                # before the driver for an offloaded SA, after esp_output for the kernel's cipher
                put((pkt, admit(len(pkt), start + span * i / k)))
        self.seen = now
        return k

    def count_drops(self, k: int) -> None:
        """``k`` packets lost on the way into this queue (esp0's ring: datapath.EspRingDrops)."""
        self._drop(k)

    def _drop(self, k: int = 1) -> None:
        """``k`` packets the port's queue refused: counted, and shown as the paced port's
        output drops when a slot is set (the packets never reached the driver's counters)."""
        self.dropped += k
        if self.counts is not None and self.drop_slot >= 0:
            self.counts[self.drop_slot] += k

    @classmethod
    def bucket(cls, rate_Bps: float, queue_bytes: int | None) -> float:
        """The catch-up bucket's depth for a port of ``rate_Bps``: half the bucket of the
        tbf that shapes the port's link (machinery.netns.tbf_sizes), at most BURST.

        Why (issue 52): the engine's frames pass that tbf after this model, two queues in a
        row. With a deeper bucket than the tbf's (65,536 against 50,000 bytes at 100
        Mbit/s) every catch-up left the difference queued in the tbf, and the tbf's own
        dequeue runs late on a busy kernel (its watchdog timer): sampled every 10 ms through
        six streams on an idle machine its queue held 54 KB at the 90th percentile and 63 KB
        at the 99th, of the 81 KB it holds -- two jumbo frames from a drop, and a drop
        there came after the driver counted the frame: it vanished from the ledger. A
        bucket no deeper than the tbf's leaves the tbf's queue empty after a catch-up, so the
        tbf may run late by its whole queue (6.5 ms at 100 Mbit/s) before it drops a frame,
        and one it drops is counted all the same (netio.tx_socket). Not smaller: the bucket
        is what a stalled engine catches up with, and a busy CPU stalls it (a bucket of
        41 KB failed the noise test's paced stream in 2 of 3 runs beside two busy loops,
        65 KB in none of 2)."""
        if not rate_Bps:
            return float(cls.BURST)
        burst, _limit = tbf_sizes(rate_Bps * 8 / 1e6, queue_bytes or DEFAULT_QUEUE_BYTES)
        return float(min(cls.BURST, burst))

    def leave_at(self, departure: float, rate_Bps: float, wire: int, n: int) -> float:
        """When the frame of ``wire`` bytes (its packet's ``n`` before ESP) may leave: at
        ``departure`` (the model's port sends it then) and, after a stall, no faster than the port's rate with a bucket of :meth:`bucket` (a
        stalled engine catches up at the rate, as the token bucket before it did: a catch-up
        at once overflowed the next link's queue). ``rate_Bps`` is the port's rate from now on."""
        if rate_Bps != self.rate:
            self.depth = self.bucket(rate_Bps, self.q)
        self.rate = rate_Bps
        now = self.clock()
        tokens = self.tokens + (now - self.last) * rate_Bps
        if tokens > self.depth:
            tokens = float(self.depth)
        tokens -= wire
        self.tokens, self.last = tokens, now
        self.overhead = wire - n  # what admission adds to the packets it queues next
        if tokens < 0 and now - tokens / rate_Bps > departure:
            return now - tokens / rate_Bps
        return departure

    def wait(self, departure: float, rate_Bps: float, wire: int, n: int, drop_slot: int = -1) -> None:
        """Hold the caller until :meth:`leave_at`, draining esp0 into the queue meanwhile;
        ``drop_slot``: the paced port's output-drop slot from now on."""
        self.drop_slot = drop_slot
        departure = self.leave_at(departure, rate_Bps, wire, n)
        while True:
            left = departure - self.clock()
            if left <= 0:
                return
            if self._poll is None:
                self._poll = select.poll()
                self._poll.register(self.tun, select.POLLIN)
            if self._poll.poll(left * 1000.0):
                self.fill()


class CatchUp:
    """The receive loop's output to esp0, no faster than the host's slowest rated port
    after a stall (a token bucket of BURST bytes at that rate).

    Why (issue 41): the receive loop decrypts what its sockets hold and writes each inner
    packet to esp0 at once; the kernel forwards it onto the LAN's shaped link. When a busy
    CPU held the loop for tens of milliseconds, the frames that trickled in meanwhile came
    out as one burst and overflowed that link's stated queue: a loaded run of the inbound
    every-size sweep lost 5-40 sizes at a time, tbf on the XGS 136's f1 counting the drops
    (44 in one run), though the sweep offered half the link's rate. An appliance's NIC does
    not stall so; the loop catches up at the port's rate as the transmit side does
    (PortQueue.leave_at). A load at or under the rate never waits here: the bucket stays
    full. Wire bytes are the LAN's: the inner packet in Ethernet (WIRE_EXTRA) and, above
    1,500 bytes, the IPv4 fragments the kernel cuts it into (a 1,500-byte LAN assumed: the
    smallest the twin's LANs have, so the pace is never faster than a fragmenting LAN). Only
    forwarded packets are paced (the receive loop's choice): one for the appliance's own
    address leaves by no port, and its stream may run at the faster inbound link's rate."""

    BURST = 32768  # bytes: less than any stated queue the twin builds, so a catch-up's first burst fits
    LAN_MTU = 1500

    def __init__(self, rate_Bps: float | None, wire_extra: int = WIRE_EXTRA, clock=time.monotonic) -> None:
        self.rate, self.extra, self.clock = rate_Bps or 0.0, wire_extra, clock
        self.tokens, self.last = float(self.BURST), clock()
        self.waited = 0.0  # seconds held, for the engine's status

    def wire(self, n: int, v4: bool) -> int:
        """Bytes an inner packet of ``n`` bytes takes on the LAN: one frame, or its IPv4 fragments."""
        if n <= self.LAN_MTU or not v4:
            return n + self.extra
        per = (self.LAN_MTU - 20) & ~7  # payload per fragment, a multiple of 8 (RFC 791)
        frags = -(-(n - 20) // per)
        return n + (frags - 1) * 20 + frags * self.extra

    def pace(self, n: int, v4: bool) -> None:
        """Hold the caller until an inner packet of ``n`` bytes may go to esp0."""
        rate = self.rate
        if not rate:
            return
        now = self.clock()
        tokens = self.tokens + (now - self.last) * rate
        if tokens > self.BURST:
            tokens = float(self.BURST)
        tokens -= self.wire(n, v4)
        self.tokens, self.last = tokens, now
        if tokens < 0:
            hold = -tokens / rate
            self.waited += hold
            time.sleep(hold)


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
