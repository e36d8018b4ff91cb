"""Capture probe: sniff an interface for N seconds (or until a count) and summarise ESP.

    python -m ipsec_hil.lab.probes.capture --iface IF --pcap FILE [--seconds 5] [--count N]
        [--filter "esp or icmp6"]

Writes the pcap (for esp_decrypt and for the report's attachments) and prints:
{"pcap", "iface", "packets", "esp", "non_esp", "esp_by_spi": {"0x...": n},
 "esp_lengths": [ESP payload length (SPI..ICV)], "ip_lengths": [outer IP length],
 "non_esp_protocols": {name: n}, "truncated": bool}. Lists are capped at --max-list.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Sequence

from ipsec_hil.lab.probes import ProbeUsage, parser, positive_float, positive_int, run


def parse_args(argv: Sequence[str]):
    p = parser("capture", "capture packets with a BPF filter; write pcap; count ESP")
    p.add_argument("--iface", required=True)
    p.add_argument("--pcap", required=True)
    p.add_argument("--seconds", type=positive_float, default=5.0)
    p.add_argument("--count", type=positive_int, default=None)
    p.add_argument("--filter", default=None, help="BPF filter (tcpdump syntax)")
    p.add_argument("--max-list", type=positive_int, default=10000)
    a = p.parse_args(list(argv))
    d = os.path.dirname(os.path.abspath(a.pcap))
    if not os.path.isdir(d):
        raise ProbeUsage(f"--pcap: directory {d} does not exist")
    return a


def summarise(packets, max_list: int = 10000) -> dict:
    """Counts and lengths of ESP/non-ESP packets (pure: used on captures and pcaps)."""
    from scapy.layers.inet import IP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.ipsec import ESP

    by_spi: Counter[str] = Counter()
    other: Counter[str] = Counter()
    esp_lengths: list[int] = []
    ip_lengths: list[int] = []
    n_esp = 0
    for p in packets:
        ip = p.getlayer(IP) or p.getlayer(IPv6)
        if ip is not None and len(ip_lengths) < max_list:
            ip_lengths.append(len(ip))
        if p.haslayer(ESP):
            n_esp += 1
            esp = p[ESP]
            by_spi[f"0x{int(esp.spi):08x}"] += 1
            if len(esp_lengths) < max_list:
                esp_lengths.append(len(esp))
        else:
            layer = ip.payload if ip is not None else p.payload
            other[type(layer).__name__] += 1
    return {
        "packets": len(packets),
        "esp": n_esp,
        "non_esp": len(packets) - n_esp,
        "esp_by_spi": dict(by_spi),
        "esp_lengths": esp_lengths,
        "ip_lengths": ip_lengths,
        "non_esp_protocols": dict(other),
        "truncated": n_esp > max_list or len(packets) > max_list,
    }


def main(argv: Sequence[str]) -> dict:
    a = parse_args(argv)
    from scapy.layers.inet import IP  # noqa: F401 -- binds the layers the capture dissects
    from scapy.layers.inet6 import IPv6  # noqa: F401
    from scapy.layers.ipsec import ESP  # noqa: F401
    from scapy.layers.l2 import CookedLinux, Ether  # noqa: F401
    from scapy.sendrecv import sniff  # not scapy.all: ~1.2 s of CPU per probe (issue 15)
    from scapy.utils import wrpcap

    kw = {"iface": a.iface, "timeout": a.seconds, "store": True}
    if a.count:
        kw["count"] = a.count
    if a.filter:
        kw["filter"] = a.filter
    packets = sniff(**kw)
    wrpcap(a.pcap, packets)
    out = summarise(packets, a.max_list)
    out.update({"pcap": os.path.abspath(a.pcap), "iface": a.iface, "filter": a.filter})
    return out


if __name__ == "__main__":
    raise SystemExit(run(main))
