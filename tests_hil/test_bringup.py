"""Bring-up: every child established, and the engines hold what the pages counted.

Pages 001 ("the 136's associations read inet6 on the engine ... GCM (alg 20) and CBC
(alg 12)") and 002 ("6 of 6 established, 12 associations in its engine").
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.measuring.measure import expect_at_least

pytestmark = [pytest.mark.page("001")]

#: setkey's algorithm names per cipher (what `setkey -D` prints on FreeBSD 14:
#: lib/libipsec/pfkey_dump.c str_alg_enc names SADB_X_EALG_AESCBC "aes-cbc").
SETKEY_ALG = {"aes-gcm-16": ("aes-gcm-16", None), "aes-cbc-hmac-sha256": ("aes-cbc", "hmac-sha2-256")}


@pytest.mark.tunnels()
def test_all_children_established(tunnel, record):
    """N of N children established; both ends list every child INSTALLED."""
    bu = tunnel.bringup
    record.figure("children established", f"{bu.children_up} of {bu.children_total}")
    expect_at_least(bu.children_up, bu.children_total, "children established (002 page: a run whose "
                    "children do not all come up stops there)")
    for app in (tunnel.local, tunnel.remote):
        sas = app.list_sas()
        installed = {c.name for ike in sas.ike_sas for c in ike.children if c.state == "INSTALLED"}
        missing = sorted({c.name for c in tunnel.children} - installed)
        assert not missing, f"{app.name}: children not INSTALLED in swanctl --list-sas: {missing}"


@pytest.mark.tunnels()
def test_engine_holds_two_associations_per_child(tunnel, record):
    """The engine holds two associations per child, of the outer family and the cipher's algorithm."""
    kids = len(tunnel.children)
    fam_counter = "sa_inet6" if tunnel.config.outer == "ipv6" else "sa_inet"
    enc, auth = SETKEY_ALG[tunnel.config.cipher]
    for end in ("local", "remote"):
        app = tunnel.appliance(end)
        offloaded = tunnel.offloaded(end)
        snap = app.snapshot()
        mine = tunnel.spis(app)
        keyed = [sa for sa in app.setkey_sas().entries if sa.spi in mine]
        record.figure(f"{app.name}: associations of {tunnel.conn} (setkey -D)", len(keyed))
        assert len(keyed) == 2 * kids, (
            f"{app.name}: {len(keyed)} associations of {tunnel.conn} in setkey -D, expected {2 * kids} "
            f"(two per child, {kids} children)")
        for sa in keyed:
            assert sa.enc_alg == enc, f"{app.name}: SA {sa.spi:#x} encrypts with {sa.enc_alg}, expected {enc}"
            assert sa.auth_alg == auth, f"{app.name}: SA {sa.spi:#x} authenticates with {sa.auth_alg}, expected {auth}"
        if offloaded:
            record.figure(f"{app.name}: associations in the engine", snap.counters["sa_count"])
            assert snap.counters["sa_count"] >= 2 * kids, (
                f"{app.name}: the engine holds {snap.counters['sa_count']} associations, "
                f"expected at least {2 * kids} ({kids} children x 2)")
            assert snap.counters[fam_counter] >= 2 * kids, (
                f"{app.name}: {fam_counter} = {snap.counters[fam_counter]}, expected at least {2 * kids} "
                f"(outer {tunnel.config.outer})")

