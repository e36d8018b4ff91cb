"""provision.spd: the policies a bring-up must find on each end, and none after a teardown,
judged on setkey -DP text in FreeBSD's format (the golden files of parsers.setkey_spd)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ipsec_hil.lab.parsers import setkey_spd
from ipsec_hil.lab.provision import spd

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "setkey_spd"
#: the dut's side of fbsd14-v4-tunnel.txt: its LAN 10.77.0.0/24 at 192.0.2.1, the peer's
#: 10.88.0.0/24 at 192.0.2.2, one child with reqid 1
DUT = spd.EndPolicies("dut", "10.77.0.0/24", "10.88.0.0/24", "192.0.2.1", "192.0.2.2")


def dump(name: str = "fbsd14-v4-tunnel", edit=lambda t: t):
    return setkey_spd.parse(edit((GOLDEN / f"{name}.txt").read_text()))


def test_a_tunnels_two_policies_satisfy_its_child():
    assert spd.missing(dump(), DUT, {"hil-x-net": 1}) == []


def test_six_tcp_children_each_have_both_policies():
    d = dump("fbsd14-v4-six-tcp-children")
    assert spd.missing(d, DUT, {f"hil-x-p{5201 + i}": i + 1 for i in range(6)}) == []


def test_a_missing_out_policy_is_named():
    without_out = lambda t: t[: t.index("10.77.0.0/24[any] 10.88.0.0/24[any] any")]
    assert spd.missing(dump(edit=without_out), DUT, {"hil-x-net": 1}) == [
        "dut: no out policy for hil-x-net (reqid 1)"]


def test_a_child_whose_reqid_has_no_policy_is_named():
    assert spd.missing(dump(), DUT, {"hil-x-net": 7}) == [
        "dut: no out policy for hil-x-net (reqid 7)", "dut: no in policy for hil-x-net (reqid 7)"]


def test_wrong_tunnel_endpoints_selectors_and_action_are_each_said():
    swapped = lambda t: t.replace("esp/tunnel/192.0.2.1-192.0.2.2", "esp/tunnel/192.0.2.1-192.0.2.9")
    [why] = spd.missing(dump(edit=swapped), DUT, {"c": 1})
    assert why.startswith("dut: the out policy of c (reqid 1) is wrong: tunnel 192.0.2.1-192.0.2.9, expected")
    narrowed = lambda t: t.replace("10.77.0.0/24[any] 10.88.0.0/24[any] any", "10.77.0.0/25[any] 10.88.0.0/24[any] any")
    [why] = spd.missing(dump(edit=narrowed), DUT, {"c": 1})
    assert "selectors 10.77.0.0/25 -> 10.88.0.0/24, expected 10.77.0.0/24 -> 10.88.0.0/24" in why


def test_the_peers_view_is_the_mirror():
    peer = spd.EndPolicies("peer", "10.88.0.0/24", "10.77.0.0/24", "192.0.2.2", "192.0.2.1")
    # the dut's SPD read as if it were the peer's: both policies point the wrong way
    assert len(spd.missing(dump(), peer, {"c": 1})) == 2


def test_leftovers_after_teardown():
    assert spd.leftovers(dump("no-entries"), DUT) == []
    left = spd.leftovers(dump(), DUT)
    assert len(left) == 2 and all(x.startswith("dut: 10.") for x in left)
    # another tunnel's policy (other outer addresses) is not ours to report
    other = lambda t: t.replace("192.0.2.2", "192.0.2.50")
    assert spd.leftovers(dump(edit=other), DUT) == []


@dataclass
class _Child:
    name: str
    reqid: int
    state: str


@dataclass
class _Ike:
    name: str


class _Sas:
    def __init__(self, rows):
        self.rows = rows

    def children(self):
        return [(_Ike(conn), _Child(name, reqid, state)) for conn, name, reqid, state in self.rows]


def test_child_reqids_only_of_the_plans_installed_children_in_its_connection():
    sas = _Sas([("hil-x", "hil-x-net", 3, "INSTALLED"), ("other", "hil-x-net", 4, "INSTALLED"),
                ("hil-x", "hil-x-p5201", 5, "INSTALLING"), ("hil-x", "stranger", 6, "INSTALLED")])
    assert spd.child_reqids(sas, "hil-x", ["hil-x-net", "hil-x-p5201"]) == {"hil-x-net": 3}
