"""Fixtures for the engine's namespace tests: one MiniLab (hostA|gwA|gwB|hostB, two
engines) per module (tests/lab_factory.py), skipped with a reason when not root or tools
are missing."""
from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.lab_factory import minilab_fixture
from ipsec_hil_twin.engine.minilab import MiniLab

#: what the engine tests drive inside the namespaces
TOOLS = ("ip", "tcpdump", "ping", "iperf3")


needs_root = pytest.mark.skipif(MiniLab.unavailable(TOOLS) is not None, reason=MiniLab.unavailable(TOOLS) or "")


# paced below what two Python engines on 2 cores carry, so nothing is lost on the path
lab = minilab_fixture(wan_rate_mbit=250)


class Capture:
    """tcpdump in a namespace into a pcap; `.packets()` -> list of raw frames (bytes)."""

    def __init__(self, lab: MiniLab, role: str, ifname: str, bpf: str) -> None:
        self.path = lab.run_dir / f"cap-{role}-{ifname}-{time.monotonic_ns()}.pcap"
        self.p = lab.popen(role, ["tcpdump", "-i", ifname, "-n", "-U", "--immediate-mode", "-s", "0", "-w", str(self.path), bpf],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        line = self.p.stderr.readline()  # "listening on ..." once the socket is open
        if b"listening" not in line:
            raise RuntimeError(f"tcpdump in {role}/{ifname}: {line!r}")

    def stop(self) -> list[bytes]:
        time.sleep(0.2)
        self.p.send_signal(signal.SIGINT)
        self.p.wait(5)
        from scapy.utils import RawPcapReader
        return [bytes(pkt) for pkt, _meta in RawPcapReader(str(self.path))]


def settle(lab: MiniLab, gw: str, timeout: float = 5.0) -> dict:
    """Counters after two equal reads 100 ms apart (the suite's settle rule): MiniLab's own."""
    return lab.settled_counters(gw, timeout)
