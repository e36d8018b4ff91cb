"""Fixtures for the engine's namespace tests: one MiniLab (hostA|gwA|gwB|hostB, two
engines) per module, skipped with a reason when not root or tools are missing."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from twin.engine.minilab import MiniLab


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, TUN, raw sockets)"
    for tool in ("ip", "tcpdump", "ping", "iperf3"):
        if not shutil.which(tool):
            return f"needs {tool}"
    if not Path("/dev/net/tun").exists():
        return "needs /dev/net/tun"
    return None


needs_root = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


@pytest.fixture(scope="module")
def lab():
    if _why_not():
        pytest.skip(_why_not())
    # paced below what two Python engines on 2 cores carry, so nothing is lost on the path
    lab = MiniLab(wan_rate_mbit=250)
    lab.build()
    try:
        yield lab
    finally:
        lab.close()


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
    """Counters after two equal reads 100 ms apart (the suite's settle rule)."""
    prev = lab.call(gw, "counters")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        cur = lab.call(gw, "counters")
        if cur == prev:
            return cur
        prev = cur
    raise AssertionError(f"{gw} counters did not settle in {timeout}s")
