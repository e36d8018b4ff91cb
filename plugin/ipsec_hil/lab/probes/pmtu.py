"""PMTU probe: one ICMPv6 echo of a given size towards a destination through the appliance.

Reports whether the echo reply came back and the MTU carried by any ICMPv6 Packet Too Big
that names our echo (the 000 page's forwarded-IPv6 gate: PTB at path MTU - 117/137).

    python -m ipsec_hil.lab.probes.pmtu --dst fd00:b::10 --size 1336 [--src ADDR] [--iface IF]
        [--via NEXTHOP] [--timeout 2] [--count 1]

``--via`` sends the echo at layer 2 to that next hop's MAC (neighbour discovery), whatever
the bench's own routing says -- the virtual lab's bench holds both LANs, so its kernel
would deliver to the far LAN directly instead of through the appliance.

The probe waits until every echo has its answer (a reply or a PTB naming it) or
``--timeout`` has passed, whichever is first: a lost echo still waits the timeout out.

``--size`` is ping's data size (inner packet = 40 + 8 + size), so results compare with
``ping -s``. Output: {"dst", "size", "inner_len", "sent", "replies", "reply", "ptb_mtu",
"ptb_count", "ptb_from", "iface"}.
"""

from __future__ import annotations

import ipaddress
import os
import threading
import time
from typing import Sequence

from ipsec_hil.lab.probes import ProbeUsage, parser, positive_float, positive_int, run


def parse_args(argv: Sequence[str]):
    p = parser("pmtu", "ICMPv6 echo of a given size; report echo reply and Packet Too Big")
    p.add_argument("--dst", required=True)
    p.add_argument("--size", required=True, type=int, help="ICMPv6 echo data bytes (as ping -s)")
    p.add_argument("--src")
    p.add_argument("--iface")
    p.add_argument("--via", help="next hop (IPv6) to send to at layer 2, e.g. the appliance's LAN address")
    p.add_argument("--timeout", type=positive_float, default=2.0)
    p.add_argument("--count", type=positive_int, default=1)
    a = p.parse_args(list(argv))
    try:
        if ipaddress.ip_address(a.dst).version != 6:
            raise ValueError
    except ValueError:
        raise ProbeUsage(f"--dst must be an IPv6 address, got {a.dst!r}") from None
    for opt in ("src", "via"):
        v = getattr(a, opt)
        if v is not None:
            try:
                ipaddress.IPv6Address(v)
            except ValueError:
                raise ProbeUsage(f"--{opt} must be an IPv6 address, got {v!r}") from None
    if not 0 <= a.size <= 65535 - 48:
        raise ProbeUsage(f"--size must be 0..65487, got {a.size}")
    return a


def main(argv: Sequence[str]) -> dict:
    a = parse_args(argv)
    # only the layers it uses: scapy.all costs ~1.2 s of CPU per probe process, these ~0.35 s
    # (issue 15: a probe's import was most of its time)
    from scapy.config import conf
    from scapy.sendrecv import AsyncSniffer, send, sendp
    from scapy.layers.l2 import Ether
    from scapy.layers.inet6 import getmacbyip6
    from scapy.layers.inet6 import (
        ICMPv6EchoReply,
        ICMPv6EchoRequest,
        ICMPv6PacketTooBig,
        IPv6,
    )

    iface = a.iface or conf.route6.route(a.via or a.dst)[0]
    mac = None
    if a.via:
        mac = getmacbyip6(a.via)
        if not mac:
            raise RuntimeError(f"no neighbour answer from --via {a.via} on {iface}")
    ident = os.getpid() & 0xFFFF
    answered: set[int] = set()  # echo sequence numbers answered by a reply or a PTB
    all_answered = threading.Event()

    def note(c) -> None:
        """Mark the echo a reply or a PTB answers, so the wait ends when every echo has
        its answer instead of after the whole timeout (issue 15: the refused probe of
        every forwarded-IPv6 test waited its 2 s out)."""
        if ICMPv6EchoReply in c and c[ICMPv6EchoReply].id == ident:
            answered.add(int(c[ICMPv6EchoReply].seq))
        elif ICMPv6PacketTooBig in c:
            seq = _echo_seq_in(bytes(c[ICMPv6PacketTooBig].payload), ident)
            if seq is not None:
                answered.add(seq)
        if len(answered) >= a.count:
            all_answered.set()

    # scapy calls started_callback once its socket and filter are open: waited for, not a
    # fixed 0.2 s (issue 15: two probes in each forwarded-IPv6 test)
    listening = threading.Event()
    sniffer = AsyncSniffer(iface=iface, filter="icmp6", store=True, prn=note, started_callback=listening.set)
    sniffer.start()
    if not listening.wait(10.0):
        raise RuntimeError(f"the sniffer on {iface} did not start within 10 s")
    pkt = IPv6(dst=a.dst, **({"src": a.src} if a.src else {})) / ICMPv6EchoRequest(
        id=ident, data=bytes(i & 0xFF for i in range(a.size))
    )
    for seq in range(a.count):
        pkt[ICMPv6EchoRequest].seq = seq
        if mac:
            sendp(Ether(dst=mac) / pkt, iface=iface, verbose=False)
        else:
            send(pkt, iface=iface, verbose=False)
        time.sleep(0.05)
    all_answered.wait(a.timeout)
    time.sleep(0.05)  # a second PTB or reply for the same echo still counts
    captured = sniffer.stop() or []
    replies = 0
    ptbs: list[tuple[int, str]] = []
    for c in captured:
        if ICMPv6EchoReply in c and c[ICMPv6EchoReply].id == ident and c[IPv6].src == a.dst:
            replies += 1
        elif ICMPv6PacketTooBig in c:
            if _echo_id_in(bytes(c[ICMPv6PacketTooBig].payload)) == ident:
                ptbs.append((int(c[ICMPv6PacketTooBig].mtu), c[IPv6].src))
    return {
        "dst": a.dst,
        "size": a.size,
        "inner_len": 40 + 8 + a.size,
        "iface": iface,
        "via": a.via,
        "sent": a.count,
        "replies": replies,
        "reply": replies > 0,
        "ptb_count": len(ptbs),
        "ptb_mtu": ptbs[0][0] if ptbs else None,
        "ptb_mtus": sorted({m for m, _ in ptbs}),
        "ptb_from": ptbs[0][1] if ptbs else None,
    }


def _echo_seq_in(invoking: bytes, ident: int) -> int | None:
    """The sequence number of our echo (identifier ``ident``) a PTB carries, else None."""
    if _echo_id_in(invoking) == ident and len(invoking) >= 48:
        return int.from_bytes(invoking[46:48], "big")
    return None


def _echo_id_in(invoking: bytes) -> int | None:
    """The echo identifier inside a PTB's copy of the invoking packet (IPv6 40 + ICMPv6 hdr)."""
    if len(invoking) >= 48 and invoking[6] == 58 and invoking[40] == 128:
        return int.from_bytes(invoking[44:46], "big")
    return None


if __name__ == "__main__":
    raise SystemExit(run(main))
