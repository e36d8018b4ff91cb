"""A child's install crossing the end of its IKE_SA leaves nothing in the engine.

Why: the twin's daemon answers requests concurrently with its own exchanges. When a
CREATE_CHILD_SA (a hard-expiry re-create, a rekey) crossed a DELETE of the IKE_SA, the new
child finished installing after the IKE_SA's children had been removed: its two
associations stayed in the engine, listed by no IKE_SA, and the older outbound one took
all traffic of the next tunnel with the same selectors (the fault matrix's NAT-T row on
the XGS 136 and the lifetime rows on the XGS 3300 failed every healthy run of a CI run
so). The interleaving is made exact here: the engine's ``add_sa`` waits on a gate the
test opens after the IKE_SA went. The engine is an in-memory table (what is under test
is the daemon's bookkeeping; tests/twin_ike/test_rekey_engine.py runs real engines).
"""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from ipsec_hil_twin.ike.children import ChildSAs, IkeSaGone
from ipsec_hil_twin.ike.lifetimes import Lifetimes
from ipsec_hil_twin.ike.model import ChildSA, IkeSA
from ipsec_hil_twin.ike.proto import ChildKeys


class GatedEngine:
    """The engine's add_sa/del_sa/list_sas over a dict; add_sa waits for ``gate``."""

    def __init__(self) -> None:
        self.sas: dict[tuple[int, str], dict] = {}
        self.gate = asyncio.Event()
        self.adding = asyncio.Event()

    async def add_sa(self, sa: dict) -> dict:
        self.adding.set()
        await self.gate.wait()
        self.sas[(sa["spi"], sa["dst"])] = sa
        return {"ok": True}

    async def del_sa(self, spi: int, dst: str) -> dict:
        self.sas.pop((spi, dst), None)
        return {"ok": True}

    async def list_sas(self) -> list[dict]:
        return [{"spi": k[0], "direction": v["direction"]} for k, v in self.sas.items()]


def _daemon() -> SimpleNamespace:
    reqids = SimpleNamespace(give_back=lambda uid: None)
    config = SimpleNamespace(replay_window=lambda: 32, reqids=reqids)
    d = SimpleNamespace(sas={}, hd=SimpleNamespace(engine_sock="/nonexistent"), config=config,
                        log=lambda line: None)
    return d


def _ike(d: SimpleNamespace) -> IkeSA:
    sa = IkeSA(uid=1, conn=SimpleNamespace(name="lab", children={}), initiator=False, spi_i="aa", spi_r="bb",
               local="192.0.2.2", local_port=500, remote="192.0.2.1", remote_port=500, state="ESTABLISHED")
    d.sas[sa.spi_i] = sa
    return sa


def _child(uid: int) -> ChildSA:
    return ChildSA(uid=uid, name="lab", conn="lab", reqid=1, proposal=SimpleNamespace(esn="NO_EXT_SEQ"),
                   cipher="aes-gcm-16", spi_in=0xC0000000 + uid, spi_out=0xC1000000 + uid,
                   local_ts=[], remote_ts=[], rekey_time=0, life_time=0)


KEYS = ChildKeys(enc_ir=b"\1" * 36, auth_ir=None, enc_ri=b"\2" * 36, auth_ri=None)


def _children() -> tuple[ChildSAs, GatedEngine, SimpleNamespace]:
    d = _daemon()
    # the state it reads (sas, config, log, hd); no transport or timers on these paths
    # install draws the child's jittered rekey time (the SAs' soft lifetime) from Lifetimes
    cs = ChildSAs(d, transport=None, lifetimes=Lifetimes(d))  # type: ignore[arg-type]
    cs.engine.close()
    eng = GatedEngine()
    cs.engine = eng  # type: ignore[assignment]
    return cs, eng, d


@pytest.mark.parametrize("outbound", [True, False], ids=["new-child", "rekey-responder"])
def test_install_crossing_a_destroy_leaves_no_association(outbound):
    async def run() -> None:
        cs, eng, d = _children()
        sa, child = _ike(d), _child(7)
        install = asyncio.ensure_future(cs.install(sa, child, KEYS, initiator_of_child=False, outbound=outbound))
        await eng.adding.wait()  # the inbound association is on its way into the engine
        await cs.destroy(sa)  # the IKE_SA ends meanwhile (a DELETE, a timeout, INITIAL_CONTACT)
        eng.gate.set()
        with pytest.raises(IkeSaGone, match="not installed"):
            await install
        assert eng.sas == {}, f"associations left in the engine: {sorted(hex(k[0]) for k in eng.sas)}"
        assert not (child.in_installed or child.out_installed or child.pending_out)

    asyncio.run(run())


def test_outbound_install_crossing_the_childs_removal_leaves_nothing():
    """A rekey responder's outbound association goes in when the old child's DELETE comes;
    when the child is removed while that add is under way, the add is undone."""
    async def run() -> None:
        cs, eng, d = _children()
        sa, child = _ike(d), _child(8)
        eng.gate.set()
        await cs.install(sa, child, KEYS, initiator_of_child=False, outbound=False)
        assert set(eng.sas) == {(child.spi_in, sa.local)} and child.pending_out is not None
        eng.gate.clear()
        eng.adding.clear()
        out = asyncio.ensure_future(cs.install_outbound(child))
        await eng.adding.wait()
        await cs.uninstall(sa, child)
        eng.gate.set()
        await out
        assert eng.sas == {} and not child.out_installed

    asyncio.run(run())


def test_uninstall_all_takes_a_child_added_while_it_runs():
    async def run() -> None:
        cs, eng, d = _children()
        sa = _ike(d)
        eng.gate.set()
        first, late = _child(1), _child(2)
        await cs.install(sa, first, KEYS, initiator_of_child=True)
        sa.children.append(first)
        real_del = eng.del_sa

        async def del_and_race(spi: int, dst: str) -> dict:
            if late not in sa.children and late.spi_in not in {k[0] for k in eng.sas}:
                eng.sas[(late.spi_in, sa.local)] = {"direction": "in"}  # installed just before the DELETE
                late.in_installed = True
                sa.children.append(late)
            return await real_del(spi, dst)

        eng.del_sa = del_and_race  # type: ignore[method-assign]
        await cs.uninstall_all(sa)
        assert sa.children == [] and eng.sas == {}

    asyncio.run(run())


def test_a_going_ike_sa_is_not_alive():
    cs, _eng, d = _children()
    sa = _ike(d)
    assert cs.alive(sa)
    for state in ("DELETING", "DESTROYING"):
        sa.state = state
        assert not cs.alive(sa)
    sa.state = "ESTABLISHED"
    d.sas.clear()
    assert not cs.alive(sa)
