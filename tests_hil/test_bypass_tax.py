"""Page 003, the bypass tax: traffic that matches no SA keeps the profile's share of its rate
while the IPsec stack and the offload driver are loaded and a tunnel is up.

Many UDP senders of small datagrams from the bench, forwarded through the appliance to the
peer's outer port in the family the tunnel's children do not carry (an IPv4-inner tunnel:
IPv6; no selector covers it, so no SA matches: the packets meet only the SPD lookup and
the driver's hooks), interleaved on-off-off-on against the same traffic with the tunnel
down and the driver unloaded (ipsec_hil.lab.traffic.bypass_tax). The share "on" keeps of
the "off" rate is judged against the model's ``bypass_share`` (expectations/hardware.py).

The receiver is the peer, not a second bench port: the virtual bench is one namespace,
where a datagram between two of its own addresses never leaves it.
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.driver import DriverDeployment
from ipsec_hil.lab.measuring.measure import expect_at_least
from ipsec_hil.lab.traffic.bypass_tax import measure_bypass_tax, udp_senders

pytestmark = [pytest.mark.throughput, pytest.mark.forwarded]

SENDERS = 8
DATAGRAM = 64  # bytes of UDP payload: small packets, the per-packet cost's regime
#: datagrams a second offered in all: below what the virtual bench keeps up on two loaded
#: cores (20-45 k measured at load 10), so a trial is the path's, not the machine's. A
#: hardware bench raises it to its port's line rate of small frames.
OFFER_PPS = 6000
TRIAL_SECONDS = 1


@pytest.mark.page("003")
@pytest.mark.tunnels(outer="ipv4", inner="ipv4", cipher="aes-gcm-16", children="one")
def test_bypass_tax(tunnel, record, bench_route):
    """Traffic no SA matches keeps ``bypass_share`` of its rate with IPsec and the driver active."""
    app, peer = tunnel.local, tunnel.remote
    family = "ipv6" if tunnel.config.inner == "ipv4" else "ipv4"
    local_end = tunnel.end("local")
    facing = tunnel.lab.bench_port_facing(local_end.host, local_end.lan)
    assert facing, f"the bench has no port on {app.name}'s {local_end.lan}"
    src, lan = facing[1].address(family), local_end.lan_port.address(family)
    dst, outer = tunnel.end("remote").outer_port.address(family), local_end.outer_port.address(family)
    assert src and lan and dst and outer, f"no {family} addresses on the bypass path through {app.name}"
    bench_route(str(dst.network), str(lan.ip))
    peer.route_add(str(src.network), gateway=str(outer.ip))
    driver = DriverDeployment(app, app.profile.module_file)  # only its kldunload/kldload: no upload

    def switch_off() -> None:
        tunnel.local.swanctl_terminate(ike=tunnel.conn).check(f"terminating {tunnel.conn}")
        driver.unload()

    def switch_on() -> None:
        driver.load()
        tunnel.reestablish()

    try:
        trial = udp_senders(tunnel.bench, peer, str(dst.ip), pps=OFFER_PPS, senders=SENDERS, size=DATAGRAM,
                            seconds=TRIAL_SECONDS, bind=str(src.ip))
        tax = measure_bypass_tax(trial, switch_off=switch_off, switch_on=switch_on)
    finally:
        peer.route_delete(str(src.network))
    record.traffic_seconds += TRIAL_SECONDS * len(tax.trials)
    record.table(f"bypass tax: {SENDERS} UDP senders, {DATAGRAM}-byte datagrams, {family} "
                 f"{src.ip} -> {dst.ip} through {app.name} (no SA matches)", tax.table())
    record.figure("bypass: delivered with IPsec + driver on", round(tax.rate("on")), "datagrams/s")
    record.figure("bypass: delivered with tunnel down, driver unloaded", round(tax.rate("off")), "datagrams/s")
    record.figure("bypass share (on / off)", round(tax.share, 3))
    bound = app.profile.bypass_share
    expect_at_least(tax.share, bound, f"page 003: traffic no SA matches keeps its rate with IPsec and "
                                      f"{app.profile.driver} active (on {tax.rate('on'):,.0f} / off "
                                      f"{tax.rate('off'):,.0f} datagrams/s)")
