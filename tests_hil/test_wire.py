"""On the wire between the appliances: only ESP, of the length the formula gives, and it
decrypts with the association's keys.

What the trusted IPsec projects assert (strongSwan's evaltest tcpdump lines, FD.io CSIT's
independent decryption): nothing of the inner traffic crosses in the clear; an ESP packet
for a controlled inner length is exactly outer header + ESP framing + padding; a separate
ESP implementation (scapy) decrypts what the engine encrypted.
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.traffic.capture import CaptureError, addresses, capture_pings, decrypt, inside, is_ike

pytestmark = [pytest.mark.page("000")]

SIZES = (100, 500, 1000)  # ping data bytes: controlled inner lengths


@pytest.mark.tunnels(children="one")
def test_only_esp_of_formula_length_that_decrypts(tunnel, record):
    cfg = tunnel.config
    app = tunnel.local
    src = tunnel.inner_address("local")
    wire = capture_pings(tunnel, SIZES)
    inner_nets = [tunnel.lan_net("local"), tunnel.lan_net("remote")]
    nets = addresses(*inner_nets)
    clear = [p for p in wire if p.proto != 50 and not is_ike(p) and (inside(p.src, nets) or inside(p.dst, nets))]
    assert not clear, f"inner traffic crossed the wire in the clear: {[(p.src, p.dst, p.proto) for p in clear[:5]]}"
    out_addr = tunnel.outer_address("local")
    esp_out = [p for p in wire if p.proto == 50 and p.src == out_addr]
    assert not any(p.fragment for p in esp_out), "an ESP packet was fragmented on the wire"
    lengths = sorted({p.length for p in esp_out})
    record.figure("ESP packets sent by the appliance", len(esp_out))
    for size in SIZES:
        inner = esp_math.inner_for_ping_data(size, cfg.inner)
        want = esp_math.outer_packet_len(cfg.cipher, cfg.outer, inner)
        assert want in lengths, (
            f"no ESP packet of {want} bytes for a {inner}-byte inner packet ({cfg.cipher} over {cfg.outer}); "
            f"lengths seen: {lengths}")
    keys = {e.spi: e for e in app.setkey_sas().entries if e.src == out_addr}
    decrypted = 0
    for p in esp_out:
        spi = int.from_bytes(p.raw[(20 if cfg.outer == "ipv4" else 40):][:4], "big")
        entry = keys.get(spi)
        assert entry is not None, f"ESP with SPI {spi:#010x} has no association on {app.name} (setkey -D)"
        try:
            inner_pkt = decrypt(p, entry)
        except CaptureError:  # the suite cannot decrypt this algorithm: a lab problem, not the driver's
            raise
        except Exception as exc:  # scapy's integrity/padding errors: the invariant is broken
            raise AssertionError(
                f"SPI {spi:#010x}: an ESP packet of {p.length} bytes captured on the wire does not "
                f"authenticate and decrypt with the association's keys ({type(exc).__name__})") from None
        got_src = inner_pkt.src
        assert got_src == src, f"SPI {spi:#010x}: decrypted inner source {got_src}, expected {src}"
        decrypted += 1
    record.figure("ESP packets decrypted by scapy with setkey's keys", decrypted)
    assert decrypted == len(esp_out) >= len(SIZES), (
        f"{decrypted} of {len(esp_out)} ESP packets decrypted; the {len(SIZES)} pings asked must have made "
        f"at least {len(SIZES)}")
