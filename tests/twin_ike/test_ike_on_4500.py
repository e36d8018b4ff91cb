"""IKE moves to UDP 4500 on the wire once the IKE_SA floats (issue 55), read by tcpdump.

strongSwan 5.9.8 (ike_natd.c process_i, ike_sa.c float_ports): with MOBIKE (the default) or
a NAT, the initiator sends IKE_AUTH and every later request from port 4500 to port 4500,
each datagram behind the non-ESP marker (four zero bytes, RFC 3948 2.2); the responder
answers there. IKE_SA_INIT stays on 500. With ``mobike = no`` and no NAT nothing floats.
The twin used to show [4500] in ``--list-sas`` while its datagrams stayed on 500.
"""
from __future__ import annotations

import signal
import subprocess
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import RawPcapReader

from ipsec_hil.lab.parsers import swanctl_initiate, swanctl_list_sas
from ipsec_hil_twin.ike.pairlab import A4, A6, B4, B6, IkePair, conf
from tests.twin_ike.test_negotiation import module_pair, pair  # noqa: F401 (fixtures: daemons reset per test)

pytestmark = pytest.mark.needs_root

LANS = {"ipv4": ("198.51.100.0/26", "203.0.113.0/26"), "ipv6": ("fd00:a::/64", "fd00:b::/64")}
ADDRS = {"ipv4": (A4, B4), "ipv6": (A6, B6)}


class Wire:
    """tcpdump on b's end of the veth: every UDP datagram between the two daemons."""

    def __init__(self, pair: IkePair) -> None:
        self.path = pair.base / f"ike-{time.monotonic_ns()}.pcap"
        self.p = subprocess.Popen(["ip", "netns", "exec", pair.ns["b"], "tcpdump", "-i", f"{pair.prefix}0b", "-n",
                                   "-U", "--immediate-mode", "-s", "0", "-w", str(self.path), "udp"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        line = self.p.stderr.readline()
        assert b"listening" in line, line

    def datagrams(self) -> list[tuple[int, int, bytes]]:
        """(source port, destination port, payload) of each captured UDP datagram."""
        time.sleep(0.2)
        self.p.send_signal(signal.SIGINT)
        self.p.wait(5)
        out = []
        for frame, _meta in RawPcapReader(str(self.path)):
            ip = Ether(frame).payload
            if isinstance(ip, (IP, IPv6)) and isinstance(ip.payload, UDP):
                out.append((ip.payload.sport, ip.payload.dport, bytes(ip.payload.payload)))
        return out


def _up(pair: IkePair, family: str, mobike: str | None) -> tuple[list[tuple[int, int, bytes]], str]:
    (a, b), (lan_a, lan_b) = ADDRS[family], LANS[family]
    opts = {"mobike": mobike} if mobike else None
    pair.write_conf("a", conf("net", a, b, {"c1": (lan_a, lan_b)}, conn_options=opts))
    pair.write_conf("b", conf("net", b, a, {"c1": (lan_b, lan_a)}, conn_options=opts))
    for h in "ab":
        r = pair.swanctl(h, "--load-all", "--noprompt")
        assert r.returncode == 0, r.stderr
    wire = Wire(pair)
    r = pair.swanctl("a", "--initiate", "--child", "c1")
    res = swanctl_initiate.parse(r.stdout, r.stderr, r.returncode)
    assert res.ok, r.stdout + r.stderr
    r = pair.swanctl("a", "--rekey", "--child", "c1")  # a CREATE_CHILD_SA after the float
    assert r.returncode == 0, r.stdout + r.stderr
    time.sleep(1.0)
    listed = pair.swanctl("a", "--list-sas").stdout
    return wire.datagrams(), listed


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_after_ike_sa_init_every_exchange_travels_on_4500_behind_the_marker(pair, family):
    grams, listed = _up(pair, family, None)
    on500 = [g for g in grams if g[:2] == (500, 500)]
    on4500 = [g for g in grams if g[:2] == (4500, 4500)]
    # IKE_SA_INIT, and nothing else, on 500: at least its request and response (more when a
    # request was retransmitted -- the pair's 50 ms timer beats a first IPv6 neighbour
    # resolution on a busy machine: 6 of each seen beside other tests)
    assert len(on500) >= 2 and all(b'"IKE_SA_INIT"' in g[2] for g in on500), \
        f"IKE_SA_INIT request and response only on 500, saw {[(s, d, g[:40]) for s, d, g in grams if (s, d) == (500, 500)]}"
    assert not any(b'"IKE_SA_INIT"' in g[2] for g in on4500), "IKE_SA_INIT never floats"
    # IKE_AUTH + CREATE_CHILD_SA (rekey) + INFORMATIONAL (old child's delete): requests and responses
    assert len(on4500) >= 6, f"IKE_AUTH and later exchanges on 4500, saw {[(s, d) for s, d, _ in grams]}"
    assert all(g[2][:4] == b"\0\0\0\0" for g in on4500), "each datagram on 4500 carries the non-ESP marker"
    kinds = {ex for ex in ("IKE_AUTH", "CREATE_CHILD_SA", "INFORMATIONAL") if any(f'"{ex}"'.encode() in g[2] for g in on4500)}
    assert kinds == {"IKE_AUTH", "CREATE_CHILD_SA", "INFORMATIONAL"}, kinds
    assert len(on500) + len(on4500) == len(grams), "no datagram on other ports"
    sas = swanctl_list_sas.parse(listed)
    assert sas and "[4500]" in listed, listed


def test_without_mobike_or_a_nat_nothing_floats(pair):
    grams, listed = _up(pair, "ipv4", "no")
    assert len(grams) >= 8 and all(g[:2] == (500, 500) for g in grams), [(s, d) for s, d, _ in grams]
    assert not any(g[2][:4] == b"\0\0\0\0" for g in grams)
    assert "[4500]" not in listed and "[500]" in listed, listed
