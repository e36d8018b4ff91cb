"""Where an initiated child really lives: both ends, the plan's names, paired by SPI.

The situations are the ones real strongSwan 5.9.8 produced in tests/interop: the normal
case (both ends list the child in the plan's IKE_SA), the 002 page's shared identities with
a covering lab connection (the initiator files the child under the lab IKE_SA, the peer
narrows its lab child), a child the peer does not list, and what a teardown leaves.
"""

from __future__ import annotations

from types import SimpleNamespace

from ipsec_hil.lab.parsers._swan import ChildSa, IkeSa, SaList
from ipsec_hil.lab.parsers.swanctl_initiate import InitiateResult, Outcome
from ipsec_hil.lab.provision import verify

CONN, LAB = "hil-many-v4v4-gcm", "hil-npu-v4v4-gcm"


def child(name: str, uid: int, spi_in: str, spi_out: str, state: str = "INSTALLED") -> ChildSa:
    return ChildSa(name=name, uniqueid=uid, reqid=uid, state=state, mode="TUNNEL", encap=True, protocol="ESP",
                   proposal="AES_GCM_16-256", spi_in=spi_in, spi_out=spi_out)


def ike(name: str, *children: ChildSa) -> IkeSa:
    return IkeSa(name=name, uniqueid=1, state="ESTABLISHED", version=2, initiator_spi="0" * 16,
                 responder_spi="1" * 16, initiator=True, local_id="a", local_host="192.0.2.1", local_port=4500,
                 remote_id="b", remote_host="192.0.2.2", remote_port=4500, children=children)


def established(uid: int, spi_in: str, spi_out: str) -> InitiateResult:
    return InitiateResult(Outcome.ESTABLISHED, 0, child_uniqueid=uid, spi_in=spi_in, spi_out=spi_out)


P1, P2 = f"{CONN}-p5201", f"{CONN}-p5202"


def test_both_ends_in_the_plans_connection_count():
    out = established(7, "c1000001", "c2000001")
    init = SaList((ike(CONN, child(P1, 7, "c1000001", "c2000001")),))
    resp = SaList((ike(CONN, child(P1, 3, "c2000001", "c1000001")),))
    p = verify.place(CONN, P1, out, verify.installed_by_spis(init), verify.installed_by_spis(resp))
    assert p.ok and p.problem("dut", "peer") is None


def test_narrowed_into_the_lab_connection_does_not_count_and_names_it():
    """Real charon: initiator lists the planned child in the LAB IKE_SA, the peer lists it as
    the lab's own child -- the SPIs pair them."""
    outs = {P1: established(7, "c1000001", "c2000001"), P2: established(8, "c1000002", "c2000002")}
    init = SaList((ike(LAB, child(f"{LAB}-net", 1, "a0000001", "b0000001"), child(P1, 7, "c1000001", "c2000001"),
                       child(P2, 8, "c1000002", "c2000002")),))
    resp = SaList((ike(LAB, child(f"{LAB}-net", 1, "b0000001", "a0000001"),
                       child(f"{LAB}-net", 4, "c2000001", "c1000001"), child(f"{LAB}-net", 5, "c2000002", "c1000002")),))
    placed = [verify.place(CONN, c, r, verify.installed_by_spis(init), verify.installed_by_spis(resp))
              for c, r in outs.items()]
    assert not any(p.ok for p in placed)
    assert placed[0].problem("dut", "peer") == (f"dut installed it as {P1} in IKE_SA {LAB}; "
                                                f"peer installed it as {LAB}-net in IKE_SA {LAB}")
    assert verify.foreign_connections(placed) == {f"{LAB} (as {LAB}-net)": [P1, P2]}
    assert verify.strays(CONN, outs, init) == [(7, LAB), (8, LAB)]  # the lab's own child is not ours


def test_a_child_the_peer_does_not_list_does_not_count():
    out = established(7, "c1000001", "c2000001")
    init = SaList((ike(CONN, child(P1, 7, "c1000001", "c2000001")),))
    p = verify.place(CONN, P1, out, verify.installed_by_spis(init), {})
    assert not p.ok and p.problem("dut", "peer") == "peer lists no INSTALLED CHILD_SA with its SPIs"
    assert verify.foreign_connections([p]) == {}


def test_a_child_not_installed_does_not_count():
    out = established(7, "c1000001", "c2000001")
    sas = SaList((ike(CONN, child(P1, 7, "c1000001", "c2000001", state="DELETING")),))
    index = verify.installed_by_spis(sas)
    assert verify.place(CONN, P1, out, index, index).initiator is None


def test_strays_are_matched_by_spis_not_by_a_reused_unique_id():
    """After a charon restart unique ids start again: #7 may be someone else's child now."""
    outs = {P1: established(7, "c1000001", "c2000001")}
    init = SaList((ike("resident", child("resident-net", 7, "d0000001", "e0000001")),))
    assert verify.strays(CONN, outs, init) == []


def test_leftovers_name_the_ike_sa_the_planned_children_and_the_negotiated_spis():
    outs = {P1: established(7, "c1000001", "c2000001")}
    sas = SaList((ike(CONN), ike(LAB, child(f"{LAB}-net", 1, "a0000001", "b0000001"),
                                 child(f"{LAB}-net", 4, "c2000001", "c1000001"))))
    left = verify.leftovers(CONN, [P1, P2], verify.negotiated_spis(outs), sas)
    assert left == [f"IKE_SA {CONN} #1 (ESTABLISHED)", f"CHILD_SA {LAB}-net #4 (INSTALLED) in IKE_SA {LAB}"]
    assert verify.leftovers(CONN, [P1], set(), SaList((ike(LAB, child(f"{LAB}-net", 1, "a", "b")),))) == []
    assert verify.negotiated_spis({"x": SimpleNamespace(spi_in=None, spi_out=None)}) == set()


def test_summaries_stay_one_line():
    assert verify.summarize([f"c{i}" for i in range(256)]) == "c0, c1, c2, c3, c4 and 251 more"
    assert verify.summarize(["a", "b"]) == "a, b"
