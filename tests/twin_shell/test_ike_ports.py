"""The twin's IKE_SA floats to UDP 4500 under MOBIKE, as strongSwan 5.9.8 does by default.

strongSwan's initiator (src/libcharon/sa/ikev2/tasks/ike_natd.c process_i) switches an
IKE_SA to port 4500 after IKE_SA_INIT when a NAT was detected OR MOBIKE is enabled
(swanctl.conf `mobike = yes`, the default) and the peer supports NAT-T -- "can't be done
later ... because there would be no exchange to actually do the switch". So a real
appliance lists `@ addr[4500]` on both ends (tests/golden/swanctl_list_sas/real-5.9.8.txt)
and sends IKE_AUTH from [4500]; with `mobike = no` and no NAT it stays on 500. The twin's
output must read the same, through the suite's own parsers; the golden file
twin-mobike-4500.txt is this test's capture of the twin (its SPIs and times are checked as
shapes, the rest line for line).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ipsec_hil.lab.parsers import swanctl_initiate, swanctl_list_sas
from ipsec_hil_twin.ike.pairlab import A4, B4, IkePair, conf
from tests.twin_ike.test_negotiation import module_pair, pair  # noqa: F401 (fixtures: daemons reset per test)

pytestmark = pytest.mark.needs_root

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "swanctl_list_sas" / "twin-mobike-4500.txt"
LAN_A4, LAN_B4 = "198.51.100.0/26", "203.0.113.0/26"
#: what differs between two runs of one negotiation: SPIs, seconds, byte/packet counts
_VARYING = re.compile(r"#\d+|\b[0-9a-f]{16}_[ir]\*?|\b[0-9a-f]{8}\b|\b\d+s\b|\b\d+ (bytes|packets)")


def _up(pair: IkePair, name: str, mobike: str | None) -> str:
    """Load NAME on both ends, initiate its child from a; the initiate output."""
    opts = {"mobike": mobike} if mobike else None
    pair.write_conf("a", conf(name, A4, B4, {"net": (LAN_A4, LAN_B4)}, conn_options=opts))
    pair.write_conf("b", conf(name, B4, A4, {"net": (LAN_B4, LAN_A4)}, conn_options=opts))
    for h in "ab":
        r = pair.swanctl(h, "--load-all", "--noprompt")
        assert r.returncode == 0, r.stderr
    r = pair.swanctl("a", "--initiate", "--child", "net")
    res = swanctl_initiate.parse(r.stdout, r.stderr, r.returncode)
    assert res.ok, r.stdout + r.stderr
    return r.stdout


def _ports(pair: IkePair, h: str, name: str) -> tuple[int, int, str]:
    r = pair.swanctl(h, "--list-sas")
    (ike,) = [s for s in swanctl_list_sas.parse(r.stdout).ike_sas if s.name == name]
    return ike.local_port, ike.remote_port, r.stdout


def _net_ports(stdout: str) -> list[tuple[str, str]]:
    """(from port, to port) of each `[NET] sending packet` line, in order."""
    return re.findall(r"\[NET\] sending packet: from \S+\[(\d+)\] to \S+\[(\d+)\]", stdout)


def test_mobike_default_floats_to_4500_both_ends(pair):
    """Default swanctl.conf: IKE_SA_INIT 500 -> 500, every later request 4500 -> 4500 (the
    initiate log), and both ends list the IKE_SA at [4500]."""
    out = _up(pair, "lab", None)
    ports = _net_ports(out)
    assert len(ports) >= 2 and ports[0] == ("500", "500"), out
    assert all(p == ("4500", "4500") for p in ports[1:]), out
    for h in "ab":
        assert _ports(pair, h, "lab")[:2] == (4500, 4500), f"host {h}: {_ports(pair, h, 'lab')[2]}"
    live = _ports(pair, "a", "lab")[2]
    assert _VARYING.sub("#", live) == _VARYING.sub("#", GOLDEN.read_text()), (
        f"the twin's --list-sas left the shape of {GOLDEN.name}:\n{live}")


def test_mobike_no_stays_on_500(pair):
    """`mobike = no` and no NAT: no float, both ends list [500]."""
    _up(pair, "nomob", "no")
    for h in "ab":
        assert _ports(pair, h, "nomob")[:2] == (500, 500), _ports(pair, h, "nomob")[2]
