"""Probes: argument parsing, JSON contract, and the pure parts (summary, decryption)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ipsec_hil.lab.probes import ProbeUsage, run
from ipsec_hil.lab.probes import capture, esp_decrypt, pmtu
from ipsec_hil.lab.traffic.bench import ProbeError, parse_probe_output

REPO = Path(__file__).resolve().parents[2]


def test_pmtu_args():
    a = pmtu.parse_args(["--dst", "fd00:b::10", "--size", "1336"])
    assert (a.dst, a.size, a.count, a.timeout) == ("fd00:b::10", 1336, 1, 2.0)
    with pytest.raises(ProbeUsage, match="--dst must be an IPv6 address"):
        pmtu.parse_args(["--dst", "192.0.2.1", "--size", "10"])
    with pytest.raises(ProbeUsage, match="required: --size"):
        pmtu.parse_args(["--dst", "fd00::1"])
    with pytest.raises(ProbeUsage, match="--size must be"):
        pmtu.parse_args(["--dst", "fd00::1", "--size", "-1"])
    assert pmtu.parse_args(["--dst", "fd00::1", "--size", "1", "--via", "fd00:a::1"]).via == "fd00:a::1"
    with pytest.raises(ProbeUsage, match="--via must be an IPv6 address"):
        pmtu.parse_args(["--dst", "fd00::1", "--size", "1", "--via", "198.51.100.1"])
    with pytest.raises(ProbeUsage, match="--timeout"):
        pmtu.parse_args(["--dst", "fd00::1", "--size", "1", "--timeout", "0"])


def test_pmtu_finds_our_echo_in_a_ptb():
    inv = bytearray(48)
    inv[6] = 58
    inv[40] = 128
    inv[44:46] = (0xBEEF).to_bytes(2, "big")
    assert pmtu._echo_id_in(bytes(inv)) == 0xBEEF
    inv[46:48] = (2).to_bytes(2, "big")
    assert pmtu._echo_seq_in(bytes(inv), 0xBEEF) == 2  # which echo the PTB answers: the wait ends when all are
    assert pmtu._echo_seq_in(bytes(inv), 0xBEEE) is None  # another probe's echo
    inv[40] = 129  # an echo reply is not our invoking packet
    assert pmtu._echo_id_in(bytes(inv)) is None


def test_capture_args(tmp_path):
    a = capture.parse_args(["--iface", "eth0", "--pcap", str(tmp_path / "x.pcap"), "--count", "10"])
    assert a.count == 10 and a.seconds == 5.0
    with pytest.raises(ProbeUsage, match="does not exist"):
        capture.parse_args(["--iface", "eth0", "--pcap", "/nonexistent/dir/x.pcap"])


def _sa_file(tmp_path, data, mode=0o600):
    p = tmp_path / "sa.json"
    p.write_text(json.dumps(data))
    os.chmod(p, mode)
    return str(p)


def test_esp_decrypt_sa_file_validation(tmp_path):
    key = os.urandom(36).hex()
    good = _sa_file(tmp_path, {"cipher": "aes-gcm-16", "enc_key": key, "auth_key": None})
    assert esp_decrypt.load_sa(good)["enc_key"] == bytes.fromhex(key)
    with pytest.raises(ProbeUsage, match="readable by others") as ei:
        esp_decrypt.load_sa(_sa_file(tmp_path, {"cipher": "aes-gcm-16", "enc_key": key}, 0o644))
    assert key not in str(ei.value)
    with pytest.raises(ProbeUsage, match="enc_key: expected 36 bytes for aes-gcm-16, found 32") as ei:
        esp_decrypt.load_sa(_sa_file(tmp_path, {"cipher": "aes-gcm-16", "enc_key": key[:64]}))
    assert key[:64] not in str(ei.value)
    with pytest.raises(ProbeUsage, match="cipher: expected one of"):
        esp_decrypt.load_sa(_sa_file(tmp_path, {"cipher": "des", "enc_key": key}))
    with pytest.raises(ProbeUsage, match="auth_key: expected 32 bytes"):
        esp_decrypt.load_sa(_sa_file(tmp_path, {"cipher": "aes-cbc-hmac-sha256", "enc_key": os.urandom(32).hex()}))


def test_esp_decrypt_args(tmp_path):
    pcap = tmp_path / "c.pcap"
    pcap.write_bytes(b"")
    a = esp_decrypt.parse_args(["--pcap", str(pcap), "--spi", "c1f2a3b4", "--sa-file", "x"])
    assert a.spi == 0xC1F2A3B4
    assert esp_decrypt.parse_args(["--pcap", str(pcap), "--spi", "0x10", "--sa-file", "x"]).spi == 16
    with pytest.raises(ProbeUsage, match="not a hex SPI"):
        esp_decrypt.parse_args(["--pcap", str(pcap), "--spi", "zz", "--sa-file", "x"])
    with pytest.raises(ProbeUsage, match="no such file"):
        esp_decrypt.parse_args(["--pcap", str(tmp_path / "none"), "--spi", "1", "--sa-file", "x"])
    with pytest.raises(ProbeUsage, match="unrecognized arguments: --key"):
        esp_decrypt.parse_args(["--pcap", str(pcap), "--spi", "1", "--sa-file", "x", "--key", "00"])


@pytest.mark.parametrize("cipher", sorted(esp_decrypt.CIPHERS))
def test_decrypt_and_summary_against_the_formula(cipher):
    """scapy's own SA encrypts; the probe decrypts; ESP lengths equal esp_math's formula."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.ipsec import ESP, SecurityAssociation
    from scapy.packet import Raw

    from ipsec_hil.lab.expectations import esp_math

    algo, auth, elen, alen = esp_decrypt.CIPHERS[cipher]
    ek, ak = os.urandom(elen), (os.urandom(alen) if alen else None)
    sa = SecurityAssociation(ESP, spi=0x1234, crypt_algo=algo, crypt_key=ek, auth_algo=auth, auth_key=ak,
                             tunnel_header=IP(src="192.0.2.1", dst="192.0.2.2"))
    inner = IP(src="198.51.100.10", dst="198.51.100.70") / TCP() / Raw(b"y" * 108)  # 148 bytes
    pkts = [IP(bytes(sa.encrypt(inner))) for _ in range(4)]
    pkts[3][ESP].data = bytes(pkts[3][ESP].data[:-1]) + bytes([pkts[3][ESP].data[-1] ^ 1])  # corrupt the ICV
    s = capture.summarise(pkts)
    assert s["esp"] == 4 and s["esp_by_spi"] == {"0x00001234": 4}
    expected = esp_math.esp_payload_len(cipher, 148)
    assert s["esp_lengths"] == [expected] * 4
    r = esp_decrypt.decrypt(pkts, 0x1234, {"cipher": cipher, "enc_key": ek, "auth_key": ak})
    assert (r["esp_packets"], r["decrypted"], r["failed"]) == (4, 3, 1)
    assert r["inner_lengths"] == [148] * 3 and r["inner_families"] == {"ipv4": 3}
    assert ek.hex() not in json.dumps(r)


def test_run_reports_usage_and_runtime_errors_as_json(capsys):
    assert run(lambda argv: pmtu.parse_args(argv), ["--size", "1"]) == 2
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["kind"] == "usage" and "--dst" in out["error"]
    def boom(argv):
        raise RuntimeError("no such device")
    assert run(boom, []) == 1
    assert "no such device" in json.loads(capsys.readouterr().out)["error"]


def test_probe_as_a_process_prints_one_json_line():
    r = subprocess.run([sys.executable, "-m", "ipsec_hil.lab.probes.pmtu", "--dst", "nope", "--size", "1"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    with pytest.raises(ProbeError, match="--dst must be an IPv6 address"):
        parse_probe_output("pmtu", r.stdout, r.stderr, r.returncode)


def test_parse_probe_output():
    assert parse_probe_output("x", 'noise\n{"a": 1}\n', "", 0) == {"a": 1}
    with pytest.raises(ProbeError, match="not JSON"):
        parse_probe_output("x", "Traceback...\n", "", 1)
    with pytest.raises(ProbeError, match="no output"):
        parse_probe_output("x", "", "killed", 137)


def test_bench_esp_decrypt_end_to_end_through_the_host_api(tmp_path):
    """Keys travel in a 0600 file that is gone afterwards; the probe decrypts a real pcap."""
    import glob

    from scapy.layers.inet import IP, UDP
    from scapy.layers.ipsec import ESP, SecurityAssociation
    from scapy.packet import Raw
    from scapy.utils import wrpcap

    from ipsec_hil.lab.remote import LocalHost
    from ipsec_hil.lab.traffic.bench import Bench

    ek = os.urandom(36)
    sa = SecurityAssociation(ESP, spi=0xC1F2A3B4, crypt_algo="AES-GCM", crypt_key=ek, auth_algo="NULL",
                             tunnel_header=IP(src="192.0.2.1", dst="192.0.2.2"))
    pkts = [sa.encrypt(IP(src="198.51.100.10", dst="198.51.100.70") / UDP() / Raw(bytes([i]) * 50)) for i in range(5)]
    pcap = tmp_path / "c.pcap"
    wrpcap(str(pcap), [IP(bytes(p)) for p in pkts])
    before = set(glob.glob("/tmp/.hil-sa-*"))
    r = Bench("bench", LocalHost("bench")).esp_decrypt(str(pcap), 0xC1F2A3B4, "aes-gcm-16", ek)
    assert (r["esp_packets"], r["decrypted"], r["failed"]) == (5, 5, 0)
    assert r["inner_lengths"] == [20 + 8 + 50] * 5
    assert set(glob.glob("/tmp/.hil-sa-*")) == before
    assert ek.hex() not in json.dumps(r)


@pytest.fixture
def route_netns():
    """A throw-away namespace with one veth (198.51.100.2/24, 2001:db8:5::2/64), removed after."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace for the route probe)")
    ns = f"hilrt{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for args in (["link", "add", "v0", "type", "veth", "peer", "name", "v1"], ["link", "set", "v0", "up"],
                     ["link", "set", "v1", "up"], ["addr", "add", "198.51.100.2/24", "dev", "v0"],
                     ["-6", "addr", "add", "2001:db8:5::2/64", "dev", "v0", "nodad"]):
            subprocess.run(["ip", "-n", ns, *args], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def _route_probe(ns: str, *args: str) -> dict:
    r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-m", "ipsec_hil.lab.probes.route", *args],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    try:
        return parse_probe_output("route", r.stdout, r.stderr, r.returncode)
    except ProbeError as exc:
        return {"error": str(exc)}


def test_route_probe_adds_finds_and_removes_only_what_it_added(route_netns):
    """The bench's temporary route as the forwarded tests use it (fixtures.bench_route): added
    once, reported as existing (not added twice, not replaced by another gateway), found by
    the kernel's lookup, removed, and a second removal says there was nothing."""
    ns = route_netns
    for dst, gw, other, addr in (("203.0.113.65/32", "198.51.100.1", "198.51.100.9", "203.0.113.65"),
                                 ("2001:db8:7::65/128", "2001:db8:5::1", "2001:db8:5::9", "2001:db8:7::65")):
        assert _route_probe(ns, "--action", "get", "--dst", addr)["found"] is False
        added = _route_probe(ns, "--action", "add", "--dst", dst, "--gateway", gw)
        assert added == {"action": "add", "dst": dst, "gateway": gw, "ifname": "v0", "existed": False}
        assert _route_probe(ns, "--action", "add", "--dst", dst, "--gateway", gw)["existed"] is True
        assert "exists already; not replacing it" in _route_probe(ns, "--action", "add", "--dst", dst,
                                                                  "--gateway", other)["error"]
        found = _route_probe(ns, "--action", "get", "--dst", addr)
        assert (found["found"], found["gateway"], found["ifname"]) == (True, gw, "v0")
        assert _route_probe(ns, "--action", "del", "--dst", dst)["existed"] is True
        assert _route_probe(ns, "--action", "del", "--dst", dst)["existed"] is False
        assert _route_probe(ns, "--action", "get", "--dst", addr)["found"] is False
