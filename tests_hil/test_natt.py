"""NAT traversal (issue 13): ESP in UDP 4500 (RFC 3948), forced with `encap = yes`.

Only tunnels with ``encap: true`` (topologies: natt, natt136; IPv4 outer, as FreeBSD's
udp_ipsec_output allows). Expectations are ipsec_hil.lab.expectations.esp_math's formulas: the
appliance's own largest inner packet is 8 bytes smaller than without encapsulation
(1,438 for AES-GCM over IPv4 on a 1,500-byte path); the wire carries UDP 4500 frames of
the formula's length that scapy decrypts with setkey's keys; conservation holds, carried
by the driver where the model offloads NAT-T (registry: ``offloads_udp_encap``) and by
the kernel's ESP counters -- the driver's staying still -- where it does not.

Forwarded through NAT-T (``test_natt_forwarded_limits``, from the bench): the largest
forwarded packet that crosses in ONE UDP 4500 frame is the same 8 bytes smaller (one more
byte and FreeBSD, its outer DF cleared by net.inet.ipsec.dfbit 0, fragments the frame);
with dfbit 1 the kernel's gate (ipsec4_check_pmtu) refuses a larger packet with an ICMP
"fragmentation needed" carrying path MTU - ipsec_hdrsiz_internal(): FreeBSD's header size
has no UDP term ("XXX: for NAT-T we need to cosider UDP header size", sys/netipsec/ipsec.c),
so the encapsulated tunnel's figure is esp_math.forwarded_limit's, as without NAT-T.
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.expectations import esp_math, expect
from ipsec_hil.lab.traffic.capture import CaptureError, WireCapture, capture_pings, decrypt, is_udp_esp, packets
from ipsec_hil.lab.measuring.measure import expect_equal, expect_zero

pytestmark = [pytest.mark.tunnels(encap=True, children="one")]

SIZES = (100, 1000)  # ping data bytes: controlled inner lengths
DFBIT = "net.inet.ipsec.dfbit"


def test_natt_own_largest_is_8_bytes_smaller(tunnel, record, meter):
    """The appliance's own largest inner packet with NAT-T passes, one more byte is refused."""
    cfg, mtu = tunnel.config, tunnel.path_mtu
    plain = esp_math.max_inner(cfg.cipher, cfg.outer, mtu)
    largest = esp_math.max_inner(cfg.cipher, cfg.outer, mtu, encap=True)
    record.figure(f"largest own inner packet with NAT-T (path MTU {mtu})", largest, "bytes")
    record.figure("without NAT-T", plain, "bytes")
    app, src, dst = tunnel.local, tunnel.inner_address("local"), tunnel.inner_address("remote")
    data = esp_math.ping_data_for_inner(largest, cfg.inner)
    ok = app.ping(dst, size=data, count=3, dont_fragment=True, source=src)
    assert ok.received, (f"{app.name}: a {data}-byte ping (inner {largest}, the exact limit in UDP 4500 for "
                         f"{cfg.cipher} on a {mtu}-byte path) was not answered: {ok.errors}")
    with meter(app, title="one byte more than fits in UDP 4500") as m:
        big = app.ping(dst, size=data + 1, count=3, dont_fragment=True, source=src)
    assert not big.received, (f"{app.name}: a {data + 1}-byte ping (inner {largest + 1}) was answered; with "
                              f"NAT-T it must be refused (8 bytes less than the plain {plain})")
    assert big.emsgsize_count > 0 or big.status in (2, 71), (
        f"{app.name}: the too-big own packet must be refused with EMSGSIZE; status {big.status}, {big.errors}")
    kernel = expect.encrypted_refs(app.name, app.profile, kernel_cipher=True)
    expect_zero(m.ledger, expect.encrypted_refs(app.name, app.profile) + kernel,
                "a refused packet never reaches an ESP engine (driver or kernel)")


def test_natt_wire_is_udp_4500_that_scapy_decrypts(tunnel, record):
    """Only UDP 4500 frames of the formula's length cross the wire, and scapy decrypts them."""
    cfg, app, src = tunnel.config, tunnel.local, tunnel.inner_address("local")
    wire = capture_pings(tunnel, SIZES)
    out_addr = tunnel.outer_address("local")
    assert not [p for p in wire if p.proto == 50], "plain ESP (protocol 50) on the wire of a NAT-T tunnel"
    esp_out = [p for p in wire if is_udp_esp(p) and p.src == out_addr]
    record.figure("UDP 4500 ESP frames sent by the appliance", len(esp_out))
    lengths = sorted({p.length for p in esp_out})
    for size in SIZES:
        want = esp_math.outer_packet_len(cfg.cipher, cfg.outer, esp_math.inner_for_ping_data(size, cfg.inner),
                                         encap=True)
        assert want in lengths, f"no UDP 4500 frame of {want} bytes for {size}-byte pings; lengths seen: {lengths}"
    keys = {e.spi: e for e in app.setkey_sas().entries if e.src == out_addr}
    for p in esp_out:
        spi = int.from_bytes(p.raw[20 + esp_math.UDP_ENCAP_HEADER:][:4], "big")
        entry = keys.get(spi)
        assert entry is not None, f"UDP-encapsulated ESP with SPI {spi:#010x} has no association on {app.name}"
        try:
            inner = decrypt(p, entry)
        except CaptureError:
            raise
        except Exception as exc:  # scapy's integrity/padding errors: the invariant is broken
            raise AssertionError(f"SPI {spi:#010x}: a UDP 4500 frame of {p.length} bytes does not authenticate "
                                 f"and decrypt with the association's keys ({type(exc).__name__})") from None
        assert inner.src == src, f"SPI {spi:#010x}: decrypted inner source {inner.src}, expected {src}"
    assert esp_out, "no UDP-encapsulated ESP from the appliance captured"


def test_natt_conservation_offload_or_fallback(tunnel, record, meter):
    """Conservation through NAT-T; the driver carries it where the model offloads NAT-T, else the kernel."""
    app, peer = tunnel.local, tunnel.remote
    with meter(app, peer, title="own pings through the NAT-T tunnel") as m:
        r = app.ping(tunnel.inner_address("remote"), size=200, count=50, interval=0.02,
                     source=tunnel.inner_address("local"))
    assert r.received == r.transmitted == 50, f"{app.name}: {r.received} of {r.transmitted} pings answered"
    L, refs = m.ledger, {}
    for end in ("local", "remote"):
        a = tunnel.appliance(end)
        by_driver = tunnel.offloaded(end) and a.profile.offloads_udp_encap
        refs[end] = (expect.encrypted_refs(a.name, a.profile, kernel_cipher=not by_driver),
                     expect.decrypted_refs(a.name, a.profile, kernel_cipher=not by_driver))
        record.figure(f"{a.name} ({a.profile.driver}) carries NAT-T", "driver" if by_driver else "kernel")
        if tunnel.offloaded(end) and not a.profile.offloads_udp_encap:
            expect_zero(L, expect.encrypted_refs(a.name, a.profile) + expect.decrypted_refs(a.name, a.profile),
                        f"{a.name}: {a.profile.driver} does not offload NAT-T (registry): its counters stay still")
            sent = L.value(refs[end][0])
            assert sent >= 50, (f"{a.name}: the kernel's ESP output moved {sent:+,} for 50 pings: the NAT-T "
                                f"fallback must be carried by the kernel\n\n{L.table()}")
    expect_equal(L, refs["local"][0], refs["remote"][1], "the remote end decrypted what the local end encrypted")
    expect_equal(L, refs["remote"][0], refs["local"][1], "the local end decrypted what the remote end encrypted")


@pytest.mark.forwarded
def test_natt_forwarded_limits(tunnel, record, bench_route):
    """Forwarded with DF through NAT-T: one UDP 4500 frame up to the 8-byte-smaller limit, the
    gate's frag-needed (dfbit 1) carrying path MTU - FreeBSD's header size."""
    cfg, mtu, app = tunnel.config, tunnel.path_mtu, tunnel.local
    one_frame = esp_math.max_inner(cfg.cipher, cfg.outer, mtu, encap=True)
    plain = esp_math.max_inner(cfg.cipher, cfg.outer, mtu)
    gate = esp_math.forwarded_limit("ipv4", mtu, cfg.outer, dfbit=1, df_set=True,
                                    block=app.profile.kernel_esp_worst_case_block)
    assert gate is not None
    lan = tunnel.bench_lan_mtu("local")
    assert lan > one_frame, (f"tunnel {tunnel.name}: the bench's LAN towards {app.name} carries {lan} bytes; the "
                             f"test needs {one_frame + 1} (topologies/README.md, \"Reaching the forwarded gates\")")
    bench, src, dst = tunnel.bench, tunnel.bench_inner_address("local"), tunnel.inner_address("remote")
    assert src, f"the bench has no {cfg.inner} address on {app.name}'s LAN"
    bench_route(tunnel.inner_prefix("remote"), tunnel.inner_address("local"))
    out_addr = tunnel.outer_address("local")
    record.figure(f"largest forwarded inner packet in one UDP 4500 frame (path MTU {mtu})", one_frame, "bytes")
    record.figure("without NAT-T", plain, "bytes")

    def sent(inner_len: int) -> tuple[object, list]:
        with WireCapture(app.host, tunnel.outer_ifname("local"), bpf=f"src host {out_addr}", snaplen=64) as cap:
            r = bench.ping(dst, size=esp_math.ping_data_for_inner(inner_len, "ipv4"), count=2, interval=0.05,
                           dont_fragment=True, source=src)
        return r, packets(cap.pcap)

    old = int(app.sysctl_get(DFBIT)[DFBIT])
    try:
        app.sysctl_set(DFBIT, 0)  # FreeBSD's default: no gate for IPv4, the outer DF cleared
        r, wire = sent(one_frame)
        frames = sorted({p.length for p in wire if is_udp_esp(p)})
        want = esp_math.outer_packet_len(cfg.cipher, cfg.outer, one_frame, encap=True)
        assert r.received, f"a forwarded {one_frame}-byte packet with DF was not answered: {r.errors}"
        assert want in frames and not [p for p in wire if p.fragment], (
            f"a forwarded {one_frame}-byte packet (the largest that fits one UDP 4500 frame on a {mtu}-byte path) "
            f"must cross as one {want}-byte frame: UDP 4500 frames seen {frames}, "
            f"{len([p for p in wire if p.fragment])} outer fragments")
        r, wire = sent(one_frame + 1)
        assert r.received, f"a forwarded {one_frame + 1}-byte packet with DF was not answered (dfbit 0): {r.errors}"
        assert [p for p in wire if p.fragment], (
            f"a forwarded {one_frame + 1}-byte packet does not fit one UDP 4500 frame of {mtu} bytes "
            f"(8 bytes of UDP header), so its outer packet must be fragmented; UDP 4500 frames seen "
            f"{sorted({p.length for p in wire if is_udp_esp(p)})}, no fragment")
        app.sysctl_set(DFBIT, 1)  # the gate checks every forwarded IPv4 packet
        at = bench.ping(dst, size=esp_math.ping_data_for_inner(gate, "ipv4"), count=2, interval=0.05,
                        dont_fragment=True, source=src)
        over = bench.ping(dst, size=esp_math.ping_data_for_inner(gate + 1, "ipv4"), count=2, interval=0.05,
                          dont_fragment=True, source=src)
    finally:
        app.sysctl_set(DFBIT, old)
    record.figure(f"gate with dfbit 1 (path MTU {mtu} - FreeBSD's header size)", gate, "bytes")
    record.figure("frag-needed MTU", ", ".join(map(str, over.too_big_mtu)) or "none")
    assert at.received, f"with dfbit 1 a forwarded {gate}-byte packet (the gate) was not answered: {at.errors}"
    assert not over.received and over.too_big_mtu, (
        f"with dfbit 1 a forwarded {gate + 1}-byte packet with DF must be refused with an ICMP frag-needed: "
        f"{over.received} of {over.transmitted} answered, errors {over.errors}")
    assert set(over.too_big_mtu) == {gate}, (
        f"the frag-needed carries MTU {sorted(set(over.too_big_mtu))}, expected {gate} (path MTU {mtu} - "
        f"ipsec_hdrsiz_internal, which has no UDP term)")
