"""`python -m ipsec_hil_twin.engine.floor`: the floor of the engine's design -- ESP between a TUN
device and raw sockets, one process per direction, and nothing else.

Why (issue 15: "if Python's per-packet cost cannot get there on two cores, show the
profile that proves it"): the twin's engine (ipsec_hil_twin.engine.datapath) reads a packet from
its TUN, models FreeBSD around it (selector lookup, the PMTU gate, pacing, faults,
counters), seals it and sends it on a raw socket; the peer receives, checks replay,
opens, counts and writes to its TUN. This forwarder keeps only what any user-space ESP
engine of that design must do per packet -- ``read``, ``seal`` (the engine's own
ipsec_hil_twin.engine.esp suite), ``sendto``; ``recv_into``, ``open_``, ``write`` -- so the rate
``python -m ipsec_hil_twin.bench`` measures through it is the most that design carries on the
machine, whatever is cut from the engine's own Python. Below 14x strongSwan, no tuning of
the engine can reach issue 15's target there; above it, the gap is the engine's to close.

The route into the TUN carries the exact ESP limit (ipsec_hil_twin.engine.sizes.max_inner), so TCP
learns the path MTU from the kernel's own ICMP instead of the outer being fragmented.
Keys and SPIs come as JSON on stdin (never in argv, where ``ps`` would show them):
``{"out": {"spi": N, "enc_key": HEX}, "in": {...}}`` (AES-GCM-16, 36-byte keys). IPv4
outer only: the bench's layout. Ready when ``--ready FILE`` exists; SIGTERM stops it.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import sys
import threading

from pyroute2 import IPRoute

from ipsec_hil_twin.machinery.labprocs import fork_worker, stop_workers

from . import netio
from .esp import EspError, make_suite
from .sizes import GCM, max_inner


def tx_loop(tun: int, sock: socket.socket, seal, peer: str) -> None:
    """TUN -> seal -> raw socket, one packet at a time (the engine's TxLoop, bare)."""
    read, send, dst = os.read, sock.sendto, (peer, 0)
    seq = 0
    while True:
        pkt = read(tun, 65536)
        seq += 1
        send(seal(pkt, 4 if pkt[0] >> 4 == 4 else 41, seq), dst)


def rx_loop(tun: int, sock: socket.socket, fits, open_fitted) -> None:
    """Raw socket -> shape check -> open -> TUN, up to 64 frames per wake-up (the engine's
    RxLoop, bare; `fits` and `open_fitted` of one ipsec_hil_twin.engine.esp suite, as the engine calls them)."""
    sock.setblocking(False)
    ep = select.epoll()
    ep.register(sock.fileno(), select.EPOLLIN)
    buf = bytearray(65536)
    mv = memoryview(buf)
    recv, write = sock.recv_into, os.write
    while True:
        ep.poll()
        for _i in range(64):
            try:
                n = recv(buf)
            except BlockingIOError:
                break
            esp = bytes(mv[(buf[0] & 15) * 4:n])
            if not fits(len(esp)):
                continue
            try:
                inner, _nh = open_fitted(esp)
            except EspError:
                continue
            write(tun, inner)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ipsec_hil_twin.engine.floor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="this gateway's outer IPv4 address")
    ap.add_argument("--peer", required=True, help="the other gateway's outer IPv4 address")
    ap.add_argument("--lan", required=True, help="the peer's inner IPv4 prefix, routed into the TUN")
    ap.add_argument("--path-mtu", type=int, default=1500)
    ap.add_argument("--tun", default="floor0")
    ap.add_argument("--ready", required=True, help="file created once packets flow")
    args = ap.parse_args(argv)
    try:
        keys = json.loads(sys.stdin.read())
        out_sa, in_sa = keys["out"], keys["in"]
        seal = make_suite(GCM, int(out_sa["spi"]), bytes.fromhex(out_sa["enc_key"]), None).seal
        opener = make_suite(GCM, int(in_sa["spi"]), bytes.fromhex(in_sa["enc_key"]), None)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"ipsec_hil_twin.engine.floor: stdin: expected {{'out': {{'spi', 'enc_key'}}, 'in': {{...}}}} "
              f"(AES-GCM-16 keys in hex): {exc}", file=sys.stderr)
        return 2
    tun = netio.open_tun_up(args.tun)
    tx, rx = netio.tx_socket(args.src), netio.rx_socket(socket.AF_INET)
    dst, plen = args.lan.split("/")
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=args.tun)[0]
        ipr.route("add", dst=dst, dst_len=int(plen), oif=idx, metrics={"mtu": max_inner(GCM, "ipv4", args.path_mtu)})
    pids = [fork_worker(lambda: tx_loop(tun, tx, seal, args.peer)),
            fork_worker(lambda: rx_loop(tun, rx, opener.fits, opener.open_fitted))]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with open(args.ready, "w"):
        pass
    rc = 0
    try:
        while not stop.wait(0.1):
            if any(os.waitpid(pid, os.WNOHANG)[0] for pid in pids):
                print("ipsec_hil_twin.engine.floor: a worker exited; stopping", file=sys.stderr)
                rc = 1
                break
    finally:
        stop_workers(pids)
        os.close(tun)  # the TUN, and its route, vanish with the fd
    return rc


if __name__ == "__main__":
    sys.exit(main())
