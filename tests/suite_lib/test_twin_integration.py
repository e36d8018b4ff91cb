"""The suite library against the virtual lab, exactly as against hardware (SSH, tcsh, files).

One lab for the module (``python -m ipsec_hil_twin up``, a unique prefix, torn down after); the
library is driven through its public API only: Appliance over SshHost, TunnelProvisioner
with files.Transaction, settle/Ledger/expect_*, iperf_run.
"""

from __future__ import annotations

import secrets
import time

import pytest

from ipsec_hil.lab.errors import ProvisionError
from ipsec_hil.lab.measuring.measure import Ledger, collect_checks, expect_equal, expect_zero, settle
from ipsec_hil.lab.provision import CONF_DIR, SWANCTL_CONF, Secret, TunnelPlan, TunnelProvisioner
from ipsec_hil.lab.remote import host_from_mgmt
from ipsec_hil.lab.topology import TunnelConfig
from ipsec_hil.lab.traffic.bench import iperf_run
from tests.lab_factory import VIRTUAL_TOPOLOGY, TestLab, lab_fixture

pytestmark = pytest.mark.needs_root


# the appliances on three releases (issue 43): the DUT on FreeBSD 15.1 (IPSEC_OFFLOAD), the
# peer on 14.3, the XGS 136 on 14.1 -- the library must read each as it reads hardware
lab = lab_fixture(topology=VIRTUAL_TOPOLOGY.with_name("virtual-releases.yaml"))


def _swanctl_state(lab: TestLab, host: str) -> dict[str, bytes]:
    root = lab.root(host)
    out = {}
    for p in [root / SWANCTL_CONF.lstrip("/"), *sorted((root / CONF_DIR.lstrip("/")).glob("*"))]:
        if p.exists():
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_appliance_answers_typed(lab):
    dut = lab.apps["dut3300"]
    k = dut.kernel_version()
    assert k.osrelease and k.version.startswith("FreeBSD")
    assert (k.release.version, k.release.has_ipsec_offload) == ("15.1", True)
    assert lab.apps["peer3300"].kernel_version().release.version == "14.3"
    wan = dut.interface("wan10g")
    assert [a.address for a in wan.inet] == ["192.0.2.1"] and wan.mtu == 1500
    t0 = time.monotonic()
    snap = dut.snapshot()
    assert set(snap.counters) == set(dut.profile.counters)
    assert dut.last_read is not None and dut.last_read[1] is snap and dut.last_read[0] >= t0  # settle's start
    assert "received-packets" in snap.esp
    from ipsec_hil.lab.live_lab import hardware_info

    hw = hardware_info(dut)
    assert (hw.model, hw.driver, hw.module_loaded) == ("xgs3300", "octep", True)
    assert len(hw.module_md5 or "") == 32 and hw.module_size and hw.module_size > 0
    old = dut.sysctl_get("net.inet.ipsec.dfbit")["net.inet.ipsec.dfbit"]
    try:
        assert dut.sysctl_set("net.inet.ipsec.dfbit", 1) == (old, 1)
        assert dut.sysctl_get("net.inet.ipsec.dfbit") == {"net.inet.ipsec.dfbit": 1}
    finally:
        dut.sysctl_set("net.inet.ipsec.dfbit", old)


def test_a_profile_oid_the_appliance_lacks_is_named_by_the_snapshot(lab):
    """The snapshot's sysctl stderr comes back in its own section (a command substitution,
    not a temporary file): an OID the appliance does not know stops the read naming it and
    its counter, while the known ones were printed on stdout as usual."""
    import dataclasses

    from ipsec_hil.lab.appliance import Appliance
    from ipsec_hil.lab.errors import ProfileError

    dut = lab.apps["dut3300"]
    counters = {**dict(dut.profile.counters), "made_up": "dev.octep.0.ipsec.no_such_counter"}
    wrong = Appliance(dut.name, dut.host, dataclasses.replace(dut.profile, counters=counters))
    with pytest.raises(ProfileError, match=r"does not know dev\.octep\.0\.ipsec\.no_such_counter \(made_up\)"):
        wrong.snapshot()
    assert set(dut.snapshot().counters) == set(dut.profile.counters)


def test_lab_tunnel_up_measured_and_restored(lab):
    apps, topo = lab.apps, lab.topo
    dut, peer = apps["dut3300"], apps["peer3300"]
    before_files = {h: _swanctl_state(lab, h) for h in ("dut3300", "peer3300")}
    plan = TunnelPlan.from_topology(topo, "lab")
    prov = TunnelProvisioner(apps, plan, TunnelConfig("ipv4", "ipv4", "aes-gcm-16"), Secret(secrets.token_hex(16)),
                             run_id="suite-lib-test")
    with prov as bu:
        assert bu.all_up and bu.children_up == 1
        (ike,) = bu.sas["dut3300"].ike_sas
        assert ike.name == "hil-lab-v4v4-gcm" and ike.children[0].state == "INSTALLED"
        before = [settle(dut, interval=0.3), settle(peer, interval=0.3)]
        r = iperf_run(dut, peer, "198.51.100.65", seconds=2, streams=1, bind="198.51.100.1", port=5311)
        assert r.error is None and r.sent_bps > 1e6
        after = [settle(dut, interval=0.3), settle(peer, interval=0.3)]
        # the DUT's FreeBSD 15.1 kernel shows each offloaded SA's interface and hw offl
        # counts (pfkey_dump.c); the peer's 14.3 has no such lines
        sad = dut.setkey_sas()
        assert len(sad.entries) == 2 and all(e.hw_offload_ifs == ("wan10g",) for e in sad.entries)
        assert min(e.hw_offload_packets or 0 for e in sad.entries) > 1000
        assert all(e.sw_offload_packets is None for e in peer.setkey_sas().entries)
        lg = Ledger.from_snapshots(before, after, "lab tunnel, one stream up")
        with collect_checks() as checks:
            n = expect_equal(lg, "dut3300:tx_encrypt", "dut3300:FROM_KN_TO_IPSEC_ENCR", "tx_encrypt = FROM_KN_TO_IPSEC_ENCR")
            expect_equal(lg, "dut3300:tx_encrypt", "peer3300:esp.received-packets", "the peer's ESP input exactly")
            expect_zero(lg, ["rx_bad", "esp.dropped-bad-auth"], "authentication drops 0")
        assert n > 1000 and all(c.held for c in checks)
    assert {h: _swanctl_state(lab, h) for h in ("dut3300", "peer3300")} == before_files
    journals = [p for h in ("dut3300", "peer3300")
                for p in (lab.root(h) / "var/db/ipsec-hil/journal").glob("*.json")]
    assert journals == []
    assert not dut.list_sas().ike_sas
    assert any("restored" in line for line in prov.log) and not any("Secret(" in l for l in prov.log)


def test_children_not_all_up_stops_with_the_child_named(lab):
    apps, topo = lab.apps, lab.topo
    before_files = _swanctl_state(lab, "xgs136")
    r = lab.twin("fault", "peer3300", "child_never_up", "child=hil-many-v4v4-gcm-p5203")
    assert r.returncode == 0, r.stderr
    try:
        plan = TunnelPlan.from_topology(topo, "many")
        psk = secrets.token_hex(16)
        prov = TunnelProvisioner(apps, plan, TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 6), psk,
                                 run_id="suite-lib-test", initiate_timeout=10)
        with pytest.raises(ProvisionError) as ei:
            prov.up()
        msg = str(ei.value)
        assert "5 of 6 children established" in msg and "child hil-many-v4v4-gcm-p5203: " in msg
        assert psk not in msg and psk not in repr(prov)
    finally:
        lab.twin("fault", "peer3300", "child_never_up", "--off")
    assert _swanctl_state(lab, "xgs136") == before_files


def test_inner_v6_prerequisites_and_both_size_limits(lab):
    """The 000 page through the library: route + IPv6-speaking port, the appliance's own limit
    (exact ESP arithmetic: EMSGSIZE above it) and the forwarded gate (PTB at path MTU - 117)."""
    from ipsec_hil.lab.expectations import esp_math
    from ipsec_hil.lab.traffic.bench import BenchHost

    apps, topo = lab.apps, lab.topo
    dut = apps["dut3300"]
    bench = BenchHost("bench", host_from_mgmt("bench", topo.hosts["bench"].mgmt, None))
    plan = TunnelPlan.from_topology(topo, "lab")
    cfg = TunnelConfig("ipv4", "ipv6", "aes-gcm-16")
    peer_lan = "fd00:b::1"  # peer3300.lan in topologies/virtual.yaml
    prov = TunnelProvisioner(apps, plan, cfg, Secret(secrets.token_hex(16)), run_id="suite-lib-test")
    with prov as bu:
        assert bu.all_up
        assert "dut3300: route -6 add -net fd00:b::/64 2001:db8:1::2" in prov.log  # the peer's address on wan10g
        assert "peer3300: route -6 add -net fd00:a::/64 2001:db8:1::1" in prov.log
        own = esp_math.ping_data_for_inner(esp_math.max_inner(cfg.cipher, cfg.outer, 1500), "ipv6")
        ok = dut.ping(peer_lan, size=own, count=2, dont_fragment=True, timeout=4)
        too_big = dut.ping(peer_lan, size=own + 1, count=1, dont_fragment=True, timeout=3)
        assert (ok.received, too_big.received, too_big.emsgsize_count) == (2, 0, 1)
        gate = esp_math.forwarded_ipv6_limit(1500, cfg.outer)
        data = esp_math.ping_data_for_inner(gate, "ipv6")
        fits = bench.probe("pmtu", dst=peer_lan, size=data, src="fd00:a::10", iface="a_lan", via="fd00:a::1")
        over = bench.probe("pmtu", dst=peer_lan, size=data + 1, src="fd00:a::10", iface="a_lan", via="fd00:a::1")
        assert fits["reply"] and fits["ptb_count"] == 0
        assert not over["reply"] and over["ptb_mtu"] == gate == 1383
    assert "dut3300: route fd00:b::/64 via 2001:db8:1::2 removed" in prov.log


def _echoes(pcap: bytes, a: str, b: str) -> list[tuple[str, str]]:
    from ipsec_hil.lab.traffic.capture import packets

    return [(p.src, p.dst) for p in packets(pcap) if p.proto == 1 and {p.src, p.dst} == {a, b}]


def test_wire_capture_stops_when_tcpdump_says_it_has_caught_up(lab):
    """On a port, tcpdump's own counts prove every packet is written (issue 15: no quiet
    wait); the capture holds every echo and reply, and its files are gone after."""
    from ipsec_hil.lab.traffic.capture import WireCapture

    dut = lab.apps["dut3300"]
    with WireCapture(dut.host, "wan10g", bpf="icmp") as cap:
        r = dut.ping("192.0.2.2", count=20, interval=0.01)
    assert r.received == 20, r
    got = _echoes(cap.pcap, "192.0.2.1", "192.0.2.2")
    assert got.count(("192.0.2.1", "192.0.2.2")) == 20 and got.count(("192.0.2.2", "192.0.2.1")) == 20, got
    assert cap.counts is not None and cap.counts.caught_up and cap.counts.captured == 40, cap.counts
    assert not dut.host.exists(cap.path) and not dut.host.exists(cap.path + ".log")


def test_wire_capture_on_loopback_waits_for_a_quiet_file_instead(lab):
    """On Linux's lo every packet passes the filter twice, so tcpdump's counts never
    prove it has caught up: the stop falls back to the quiet file and still loses nothing."""
    from ipsec_hil.lab.traffic.capture import WireCapture

    dut = lab.apps["dut3300"]
    with WireCapture(dut.host, "lo", bpf="icmp") as cap:
        r = dut.ping("127.0.0.1", count=10, interval=0.01)
    assert r.received == 10, r
    got = _echoes(cap.pcap, "127.0.0.1", "127.0.0.1")
    assert len(got) == 20, got
    assert cap.counts is not None and not cap.counts.caught_up, cap.counts
