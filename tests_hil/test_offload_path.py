"""Per SA: offloaded or software -- a configuration the model offloads must take the NIC.

Issue 43: FreeBSD 15's inline IPsec offload framework (sys/netipsec/ipsec_offload.c) keeps
an SA in software when the NIC refuses it (mlx5 takes only AES-GCM-16 in transport mode,
with ESN or without a replay window) and sends a packet too large for the MTU through
software: offload can silently not happen, and the tunnel still carries every packet. So
each SA of the tunnel is judged on the path its packets took, on each end whose
configuration the model's profile says is offloaded (measuring.offload.must_offload: the
end runs the offload cipher, its driver takes the outer family and, for NAT-T, UDP
encapsulation):

- with the framework (FreeBSD 15.1): the kernel's own account -- a NIC holds the SA
  (`hw offl if:`) and its `hw offl` packets moved by every packet the SA counted;
- without it (FreeBSD 14): the SA's packets (setkey's lifetime `allocated:`) against the
  driver's counters of its direction, with the kernel's ESP counters still.

The traffic is the local appliance's own pings through the tunnel: each echo and its reply
cross all four SAs of the child once, and nothing else moves the counters.
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.measuring.offload import IDLE, OFFLOAD, must_offload

#: echoes through the tunnel (0.01 s apart: 0.2 s of traffic)
PINGS = 20


@pytest.mark.page("001")
@pytest.mark.tunnels(children="one")
def test_each_sa_takes_the_offload_path(tunnel, record, meter):
    """Every SA of a configuration the profile offloads carried its packets through the NIC."""
    local, remote = tunnel.local, tunnel.remote
    ciphers = {"local": tunnel.local_cipher, "remote": tunnel.remote_cipher}
    verdict = {end: must_offload(tunnel.appliance(end).profile, tunnel.config, ciphers[end])
               for end in ("local", "remote")}
    for end, (_, why) in verdict.items():
        record.figure(f"{tunnel.appliance(end).name}: offloaded?", why)
    judged = [end for end, (must, _) in verdict.items() if must]
    framework = {end: tunnel.appliance(end).offload_framework for end in judged}
    with meter(local, remote, title="the DUT's own pings through the tunnel") as m:
        # the SAs' counts read once the counters have settled, as the ledger's are: read
        # before the settle, a packet still trailing in from the previous test counted in
        # the SA's delta and not in the driver's (a false "software" verdict, 12-06)
        before = {end: tunnel.appliance(end).setkey_sas() for end in judged if not framework[end]}
        r = local.ping(tunnel.inner_address("remote"), size=200, count=PINGS, interval=0.01,
                       source=tunnel.inner_address("local"))
    after = {end: tunnel.appliance(end).setkey_sas() for end in judged if not framework[end]}
    record.figure("echo replies", f"{r.received} of {r.transmitted}")
    assert r.received > 0, f"no echo came back through {tunnel.conn}: nothing to judge the paths by"
    for end in judged:
        name = tunnel.appliance(end).name
        why = verdict[end][1]
        paths = tunnel.sa_paths(end, m.ledger, before.get(end), after.get(end))
        assert paths, f"{name}: none of {tunnel.conn}'s SAs in setkey -D"
        for p in paths:
            record.figure(f"{p.label}: {'FreeBSD 15 hw offl' if framework[end] else 'driver counters'}",
                          f"{p.path}: {p.evidence}")
        moved = [p for p in paths if p.path != IDLE]
        assert {p.way for p in moved} >= {"out", "in"}, (
            f"{name}: the pings moved no SA of {tunnel.conn} in {'both directions' if moved else 'any direction'}: "
            + "; ".join(f"{p.label} {p.evidence}" for p in paths))
        soft = [p for p in moved if p.path != OFFLOAD]
        assert not soft, (
            f"{name}: traffic went through software where the NIC must carry it ({why}): "
            + "; ".join(f"{p.label} {p.evidence}" for p in soft))
