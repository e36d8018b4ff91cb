"""ESP decrypt probe: decrypt a capture independently of the appliance (FD.io CSIT's check).

    python -m ipsec_hil.lab.probes.esp_decrypt --pcap FILE --spi 0xc1f2a3b4 --sa-file FILE
        [--max-list 10000]

The SA file (JSON, mode 0600, written by the suite and removed after) holds
{"cipher": "aes-gcm-16" | "aes-cbc-hmac-sha256", "enc_key": hex, "auth_key": hex|null}
-- keys never on argv (visible in ps) and never printed. GCM's enc_key is 36 bytes
(256-bit key + 4-byte salt, RFC 4106); CBC's 32 bytes with a 32-byte HMAC-SHA-256 key.

UDP-encapsulated ESP (NAT-T, RFC 3948: UDP port 4500) is decrypted the same way (scapy
dissects UDP 4500 as ESP); `udp_encapsulated` counts those packets.

Output: {"spi", "esp_packets", "udp_encapsulated", "decrypted", "failed", "inner_lengths": [...],
"inner_families": {"ipv4": n, "ipv6": n}, "payload_sha256": hex over the inner packets'
transport payloads in capture order, "errors": [first few]}.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections import Counter
from typing import Sequence

from ipsec_hil.lab.probes import ProbeUsage, parser, positive_int, run

CIPHERS = {
    # our name -> (scapy crypt_algo, scapy auth_algo, enc key bytes, auth key bytes)
    "aes-gcm-16": ("AES-GCM", "NULL", 36, 0),
    "aes-cbc-hmac-sha256": ("AES-CBC", "SHA2-256-128", 32, 32),
}


def _spi(v: str) -> int:
    try:
        n = int(v, 0) if v.lower().startswith("0x") else int(v, 16)
    except ValueError:
        raise ProbeUsage(f"--spi: not a hex SPI: {v!r}") from None
    if not 0 < n < 2**32:
        raise ProbeUsage(f"--spi: out of range: {v!r}")
    return n


def load_sa(path: str) -> dict:
    """Read and validate the SA file; errors name the file and field, never the key."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise ProbeUsage(f"--sa-file {path}: {e.strerror}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ProbeUsage(f"--sa-file {path}: readable by others (mode {oct(st.st_mode & 0o777)}); use 0600")
    try:
        with open(path, encoding="utf-8") as f:
            sa = json.load(f)
    except json.JSONDecodeError as e:
        raise ProbeUsage(f"--sa-file {path}:{e.lineno}: not JSON ({e.msg})") from None
    if not isinstance(sa, dict):
        raise ProbeUsage(f"--sa-file {path}: expected a JSON object")
    cipher = sa.get("cipher")
    if cipher not in CIPHERS:
        raise ProbeUsage(f"--sa-file {path}: cipher: expected one of {sorted(CIPHERS)}, found {cipher!r}")
    _, _, enc_len, auth_len = CIPHERS[cipher]
    out = {"cipher": cipher}
    for fld, want in (("enc_key", enc_len), ("auth_key", auth_len)):
        v = sa.get(fld)
        if want == 0:
            if v not in (None, ""):
                raise ProbeUsage(f"--sa-file {path}: {fld}: must be null for {cipher}")
            out[fld] = None
            continue
        try:
            key = bytes.fromhex(v or "")
        except (ValueError, TypeError):
            raise ProbeUsage(f"--sa-file {path}: {fld}: not hex") from None
        if len(key) != want:
            raise ProbeUsage(f"--sa-file {path}: {fld}: expected {want} bytes for {cipher}, found {len(key)}")
        out[fld] = key
    return out


def parse_args(argv: Sequence[str]):
    p = parser("esp_decrypt", "decrypt ESP packets of one SPI from a pcap with scapy")
    p.add_argument("--pcap", required=True)
    p.add_argument("--spi", required=True, type=str)
    p.add_argument("--sa-file", required=True)
    p.add_argument("--max-list", type=positive_int, default=10000)
    a = p.parse_args(list(argv))
    a.spi = _spi(a.spi)
    if not os.path.isfile(a.pcap):
        raise ProbeUsage(f"--pcap {a.pcap}: no such file")
    return a


def decrypt(packets, spi: int, sa: dict, max_list: int = 10000) -> dict:
    """Decrypt every ESP packet of ``spi`` in ``packets`` (pure; used by main and tests)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.ipsec import ESP, SecurityAssociation

    crypt_algo, auth_algo, _, _ = CIPHERS[sa["cipher"]]
    h = hashlib.sha256()
    lengths: list[int] = []
    families: Counter[str] = Counter()
    errors: list[str] = []
    n = ok = bad = in_udp = 0
    sas: dict[tuple[str, str], SecurityAssociation] = {}
    for p in packets:
        if not p.haslayer(ESP) or int(p[ESP].spi) != spi:
            continue
        n += 1
        in_udp += int(p[ESP].underlayer is not None and isinstance(p[ESP].underlayer, UDP))
        outer = p.getlayer(IP) or p.getlayer(IPv6)
        key = (outer.src, outer.dst)
        if key not in sas:
            hdr = (IP if outer.version == 4 else IPv6)(src=outer.src, dst=outer.dst)
            sas[key] = SecurityAssociation(
                ESP, spi=spi, crypt_algo=crypt_algo, crypt_key=sa["enc_key"],
                auth_algo=auth_algo, auth_key=sa["auth_key"], tunnel_header=hdr,
            )
        try:
            inner = sas[key].decrypt(outer.copy())
        except Exception as e:  # authentication failure, malformed
            bad += 1
            if len(errors) < 5:
                errors.append(f"packet {n}: {type(e).__name__}: {e}"[:200])
            continue
        ok += 1
        fam = "ipv6" if inner.version == 6 else "ipv4"
        families[fam] += 1
        if len(lengths) < max_list:
            lengths.append(len(inner))
        h.update(bytes(inner.payload.payload))
    return {
        "spi": f"0x{spi:08x}",
        "esp_packets": n,
        "udp_encapsulated": in_udp,
        "decrypted": ok,
        "failed": bad,
        "inner_lengths": lengths,
        "inner_families": dict(families),
        "payload_sha256": h.hexdigest(),
        "errors": errors,
    }


def main(argv: Sequence[str]) -> dict:
    a = parse_args(argv)
    sa = load_sa(a.sa_file)
    # the layers rdpcap must dissect, bound before it reads (not scapy.all: ~1.2 s of CPU
    # per probe, issue 15)
    from scapy.layers.inet import IP, UDP  # noqa: F401
    from scapy.layers.inet6 import IPv6  # noqa: F401
    from scapy.layers.ipsec import ESP  # noqa: F401
    from scapy.layers.l2 import CookedLinux, Ether  # noqa: F401
    from scapy.utils import rdpcap

    out = decrypt(rdpcap(a.pcap), a.spi, sa, a.max_list)
    out["pcap"] = os.path.abspath(a.pcap)
    return out


if __name__ == "__main__":
    raise SystemExit(run(main))
