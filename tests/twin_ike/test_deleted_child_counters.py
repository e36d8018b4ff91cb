"""A child listed while it is being deleted shows what it carried, as charon does.

Why: charon keeps a CHILD_SA's last usestats when the kernel no longer has its SAs
(child_sa.c update_usebytes), so `swanctl --list-sas` shows a DELETING child -- one whose
hard expiry removed its associations and whose DELETE is under way -- with the counters it
had. The twin listed zeros there until a CI run's life_time test, reading a child's last
listing, took a child that had carried the stream for one that carried nothing. The engine
is an in-memory table (tests/twin_ike/test_install_races.py's); what is under test is
the daemon's bookkeeping.
"""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from ipsec_hil_twin.ike.children import _child_entry

from .test_install_races import KEYS, _child, _children, _ike


def test_a_childs_counters_stay_listed_after_its_associations_left_the_engine():
    async def run() -> dict:
        cs, eng, d = _children()
        sa, child = _ike(d), _child(9)
        eng.gate.set()
        await cs.install(sa, child, KEYS, initiator_of_child=True)
        carried = {"in": 257, "out": 243}

        async def list_sas() -> list[dict]:  # the engine's listing, with what each SA carried
            return [{"spi": k[0], "direction": v["direction"], "packets": carried[v["direction"]],
                     "bytes": 100 * carried[v["direction"]]} for k, v in eng.sas.items()]

        eng.list_sas = list_sas  # type: ignore[method-assign]
        child.state = "DELETING"  # the hard expiry: associations out first, then DELETE
        await cs.uninstall(sa, child)
        assert eng.sas == {} and not (child.in_installed or child.out_installed)
        child.proposal = SimpleNamespace(encr="AES_GCM_16", keysize=256, integ=None, esn="NO_EXT_SEQ",
                                         listing=lambda: "AES_GCM_16_256")
        return _child_entry(child, {}, time.monotonic(), int(time.monotonic()))

    entry = asyncio.run(run())
    assert (entry["state"], entry["packets_in"], entry["packets_out"]) == ("DELETING", 257, 243), entry
    assert (entry["bytes_in"], entry["bytes_out"]) == (25700, 24300), entry
