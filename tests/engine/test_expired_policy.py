"""A hard-expired SA whose policy is still installed (issue 42), on the engine alone
(MiniLab: hostA | gwA | gwB | hostB, SAs installed over engine.sock).

FreeBSD frees an SA at its hard lifetime (key.c key_flush_sad) while charon's policy stays
until its DELETE exchange ends; a packet the policy meets meanwhile finds no SA:
ipsec4_allocsa counts ips_out_nosa, ipsec4_perform_request's `bad:` ips_out_inval, and the
packet is freed (netstat -s -p ipsec: discarded-no-sa, discarded-invalid). The engine's
``expire_sa`` is that: the SAs leave setkey -D and sa_count, the policy keeps matching
and counting; ``del_sa`` then takes the policy too (the packet no longer reaches IPsec).
The fault ``expired_drops_uncounted`` frees those packets without counting them.
"""

from __future__ import annotations

import os

import pytest

from tests.lab_factory import minilab_fixture

pytestmark = [pytest.mark.needs_root]

mini = minilab_fixture(name="mini", prefix="te" + os.urandom(2).hex())
HOST_B = "203.0.113.10"


def _ping(lab, count: int):
    return lab.run("hA", ["ping", "-4", "-c", str(count), "-i", "0.05", "-W", "1", HOST_B], timeout=30)


def _no_sa(lab) -> tuple[int, int]:
    ipsec = lab.call("gA", "counters")["ipsec"]
    return ipsec["discarded-no-sa"], ipsec["discarded-invalid"]


def test_expired_sa_policy_counts_no_sa_until_deleted(mini):
    mini.call("gA", "reset")
    mini.call("gB", "reset")
    sas = mini.tunnel("aes-gcm-16", "ipv4")
    out, inn = sas["gA_out"], sas["gA_in"]
    assert _ping(mini, 2).returncode == 0, "healthy tunnel: the pings pass"
    held = mini.call("gA", "counters")["driver"]["sa_count"]
    base = _no_sa(mini)
    assert mini.call("gA", "expire_sa", sas=[{"spi": out["spi"], "dst": out["dst"]},
                                             {"spi": inn["spi"], "dst": inn["dst"]}])["ok"] is True
    listed = {s["spi"] for s in mini.call("gA", "list_sas")["sas"]}
    assert not listed & {out["spi"], inn["spi"]}, "the kernel freed both: setkey -D shows neither"
    assert mini.call("gA", "counters")["driver"]["sa_count"] == held - 2
    r = _ping(mini, 5)
    assert r.returncode != 0, f"no SA: nothing crosses\n{r.stdout}"
    no_sa, invalid = _no_sa(mini)
    assert (no_sa - base[0], invalid - base[1]) == (5, 5), (
        f"5 echoes met the policy with no SA: discarded-no-sa +{no_sa - base[0]}, discarded-invalid +{invalid - base[1]}")
    mini.set_faults("gA", {"expired_drops_uncounted": {}})
    try:
        assert _ping(mini, 3).returncode != 0
        assert _no_sa(mini) == (no_sa, invalid), "the fault frees them without counting"
    finally:
        mini.set_faults("gA", {})
    assert mini.call("gA", "del_sa", spi=out["spi"], dst=out["dst"])["ok"] is True
    r = _ping(mini, 3)
    assert r.returncode != 0
    assert _no_sa(mini) == (no_sa, invalid), "policy gone: the packets no longer reach IPsec, nothing counted there"
