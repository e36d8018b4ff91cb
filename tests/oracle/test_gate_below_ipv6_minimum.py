"""The real engine on a 1,400-byte path: FreeBSD's forwarded-IPv6 gate in both outer
families, including the IPv6-outer gate of 1,263 that lies below the IPv6 minimum MTU.

What FreeBSD does there (ipsec_hil_twin.engine.sizes.forwarded_gate): ipsec6_check_pmtu refuses
a forwarded packet longer than 1,400 - 137 and icmp6_error sends a Packet Too Big whose
MTU is 1,263 as computed (no clamp to 1,280).  A sender that will not go below 1,280
keeps getting PTBs: nothing of 1,264 bytes or more is carried.
"""
from __future__ import annotations

import pytest

from ipsec_hil_twin.engine import sizes
from ipsec_hil_twin.engine.minilab import ADDR, MiniLab

pytestmark = pytest.mark.needs_root

HB6 = ADDR["hB"]["lan"][1].split("/")[0]


@pytest.fixture(scope="module")
def lab():
    with MiniLab(mtu=1400) as lab:
        yield lab


def ping6(lab, size: int):
    return lab.run("hA", ["ping", "-6", "-c", "2", "-i", "0.2", "-W", "1", "-M", "do", "-s", str(size), HB6],
                   timeout=30)


@pytest.mark.parametrize("outer,limit", [("ipv4", 1283), ("ipv6", 1263)])
def test_forwarded_ipv6_gate_on_a_1400_path(lab, outer, limit):
    assert sizes.forwarded_limit(1400, outer) == limit  # the twin's own model, from FreeBSD
    lab.call("gA", "reset")
    lab.call("gB", "reset")
    lab.tunnel("aes-gcm-16", outer)
    ok = ping6(lab, limit - 48)  # 40 IPv6 + 8 ICMPv6: an inner packet of exactly the gate
    assert ok.returncode == 0, ok.stdout + ok.stderr
    before = lab.call("gA", "status")["engine"]["tx_ptb"]
    over = ping6(lab, limit - 48 + 1)
    assert over.returncode != 0, "a packet one byte above the gate was carried"
    assert lab.call("gA", "status")["engine"]["tx_ptb"] > before, "the gate sent no Packet Too Big"
    assert f"mtu={limit}" in over.stdout.replace(": ", "="), over.stdout
