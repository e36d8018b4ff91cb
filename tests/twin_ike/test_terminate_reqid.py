"""`swanctl --terminate` by unique id and with --force, and charon's reqid rule.

5.9.8's terminate.c sends --child-id/--ike-id/--force/--timeout to vici_control.c's
terminate handler, which terminates CHILD_SAs by unique id and answers "missing terminate
selector" / "no matching SAs to terminate found"; the provisioner relies on both.  reqids
follow kernel_interface.c alloc_reqid: one per distinct selector pair, shared by a rekey's
new child, handed back when its last child is gone.
"""
from __future__ import annotations

import pytest

from ipsec_hil.lab.parsers import swanctl_list_sas
from ipsec_hil.lab.parsers._swan import ChildSa
from ipsec_hil_twin.ike.configs import Reqids
from ipsec_hil_twin.ike.pairlab import A4, B4, IkePair, conf

from .test_negotiation import LAN_A4, LAN_B4, initiate, load, module_pair, pair, rekey_settled  # noqa: F401

pytestmark = pytest.mark.needs_root

PORTS = {"p1": 5201, "p2": 5202}


def two_children(pair: IkePair) -> None:
    """One connection, two children that differ only in their TCP port (distinct selectors)."""
    load(pair, "a", conf("lab", A4, B4, {c: (f"{LAN_A4}[tcp]", f"{LAN_B4}[tcp/{p}]") for c, p in PORTS.items()}))
    load(pair, "b", conf("lab", B4, A4, {c: (f"{LAN_B4}[tcp/{p}]", f"{LAN_A4}[tcp]") for c, p in PORTS.items()}))
    for c in PORTS:
        assert initiate(pair, "a", c).ok


def children_of(pair: IkePair, h: str) -> dict[str, ChildSa]:
    r = pair.swanctl(h, "--list-sas")
    assert r.returncode == 0, r.stderr
    return {c.name: c for ike in swanctl_list_sas.parse(r.stdout).ike_sas for c in ike.children}


def test_terminate_by_child_id_ends_only_that_child(pair):
    two_children(pair)
    kids = children_of(pair, "a")
    r = pair.swanctl("a", "--terminate", "--child-id", str(kids["p2"].uniqueid))
    assert r.returncode == 0 and r.stdout.endswith("terminate completed successfully\n"), r.stderr
    assert f"closing CHILD_SA p2{{{kids['p2'].uniqueid}}}" in r.stdout
    assert set(children_of(pair, "a")) == {"p1"} and set(children_of(pair, "b")) == {"p1"}
    spis = {s["spi"] for s in pair.engines["a"].snapshot()}
    assert spis == {int(kids["p1"].spi_in, 16), int(kids["p1"].spi_out, 16)}
    r = pair.swanctl("a", "--terminate", "--child-id", str(kids["p2"].uniqueid))
    assert r.returncode == 1 and r.stderr == "terminate failed: no matching SAs to terminate found\n"


def test_terminate_by_ike_id_and_without_selector(pair):
    two_children(pair)
    r = pair.swanctl("a", "--terminate")
    assert r.returncode == 1 and r.stderr == "terminate failed: missing terminate selector\n"
    r = pair.swanctl("a", "--terminate", "--ike-id", "notanumber")  # atoi: 0, as no id
    assert r.returncode == 1 and r.stderr == "terminate failed: missing terminate selector\n"
    ike = swanctl_list_sas.parse(pair.swanctl("a", "--list-sas").stdout).ike_sas[0]
    r = pair.swanctl("a", "--terminate", "--ike-id", str(ike.uniqueid + 1000))
    assert r.returncode == 1 and r.stderr == "terminate failed: no matching SAs to terminate found\n"
    r = pair.swanctl("a", "--terminate", "--ike-id", str(ike.uniqueid))
    assert r.returncode == 0, r.stderr
    assert pair.engines["a"].snapshot() == [] and pair.engines["b"].snapshot() == []


def test_force_destroys_an_ike_sa_whose_delete_is_never_answered(pair):
    two_children(pair)
    pair.stop_daemon("b")  # the peer is gone: nothing will answer the DELETE
    r = pair.swanctl("a", "--terminate", "--ike", "lab", "--force")
    assert r.returncode == 0 and r.stdout.endswith("terminate completed successfully\n"), r.stderr
    assert "sending DELETE for IKE_SA lab" in r.stdout
    assert "retransmit" not in r.stdout  # destroyed at once, not after the retransmit schedule
    assert pair.engines["a"].snapshot() == []
    assert children_of(pair, "a") == {}


def test_force_with_timeout_waits_then_destroys(pair):
    two_children(pair)
    pair.stop_daemon("b")
    r = pair.swanctl("a", "--terminate", "--ike", "lab", "--force", "--timeout", "30")
    assert r.returncode == 0, r.stderr
    assert "retransmit 1 of request" in r.stdout  # it waited for an answer first
    assert pair.engines["a"].snapshot() == []


def test_reqid_per_distinct_selectors_kept_across_rekey(pair):
    two_children(pair)
    kids = children_of(pair, "a")
    assert kids["p1"].reqid != kids["p2"].reqid
    engine = {s["spi"]: s["reqid"] for s in pair.engines["a"].snapshot()}
    for c in kids.values():  # the engine's associations carry the child's reqid
        assert engine[int(c.spi_in, 16)] == engine[int(c.spi_out, 16)] == c.reqid
    r = pair.swanctl("a", "--rekey", "--child", "p1")
    assert r.returncode == 0, r.stderr
    rekey_settled(pair, 4)
    after = children_of(pair, "a")
    assert after["p1"].uniqueid != kids["p1"].uniqueid and after["p1"].reqid == kids["p1"].reqid
    assert after["p2"].reqid == kids["p2"].reqid


def test_reqids_allocator_follows_charon():
    """kernel_interface.c: equal selectors share, numbers count up, released ones are reused
    oldest first, and a child gives its reqid back only once."""
    r = Reqids()
    a = r.take(1, ["10.0.0.0/24"], ["10.1.0.0/24"])
    b = r.take(2, ["10.0.0.0/24"], ["10.1.0.0/24[tcp/80]"])
    assert (a, b) == (1, 2)
    assert r.take(3, ["10.0.0.0/24"], ["10.1.0.0/24"]) == a  # a rekey's new child
    r.give_back(1)
    r.give_back(1)
    assert r.take(4, ["10.2.0.0/24"], ["10.3.0.0/24"]) == 3  # reqid 1 is still held by child 3
    r.give_back(3)
    r.give_back(2)
    assert r.take(5, ["10.9.0.0/24"], ["10.8.0.0/24"]) == a  # released first, reused first
    assert r.take(6, ["10.0.0.0/24"], ["10.1.0.0/24[tcp/80]"]) == b
