"""Teardown's proof that a tunnel is gone: the initiator read once, the responder until clean.

Fake appliances answer ``list_sas`` from a script of listings (the parsers' own SaList
types); what is asserted is the decision: success once both are clean, an error at once
when the initiator still lists something (waiting cannot fix that), an error naming the
leftovers when the responder is still not clean at the bound.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from ipsec_hil.lab.errors import ProvisionError
from ipsec_hil.lab.parsers._swan import SaList
from ipsec_hil.lab.provision import terminate

from .test_verify import CONN, P1, child, established, ike


class _Host:
    """Records the commands run; a forced terminate empties the owner's listing."""

    def __init__(self, app: "_App", clears: bool) -> None:
        self.app, self.clears, self.argvs = app, clears, []

    def run(self, argv, timeout):
        self.argvs.append(argv if isinstance(argv, str) else " ".join(map(str, argv)))
        if self.clears and "--force" in argv:
            self.app.listings = [GONE]
            self.app.reads = 0

        class _R:
            status = 0
        return _R()


class _App:
    def __init__(self, name: str, listings: list[SaList], clears: bool = True) -> None:
        self.name, self.listings, self.reads = name, listings, 0
        self.host = _Host(self, clears)

    def list_sas(self) -> SaList:
        self.reads += 1
        return self.listings[min(self.reads, len(self.listings)) - 1]


UP = SaList((ike(CONN, child(P1, 3, "c2000001", "c1000001")),))
GONE = SaList(())
INITIATED = {P1: established(7, "c1000001", "c2000001")}


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    monkeypatch.setattr(terminate, "GONE_POLL_S", 0.01)


def test_the_responder_is_read_until_its_half_is_gone():
    init, resp = _App("dut", [GONE]), _App("peer", [UP, UP, GONE])
    assert terminate.check_gone(init, resp, CONN, [P1], INITIATED) == f"no SA of {CONN} left on dut or peer"
    assert (init.reads, resp.reads) == (1, 3)


def test_what_the_initiator_still_lists_fails_at_once():
    init, resp = _App("dut", [UP]), _App("peer", [UP])
    with pytest.raises(ProvisionError, match=f"{CONN} not terminated: dut still lists IKE_SA {CONN}"):
        terminate.check_gone(init, resp, CONN, [P1], INITIATED)
    assert resp.reads == 1


def test_a_responder_that_keeps_its_half_fails_at_the_bound(monkeypatch):
    monkeypatch.setattr(terminate, "bound_s", lambda n: 0.05)
    init, resp = _App("dut", [GONE]), _App("peer", [UP], clears=False)
    with pytest.raises(ProvisionError, match=f"peer still lists IKE_SA {CONN} #1 \\(ESTABLISHED\\), CHILD_SA {P1}"):
        terminate.check_gone(init, resp, CONN, [P1], INITIATED)
    assert resp.reads > 1


def test_a_half_left_on_the_responder_is_forced_there_and_named(monkeypatch):
    """The initiator destroyed its IKE_SA without a DELETE: the responder's half would take
    the next tunnel's traffic, so teardown ends it there -- and still fails, saying so."""
    monkeypatch.setattr(terminate, "bound_s", lambda n: 0.05)
    init, resp = _App("dut", [GONE]), _App("peer", [UP])
    with pytest.raises(ProvisionError, match=f"terminated on peer by force: IKE_SA {CONN} \\(status 0\\); now clean"):
        terminate.check_gone(init, resp, CONN, [P1], INITIATED)
    assert any(a.startswith(f"swanctl --terminate --ike {CONN} --force") for a in resp.host.argvs), resp.host.argvs
    assert not init.host.argvs, "the initiator's listing was clean: nothing is run there"


def test_a_half_the_force_cannot_end_is_named_as_left(monkeypatch):
    monkeypatch.setattr(terminate, "bound_s", lambda n: 0.05)
    init, resp = _App("dut", [GONE]), _App("peer", [UP], clears=False)
    with pytest.raises(ProvisionError, match=f"it still lists IKE_SA {CONN} #1"):
        terminate.check_gone(init, resp, CONN, [P1], INITIATED)


def test_a_half_nobody_deletes_ends_the_wait_long_before_the_bound(monkeypatch):
    """ESTABLISHED and unchanged on the responder while the initiator is clean: the DELETE
    never reached it or was never taken (a lost rekey, a rebooted initiator); its own timers
    end it, not this wait. After STALLED_S the half is forced and named, as at the bound."""
    monkeypatch.setattr(terminate, "STALLED_S", 0.05)
    init, resp = _App("dut", [GONE]), _App("peer", [UP])
    t0 = time.monotonic()
    with pytest.raises(ProvisionError, match=f"peer still lists IKE_SA {CONN} #1 \\(ESTABLISHED\\).*by force"):
        terminate.check_gone(init, resp, CONN, [P1], INITIATED)
    assert time.monotonic() - t0 < terminate.bound_s(1) / 2  # not the 15.5 s bound
    assert any("--force" in a for a in resp.host.argvs)


def test_a_half_being_deleted_is_waited_for_however_still_its_listing(monkeypatch):
    """DELETING: the responder took the DELETE and is uninstalling (one child after another
    on the twin, all at once on charon); an unchanged listing is no stall then."""
    monkeypatch.setattr(terminate, "STALLED_S", 0.02)
    going = SaList((dataclasses.replace(ike(CONN, child(P1, 3, "c2000001", "c1000001")), state="DELETING"),))
    init, resp = _App("dut", [GONE]), _App("peer", [going] * 30 + [GONE])
    assert terminate.check_gone(init, resp, CONN, [P1], INITIATED) == f"no SA of {CONN} left on dut or peer"
    assert resp.reads == 31
