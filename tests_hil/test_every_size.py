"""Every inner size, both directions: each delivered exactly once, its ESP of the formula's length.

Issue 12, invariant 4. A driver that mishandles one padding length loses one size in
sixteen (CBC), only with offload on; these tests name the sizes.

- Inbound (``test_every_size``): one process on the injection point sends one crafted
  frame of every inner size from the smallest tagged packet to the exact ESP limit of the
  path, and the far LAN counts them.
- Outbound (``test_every_size_outbound``), through both doors: the appliance's own
  datagrams (sent from its LAN address) and the bench's, forwarded (up to the kernel's
  gate, FreeBSD's ipsec4/6_check_pmtu, and the bench's LAN MTU); one process builds and
  sends the whole sweep, the peer appliance counts what it decrypts, and a capture on the
  appliance's outer port holds exactly one ESP packet of the formula's length per size.
"""
from __future__ import annotations

from collections import Counter

import pytest

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.traffic.capture import WireCapture, is_esp, packets
from ipsec_hil.lab.inject import Inner, min_inner, sweep_udp
from ipsec_hil.lab.inject.tunnel import share_of_path

#: bytes of each captured packet kept: the IP header says the length
SNAPLEN = 96


@pytest.mark.tunnels(children="one")
def test_every_size(tunnel, wire, record):
    """Every inner size from the smallest to the ESP limit delivered exactly once."""
    cfg = tunnel.config
    top = esp_math.max_inner(cfg.cipher, cfg.outer, tunnel.path_mtu)
    sizes = range(min_inner(cfg.inner), top + 1)
    c = wire.crafter()
    edge = wire.right_edge()
    frames = c.sweep(wire.inner, sizes, edge)
    for f in frames:
        assert f.esp_len + esp_math.IP_HEADER[cfg.outer] == esp_math.outer_packet_len(cfg.cipher, cfg.outer, f.inner_len)
    got = wire.send(c, frames, edge + len(frames))
    record.traffic_seconds += got.paced_seconds  # the paced frames are traffic asked
    lost = [f.inner_len for f in got.lost()]
    twice = [f.inner_len for f in got.duplicated()]
    record.figure("inner sizes swept", f"{sizes.start}..{sizes.stop - 1} ({len(sizes)})")
    record.figure("sizes lost", len(lost))
    record.figure("sweep seconds (one process)", round(got.seconds, 2), "s")
    assert not lost and not twice, f"sizes lost: {lost[:40]}; delivered twice: {twice[:40]}"
    wrong = [(f.inner_len, got.inner_len(f, cfg.inner)) for f in frames if got.inner_len(f, cfg.inner) != f.inner_len]
    assert not wrong, f"delivered inner lengths differ from those sent: {wrong[:20]}"


def outbound_top(tunnel, door: str) -> int:
    """The largest inner packet of the sweep: the exact ESP limit for the appliance's own;
    for the bench's, the kernel's gate (IPv6 always; IPv4 with DF by net.inet.ipsec.dfbit)
    and what the bench's LAN carries."""
    cfg, app = tunnel.config, tunnel.local
    exact = esp_math.max_inner(cfg.cipher, cfg.outer, tunnel.path_mtu)
    if door == "own":
        return exact
    dfbit = int(app.sysctl_get("net.inet.ipsec.dfbit")["net.inet.ipsec.dfbit"])
    gate = esp_math.forwarded_limit(cfg.inner, tunnel.path_mtu, cfg.outer, dfbit=dfbit, df_set=True,
                                    block=app.profile.kernel_esp_worst_case_block)
    return min(exact if gate is None else gate, tunnel.bench_lan_mtu("local"))


@pytest.mark.tunnels(children="one")
@pytest.mark.parametrize("door", ["own", pytest.param("forwarded", marks=pytest.mark.forwarded)])
def test_every_size_outbound(tunnel, record, meter, bench_route, door):
    """Every inner size the appliance encrypts (own, forwarded) decrypted once by the peer, ESP of the formula's length."""
    cfg, app, peer = tunnel.config, tunnel.local, tunnel.remote
    if door == "own":
        sender, src = app.host, tunnel.inner_address("local")
    else:
        sender, src = tunnel.bench.host, tunnel.bench_inner_address("local")
        assert src is not None, f"the bench has no {cfg.inner} address on {app.name}'s LAN"
        bench_route(tunnel.inner_prefix("remote"), tunnel.inner_address("local"))
    sizes = range(min_inner(cfg.inner), outbound_top(tunnel, door) + 1)
    inner = Inner(cfg.inner, src, tunnel.inner_address("remote"))
    out_addr = tunnel.outer_address("local")
    # the meter reads the doors a lost size could have been counted at (issue 52): a loss
    # names whether its ESP packet left the port and what counted it on the way, or nothing
    with meter(app, peer, title=f"every size, {door}") as m, \
            WireCapture(app.host, tunnel.outer_ifname("local"), bpf=f"(ip proto 50 or ip6 proto 50) and src host {out_addr}",
                        snaplen=SNAPLEN) as cap:
        got = sweep_udp(sender, peer.host, inner, sizes, rate_mbit=share_of_path(tunnel, "local"))
        record.traffic_seconds += got.paced_seconds  # the paced frames are traffic asked
    record.figure(f"inner sizes swept ({door})", f"{sizes.start}..{sizes.stop - 1} ({len(sizes)})")
    record.figure("sweep seconds (one process)", round(got.seconds, 2), "s")
    lost = [f.inner_len for f in got.lost()]
    twice = [f.inner_len for f in got.duplicated()]
    record.figure("sizes lost", len(lost))
    assert got.sent == len(sizes) + 1 and not got.failed, (
        f"{sender.name}: {got.sent} of {len(sizes) + 1} datagrams sent, {got.failed} refused by its own kernel")
    esp = [p for p in packets(cap.pcap) if is_esp(p) and p.src == out_addr]
    want = Counter(esp_math.outer_packet_len(cfg.cipher, cfg.outer, n) for n in sizes)
    want[esp_math.outer_packet_len(cfg.cipher, cfg.outer, min_inner(cfg.inner))] += 1  # the END datagram
    seen = Counter(p.length for p in esp)
    missing, extra = want - seen, seen - want
    if lost:
        counted = {r: m.ledger.delta(r) for r in tunnel.loss_doors("local") if m.ledger.delta(r)}
        left = [n for n in lost if esp_math.outer_packet_len(cfg.cipher, cfg.outer, n) not in missing]
        where = (f"their ESP packet left {app.name}'s port for {left[:40]} (a capture after its queue), "
                 f"ESP lengths missing there: {sorted(missing.items())[:10]}; counted loss on the way: "
                 f"{counted or 'none (uncounted)'}")
    assert not lost and not twice, f"sizes lost: {lost[:40]} ({where if lost else ''}); delivered twice: {twice[:40]}"
    wrong = [(f.inner_len, got.inner_len(f, cfg.inner)) for f in got.frames if got.inner_len(f, cfg.inner) != f.inner_len]
    assert not wrong, f"decrypted inner lengths differ from those sent: {wrong[:20]}"
    record.figure("ESP packets captured", len(esp))
    assert not missing and not extra, (
        f"ESP lengths on the wire differ from the formula ({cfg.cipher} over {cfg.outer}): "
        f"missing {sorted(missing.items())[:10]}, unexpected {sorted(extra.items())[:10]}")
    assert not any(p.fragment for p in esp), "an ESP packet was fragmented on the wire"
