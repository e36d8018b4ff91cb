"""`encap = yes` on ONE end makes both ends install UDP-encapsulated associations.

strongSwan's encap=yes fakes the NAT_DETECTION_SOURCE_IP hash, so the peer detects a
NAT too (RFC 7296 2.23); the twin carries that as `natd_fake` in IKE_SA_INIT.  The
engines are the recording double of ipsec_hil_twin.ike.pairlab.
"""
from __future__ import annotations

import pytest

from tests.twin_ike.test_negotiation import LAN_A4, LAN_B4, initiate, load, module_pair, pair  # noqa: F401
from ipsec_hil_twin.ike.pairlab import A4, B4, conf

pytestmark = pytest.mark.needs_root


def with_encap(text: str, value: str = "yes") -> str:
    return text.replace("version = 2\n", f"version = 2\n        encap = {value}\n", 1)


@pytest.mark.parametrize("who", ["initiator", "responder", "both", "neither"])
def test_either_ends_encap_puts_both_ends_in_udp(pair, who):  # noqa: F811
    a = conf("lab", A4, B4, {"net": (LAN_A4, LAN_B4)})
    b = conf("lab", B4, A4, {"net": (LAN_B4, LAN_A4)})
    assert "version = 2\n" in a
    load(pair, "a", with_encap(a) if who in ("initiator", "both") else a)
    load(pair, "b", with_encap(b) if who in ("responder", "both") else b)
    assert initiate(pair, "a", "net").ok
    want = who != "neither"
    for h in "ab":
        sas = pair.engines[h].snapshot()
        assert len(sas) == 2 and all(bool(s.get("encap")) is want for s in sas), sas


def test_a_bad_encap_value_discards_the_connection(pair):  # noqa: F811
    pair.write_conf("a", with_encap(conf("lab", A4, B4, {"net": (LAN_A4, LAN_B4)}), "maybe"))
    r = pair.swanctl("a", "--load-all", "--noprompt")
    assert "loading connection 'lab' failed: invalid value for: encap, config discarded" in r.stdout + r.stderr
