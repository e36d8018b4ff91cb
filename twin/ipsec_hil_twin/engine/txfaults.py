"""Fault effects of the transmit loop that need more than a counter: kept out of TxLoop."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from .counters import INDEX

FAULTED = INDEX["eng:tx_faulted"]  # the engine's own count of frames a fault acted on


class ClearLeak:
    """Fault cleartext_leak: the plain packet also leaves the outer port, to a MAC no one has
    (RFC 7042's documentation range): the peer ignores it, a capture on the wire sees it."""

    def __init__(self) -> None:
        self.ifaces: dict[str, tuple[str, bytes]] = {}  # outer source -> (ifname, Ethernet header)
        self.sock: socket.socket | None = None

    def send(self, src: str, inner: bytes) -> None:
        if src not in self.ifaces:
            out = subprocess.run(["ip", "-o", "addr", "show", "to", src], capture_output=True, text=True).stdout
            name = out.split()[1].split("@")[0] if out.split() else ""
            mac = Path(f"/sys/class/net/{name}/address").read_text().strip().replace(":", "") if name else ""
            self.ifaces[src] = (name, bytes.fromhex("00005e005301" + mac))
        name, head = self.ifaces[src]
        try:
            self.sock = self.sock or socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            self.sock.sendto(head + (b"\x08\x00" if inner[0] >> 4 == 4 else b"\x86\xdd") + inner, (name, 0))
        except OSError as exc:
            print(f"engine tx: cleartext_leak not sent from {src} ({name or 'no interface'}): {exc}", file=sys.stderr)


class OutputQueueFull:
    """Fault oq_drop_counted: every n-th frame, counted as encrypted, finds the port's
    output queue full -- the driver's transmit drop (the SA's ``fail_idx``) and the port's
    output drops (its ``odrop_idx``) count it, as they count the shaped link's drop of a
    frame (engine.netio.tx_socket): a counted loss, which a ledger must close on."""

    def __init__(self) -> None:
        self.n = 0  # frames seen while the fault is on

    def full(self, a, osa, params: dict) -> bool:
        """Count this frame's drop and say so (True: not sent), or False."""
        self.n += 1
        if self.n % max(1, int(params.get("n", 2000))):
            return False
        a[osa.fail_idx] += 1
        if osa.odrop_idx >= 0:
            a[osa.odrop_idx] += 1
        a[FAULTED] += 1
        return True
