"""ipsec_hil.lab.inject against two engines in namespaces: the peer (gwB) sends crafted ESP
from its own namespace (as the peer appliance's python3 does), hostA counts deliveries.

Each invariant of issue 12 at the engine, healthy and with the fault that breaks it."""
from __future__ import annotations

import secrets
import time

import pytest

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.inject import Crafter, Inner, WirePath, inject, min_inner
from ipsec_hil.lab.remote.local import LocalHost
from ipsec_hil_twin.engine.minilab import ADDR

from .conftest import needs_root, settle
from .sa_keys import Sa
from .test_window import reference

pytestmark = needs_root

HA = {"ipv4": ADDR["hA"]["lan"][0].split("/")[0], "ipv6": ADDR["hA"]["lan"][1].split("/")[0]}
HB = {"ipv4": ADDR["hB"]["lan"][0].split("/")[0], "ipv6": ADDR["hB"]["lan"][1].split("/")[0]}


def install(lab, cipher="aes-gcm-16", outer="ipv4", window=32, esn=False, offload=True) -> Sa:
    for gw in ("gA", "gB"):
        lab.call(gw, "reset")
        lab.set_faults(gw, {})
    sas = lab.tunnel(cipher, outer, offload=(offload, True))
    if window != 32 or esn:
        for name in ("gA_in", "gB_out"):
            lab.call(name[:2], "add_sa", sa=dict(sas[name], replay_window=window, esn=esn))
    s = sas["gA_in"]
    return Sa(s["spi"], s["src"], s["dst"], cipher, s["enc_key"], s.get("auth_key"))


def send(lab, sa: Sa, frames_of, family="ipv4", esn=False, pps=4000.0):
    inner = Inner(family, HB[family], HA[family])
    crafter = Crafter(sa, esn=esn)
    frames, end_seq = frames_of(crafter, inner)
    before = settle(lab, "gA")
    d = inject(LocalHost("gB", netns=lab.ns("gB")), LocalHost("hA", netns=lab.ns("hA")),
               WirePath(dst=sa.dst, src=sa.src), inner, frames, crafter.end(inner, end_seq), pps=pps)
    after = settle(lab, "gA")
    diff = {sec: {k: after[sec][k] - before[sec][k] for k in after[sec] if after[sec][k] != before[sec].get(k, 0)}
            for sec in ("driver", "esp")}
    assert d.failed == 0 and d.end_seen, d
    return d, diff


@pytest.mark.parametrize("w", [32, 64, 1024])
def test_replay_window_reference_through_the_wire(lab, w):
    sa = install(lab, window=w)
    table = reference(w)
    d, diff = send(lab, sa, lambda c, i: (c.frames(i, [s for s, _ in table if s]), 4 * w + 10))
    got = [d.times(f) for f in d.frames]
    assert got == [int(ok) for s, ok in table if s]
    drops = sum(1 for s, ok in table if s and not ok)
    assert diff["driver"].get("CRYPTO_DROP_REPLAY_OOW") == drops  # octep's replay counter, once each
    assert "rx_bad" not in diff["driver"]


@pytest.mark.parametrize("fault,w", [("replay_window_off_by_one", 32), ("replay_duplicates_accepted", 64)])
def test_window_faults_deliver_what_rfc4303_drops(lab, fault, w):
    sa = install(lab, window=w)
    lab.set_faults("gA", {fault: {}})
    seqs = [2 * w, w + 1, w, w + w // 2, w + w // 2]
    d, _ = send(lab, sa, lambda c, i: (c.frames(i, seqs), 2 * w + 1))
    got = [d.times(f) for f in d.frames]
    healthy = [1, 1, 0, 1, 0]
    assert got != healthy
    assert got == ([1, 1, 1, 1, 0] if fault == "replay_window_off_by_one" else [1, 1, 0, 1, 1])


TAMPER = {  # variant -> (octep driver counter, FreeBSD espstat key for a kernel-run SA)
    "icv_bit": ("rx_bad", "dropped-bad-auth"),
    "ciphertext_bit": ("rx_bad", "dropped-bad-auth"),
    "unknown_spi": (None, "dropped-no-tdb"),
    "truncated": ("rx_bad", "dropped-bad-length"),
    "bad_pad_length": ("rx_bad", "dropped-bad-crypto"),
}


@pytest.mark.parametrize("offload", [True, False], ids=["driver", "kernel"])
def test_tampered_frames_dropped_and_counted_once_by_reason(lab, offload):
    sa = install(lab, cipher="aes-cbc-hmac-sha256", offload=offload)
    variants = list(TAMPER)

    def frames(c, i):
        fs = [c.frame(i, 0, 1, 100)]  # the tunnel's traffic before
        fs += [c.frame(i, k + 1, k + 2, 101, v) for k, v in enumerate(variants)]  # 101 + 2: padding 13
        fs.append(c.frame(i, 99, 20, 100))  # ... and after
        return fs, 21
    d, diff = send(lab, sa, frames)
    assert [d.times(f) for f in d.frames] == [1, 0, 0, 0, 0, 0, 1]
    for v, (drv, kern) in TAMPER.items():
        if offload and drv:
            continue
        assert diff["esp"].get(kern) == 1 + (kern == "dropped-bad-auth"), (v, diff)
    if offload:
        assert diff["driver"]["rx_bad"] == 4 and diff["esp"] == {"dropped-no-tdb": 1}


def test_tampered_icv_delivered_fault(lab):
    sa = install(lab)
    lab.set_faults("gA", {"tampered_icv_delivered": {}})
    d, diff = send(lab, sa, lambda c, i: ([c.frame(i, 0, 1, 100, "icv_bit")], 2))
    assert d.times(d.frames[0]) == 1 and diff["driver"]["rx_bad"] == 1


B = 1 << 32


@pytest.mark.parametrize("cipher", ["aes-gcm-16", "aes-cbc-hmac-sha256"])
def test_esn_inbound_across_2_32(lab, cipher):
    sa = install(lab, cipher=cipher, esn=True)
    seqs = [0x80000000, B - 2, B - 1, B, B + 1, B - 1, B + 1, B - 3]
    d, diff = send(lab, sa, lambda c, i: (c.frames(i, seqs), B + 2), esn=True)
    assert [d.times(f) for f in d.frames] == [1, 1, 1, 1, 1, 0, 0, 1]
    assert diff["driver"].get("CRYPTO_DROP_REPLAY_OOW") == 2


def test_esn_rx_high_bits_lost_fault_drops_everything_past_2_32(lab):
    """The inbound driver bug: the next subspace is never inferred, so from 2^32 on every
    frame is taken for an old one and dropped as a replay (the closing frame stays below)."""
    sa = install(lab, esn=True)
    lab.set_faults("gA", {"esn_rx_high_bits_lost": {}})
    seqs = [0x80000000, B - 2, B - 1, B, B + 1, B + 40]
    d, diff = send(lab, sa, lambda c, i: (c.frames(i, seqs), B - 4), esn=True)
    assert [d.times(f) for f in d.frames] == [1, 1, 1, 0, 0, 0]
    assert diff["driver"].get("CRYPTO_DROP_REPLAY_OOW") == 3


def ping(lab, count=6):
    return lab.run("hB", ["ping", "-c", str(count), "-i", "0.2", "-W", "1", HA["ipv4"]]).stdout


@pytest.mark.parametrize("fault", [None, "esn_high_bits_lost"])
def test_esn_outbound_across_2_32_via_set_seq(lab, fault):
    """gwB's outbound sequence starts 3 below 2^32: its pings cross the boundary."""
    sas = install(lab, esn=True)
    spi_out = lab.call("gB", "list_sas")["sas"]
    spi = next(s["spi"] for s in spi_out if s["direction"] == "out")
    lab.call("gB", "set_seq", spi=spi, seq=0x80000000)
    assert " 0% packet loss" in ping(lab, 1)  # moves gwA's window into the upper half first
    lab.call("gB", "set_seq", spi=spi, seq=B - 3)
    if fault:
        lab.set_faults("gB", {fault: {}})
    before = settle(lab, "gA")
    out = ping(lab)
    after = settle(lab, "gA")
    bad = after["driver"]["rx_bad"] - before["driver"]["rx_bad"]
    assert max(s["seq"] for s in lab.call("gB", "list_sas")["sas"] if s["direction"] == "out") > B
    if fault:
        assert bad >= 3, out  # 2^32 and after: the ICV's high half was 0
    else:
        assert bad == 0 and " 0% packet loss" in out, out
    assert sas is not None


def test_set_seq_refuses_32_bit_wrap_without_esn(lab):
    install(lab)
    spi = next(s["spi"] for s in lab.call("gB", "list_sas")["sas"] if s["direction"] == "out")
    r = lab.call("gB", "set_seq", check=False, spi=spi, seq=B + 5)
    assert not r["ok"] and "ESN" in r["error"]
    lab.call("gB", "set_seq", spi=spi, seq=B - 2)
    before = settle(lab, "gB")
    ping(lab, 4)  # 2^32 - 1 goes out; then the counter would cycle: FreeBSD's wrap counter
    after = settle(lab, "gB")
    assert after["esp"]["replay-counter-wraps"] - before["esp"]["replay-counter-wraps"] >= 1


SWEEP = [("aes-gcm-16", "ipv4", "ipv4"), ("aes-cbc-hmac-sha256", "ipv6", "ipv6"),
         ("aes-cbc-hmac-sha256", "ipv4", "ipv6")]


@pytest.mark.parametrize("cipher,outer,family", SWEEP)
def test_every_size_one_process(lab, cipher, outer, family):
    sa = install(lab, cipher=cipher, outer=outer)
    top = esp_math.max_inner(cipher, outer, lab.mtu)
    sizes = range(min_inner(family), top + 1)
    t0 = time.monotonic()
    d, diff = send(lab, sa, lambda c, i: (c.sweep(i, sizes, 1), len(sizes) + 1), family=family)
    took = time.monotonic() - t0
    print(f"sweep {cipher} {family}-in-{outer}: {len(sizes)} sizes in {took:.2f}s")
    assert [f for f in d.frames if d.times(f) != 1] == []
    for f in d.frames:
        assert d.inner_len(f, family) == f.inner_len
        assert f.esp_len + esp_math.IP_HEADER[outer] == esp_math.outer_packet_len(cipher, outer, f.inner_len)
    assert not diff["driver"].get("rx_bad")


def test_pad_length_lost_fault_loses_one_size_in_sixteen(lab):
    sa = install(lab, cipher="aes-cbc-hmac-sha256")
    lab.set_faults("gA", {"pad_length_lost": {"residue": 9}})
    sizes = range(min_inner("ipv4"), 400)
    d, _ = send(lab, sa, lambda c, i: (c.sweep(i, sizes, 1), len(sizes) + 1))
    lost = sorted(f.inner_len for f in d.lost())
    assert lost and all(n % 16 == 9 for n in lost) and len(lost) == sum(1 for n in sizes if n % 16 == 9)
