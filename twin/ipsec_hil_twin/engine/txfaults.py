"""Fault effects of the transmit loop that need more than a counter: kept out of TxLoop."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


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
