"""Bring-up against the real ESP engine (ipsec_hil_twin.engine) in its MiniLab (hostA|gwA|gwB|hostB):
the daemons negotiate, the engines get the keys, a ping crosses the tunnel, and
`swanctl --list-sas` shows the engine's packet counters.
"""
from __future__ import annotations

import subprocess

import pytest

from ipsec_hil.lab.parsers import swanctl_initiate, swanctl_list_sas
from ipsec_hil_twin.ike.pairlab import conf

from .waiting import minilab_with_daemons, wait_until

pytestmark = pytest.mark.needs_root


@pytest.fixture
def lab():
    with minilab_with_daemons() as lab:
        yield lab


def swanctl(lab, gw: str, *args: str) -> subprocess.CompletedProcess:
    return lab.swanctl(gw, *args)


@pytest.mark.parametrize("esp", ["aes256gcm16"])  # CBC keys: test_negotiation.test_cbc_keys_and_auth_keys
def test_negotiated_tunnel_carries_traffic_through_real_engines(lab, esp):
    a = conf("lab", "192.0.2.1", "192.0.2.2", {"net": ("198.51.100.0/26", "203.0.113.0/24")}, esp=esp)
    b = conf("lab", "192.0.2.2", "192.0.2.1", {"net": ("203.0.113.0/24", "198.51.100.0/26")}, esp=esp)
    for gw, text in (("gA", a), ("gB", b)):
        (lab.host_dir(gw) / "root/usr/local/etc/swanctl/swanctl.conf").write_text(text)
        r = swanctl(lab, gw, "--load-all", "--noprompt")
        assert r.returncode == 0, r.stderr
    r = swanctl(lab, "gA", "--initiate", "--child", "net")
    res = swanctl_initiate.parse(r.stdout, r.stderr, r.returncode)
    assert res.ok, r.stdout + r.stderr
    engine_sas = lab.call("gA", "list_sas")["sas"]
    assert {(s["spi"], s["direction"]) for s in engine_sas} == {
        (int(res.spi_in, 16), "in"), (int(res.spi_out, 16), "out")}
    ping = lab.run("hA", ["ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.10"])
    assert ping.returncode == 0, ping.stdout + ping.stderr
    (ike,) = swanctl_list_sas.parse(swanctl(lab, "gA", "--list-sas").stdout).ike_sas
    (child,) = ike.children
    assert child.packets_out >= 3 and child.packets_in >= 3
    assert child.bytes_in > 0 and child.use_in is not None
    # rekey under traffic: new SAs, the ping still answered
    # (swanctl --rekey only queues the rekey, as 5.9.8's: wait for it and the overlap's end)
    assert swanctl(lab, "gA", "--rekey", "--child", "net").returncode == 0
    wait_until(lambda: len(lab.call("gB", "list_sas")["sas"]) == 2 and len(
        swanctl_list_sas.parse(swanctl(lab, "gA", "--list-sas").stdout).ike_sas[0].children) == 1,
        "the rekey done and the old child gone")
    ping = lab.run("hA", ["ping", "-c", "2", "-i", "0.2", "-W", "2", "203.0.113.10"])
    assert ping.returncode == 0, ping.stdout
    (child2,) = swanctl_list_sas.parse(swanctl(lab, "gA", "--list-sas").stdout).ike_sas[0].children
    assert child2.spi_in != child.spi_in and child2.packets_out >= 2
    assert len(lab.call("gB", "list_sas")["sas"]) == 2
