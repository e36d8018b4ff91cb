"""CHILD_SAs: building them, installing their two associations into the ESP engine,
closing them (DELETE), terminate, and the per-SA listing swanctl prints.

Why one place: both roles end a successful CREATE_CHILD_SA the same way (a ChildSA from
the chosen proposal, inbound association first, then outbound), and every way a child
ends -- DELETE sent or received, INITIAL_CONTACT, a reboot -- removes the same two
associations from the engine.
"""
from __future__ import annotations

import asyncio
import secrets as _secrets
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

from . import proto
from .conf import Child
from .engine_client import EngineClient, EngineError
from .lifetimes import Lifetimes
from .model import ChildSA, Failed, IkeSA, Log, ike_port, ts_text
from .proposals import Combo
from .state import IkeState
from .transport import Transport
from .ts import TS


@dataclass(frozen=True)
class TerminateSelector:
    """What `swanctl --terminate` names (vici's terminate request): names, unique ids
    (0 = not given, as vici's get_int default), --force and --timeout in seconds."""
    child: str | None = None
    ike: str | None = None
    child_id: int = 0
    ike_id: int = 0
    force: bool = False
    timeout: float | None = None

    @classmethod
    def of(cls, req: dict[str, Any]) -> "TerminateSelector":
        """From the control socket's terminate request (ValueError naming a bad id field)."""
        ids = {}
        for field in ("child_id", "ike_id"):
            raw = req.get(field) or 0
            try:
                ids[field] = int(raw)
            except (TypeError, ValueError):
                raise ValueError(f"terminate: {field}: expected a number, found {raw!r}") from None
        return cls(child=req.get("child") or None, ike=req.get("ike") or None, force=bool(req.get("force")),
                   timeout=float(req["timeout"]) if req.get("timeout") else None, **ids)

    def any(self) -> bool:
        return bool(self.child or self.ike or self.child_id or self.ike_id)


class IkeSaGone(EngineError):
    """The IKE_SA was deleted or destroyed while one of its children was being installed:
    what had gone into the engine is out again (an EngineError: the install failed)."""


#: IKE_SA states in which no child may be installed any more
GOING_IKE_STATES = ("DELETING", "DESTROYING")


class ChildSAs:
    def __init__(self, state: IkeState, transport: Transport, lifetimes: Lifetimes) -> None:
        self.state = state
        self.transport = transport
        self.lifetimes = lifetimes
        self.engine = EngineClient(state.hd.engine_sock)

    def alive(self, sa: IkeSA) -> bool:
        """Whether children may still be installed on `sa`: it is the daemon's and not going.

        Why: requests are handled concurrently with this end's own exchanges. A child whose
        CREATE_CHILD_SA crossed a DELETE of its IKE_SA (a hard-expiry re-create or a rekey at
        teardown) finished installing after the IKE_SA's children had been removed, and its
        two associations stayed in the engine with no IKE_SA listing them -- the older
        outbound one then carried, into nothing, all traffic of the next tunnel with the same
        selectors (the fault matrix's NAT-T and lifetime rows once failed every run so)."""
        return sa.state not in GOING_IKE_STATES and self.state.sas.get(sa.spi_i) is sa

    # ------------------------------------------------------------ building
    def new_spi(self) -> int:
        used = {c.spi_in for s in self.state.sas.values() for c in s.children}
        while True:
            spi = _secrets.randbelow(0xFFFFFFFF - 0x100) + 0x100
            spi |= 0xC0000000  # strongSwan's SPIs start with c (kernel allocator range)
            if spi not in used:
                return spi

    def new(self, sa: IkeSA, cfg: Child, uid: int, chosen: Combo, cipher: str, spi_in: int,
            spi_out: int, local_ts: list[TS], remote_ts: list[TS]) -> ChildSA:
        """The ChildSA a CREATE_CHILD_SA (or IKE_AUTH) agreed on, not yet installed."""
        config = self.state.config
        return ChildSA(uid=uid, name=cfg.name, conn=sa.conn.name,
                       reqid=config.reqids.take(uid, [str(t) for t in local_ts], [str(t) for t in remote_ts]),
                       proposal=chosen, cipher=cipher,
                       spi_in=spi_in, spi_out=spi_out, local_ts=local_ts, remote_ts=remote_ts,
                       rekey_time=cfg.rekey_time, life_time=cfg.life_time, rand_time=cfg.rand_time,
                       offload=config.offload_for(sa.conn.name))

    def established(self, sa: IkeSA, child: ChildSA, old: ChildSA | None) -> str:
        """Record an installed child on its IKE_SA and schedule its soft and hard expiry;
        the child it rekeys is REKEYED now (its soft expiry is moot)."""
        sa.children.append(child)
        self.lifetimes.arm_child(child)
        if old is not None:
            old.state = "REKEYED"
            old.rekeyed_to = child
        return child.established_line()

    # ------------------------------------------------------------ engine
    async def install(self, sa: IkeSA, child: ChildSA, keys: proto.ChildKeys, initiator_of_child: bool,
                      outbound: bool = True) -> None:
        """Both associations of a child; the inbound one first, as the kernel would.

        outbound=False (the responder of a rekey): the outbound association is only
        registered; install_outbound() adds it when the old child's DELETE arrives."""
        enc_in, auth_in = (keys.enc_ri, keys.auth_ri) if initiator_of_child else (keys.enc_ir, keys.auth_ir)
        enc_out, auth_out = (keys.enc_ir, keys.auth_ir) if initiator_of_child else (keys.enc_ri, keys.auth_ri)
        common = {"cipher": child.cipher, "reqid": child.reqid, "child": child.name, "conn": child.conn,
                  "local_ts": [str(t) for t in child.local_ts], "remote_ts": [str(t) for t in child.remote_ts],
                  "replay_window": self._replay_window(sa, child), "offload": child.offload,
                  "encap": sa.encap, "esn": child.proposal.esn == "EXT_SEQ",
                  "life_time": max(0, child.life_time)}
        # kernel_pfkey add_sa: soft = the jittered rekey time; child_sa.c install zeroes it on
        # the outbound SA when the child has no jitter ("avoid triggering multiple rekey events")
        soft = self.lifetimes.child_rekey(child)
        sa_in = {"soft_time": soft, "spi": child.spi_in, "direction": "in", "src": sa.remote, "dst": sa.local,
                 "enc_key": enc_in.hex(), "auth_key": auth_in.hex() if auth_in else None, **common}
        sa_out = {"soft_time": soft if child.rand_time > 0 else 0,
                  "spi": child.spi_out, "direction": "out", "src": sa.local, "dst": sa.remote,
                  "enc_key": enc_out.hex(), "auth_key": auth_out.hex() if auth_out else None, **common}
        await self.engine.add_sa(sa_in)
        child.in_installed = True
        child.pending_out = sa_out
        if outbound:
            try:
                await self.install_outbound(child)
            except EngineError:
                await self._del(child.spi_in, sa.local)
                child.in_installed = False
                raise
        if not self.alive(sa):
            await self.uninstall(sa, child)
            raise IkeSaGone(f"IKE_SA {sa.name}[{sa.uid}] is {sa.state}: CHILD_SA {child.name}{{{child.uid}}} "
                            f"not installed (its associations removed again)")

    async def install_outbound(self, child: ChildSA) -> None:
        """The registered outbound association into the engine (traffic may use it now)."""
        if child.pending_out is None:
            return
        pending = child.pending_out
        await self.engine.add_sa(pending)
        if child.pending_out is not pending:  # uninstalled meanwhile: it must not stay behind
            await self._del(int(pending["spi"]), str(pending["dst"]))
            return
        child.pending_out, child.out_installed = None, True

    def _replay_window(self, sa: IkeSA, child: ChildSA) -> int:
        """The child's swanctl.conf `replay_window`, else the host's default."""
        cfg = sa.conn.children.get(child.name)
        if cfg is not None and cfg.replay_window is not None:
            return cfg.replay_window
        return self.state.config.replay_window()

    async def _del(self, spi: int, dst: str) -> None:
        try:
            await self.engine.del_sa(spi, dst)
        except EngineError as exc:
            self.state.log(f"engine del_sa {spi:08x}: {exc}")

    async def _engine_sas(self) -> list[dict[str, Any]]:
        try:
            return await self.engine.list_sas()
        except EngineError as exc:
            self.state.log(f"engine list_sas: {exc}")
            return []

    @staticmethod
    def _entry(sas: list[dict[str, Any]], spi: int, direction: str) -> dict[str, Any]:
        return next((s for s in sas if s["spi"] == spi and s["direction"] == direction), {})

    async def remove(self, sa: IkeSA, child: ChildSA, direction: str,
                     listing: list[dict[str, Any]] | None = None) -> dict:
        """One association of a child out of the engine; returns and keeps on the child the
        engine's last reading of its counters (from ``listing`` when the caller read the
        engine once for several removals)."""
        spi, dst = (child.spi_in, sa.local) if direction == "in" else (child.spi_out, sa.remote)
        last = self._entry(await self._engine_sas() if listing is None else listing, spi, direction)
        if last:
            child.last_counters[direction] = last
        await self._del(spi, dst)
        if direction == "in":
            child.in_installed = False
        else:
            child.out_installed = False
        return last

    async def hard_expire(self, sa: IkeSA, child: ChildSA) -> None:
        """The kernel's side of a hard expiry, before charon acts (:func:`hard_expire`)."""
        await hard_expire(self, sa, child)

    async def uninstall(self, sa: IkeSA, child: ChildSA) -> None:
        """Whatever of the child's two associations is still in the engine, out of it.

        The counters they had stay on the child (one engine listing for both), as charon
        keeps a child's last usestats when the kernel no longer has its SAs (child_sa.c
        update_usebytes): a child still listed while it is deleted -- DELETING after its
        hard expiry -- shows what it carried, not zeros (it showed zeros until a test
        reading the last listing took that for a child that carried nothing)."""
        child.pending_out = None
        live = [d for d, installed in (("in", child.in_installed), ("out", child.out_installed)) if installed]
        listing = await self._engine_sas() if live else []
        for direction in live:
            await self.remove(sa, child, direction, listing)
        self.state.config.reqids.give_back(child.uid)

    async def uninstall_all(self, sa: IkeSA) -> None:
        """Every child of an IKE_SA out of the engine and off the IKE_SA -- including one
        that an exchange still under way adds while this runs."""
        while sa.children:
            await self.uninstall(sa, sa.children.pop())

    async def destroy(self, sa: IkeSA) -> None:
        """Forget an IKE_SA and its children locally (no DELETE sent); marked going first,
        so no child finishes installing on it meanwhile (:meth:`alive`)."""
        sa.state = "DESTROYING"
        self.state.sas.pop(sa.spi_i, None)
        await self.uninstall_all(sa)

    # ------------------------------------------------------------ terminate / rekey
    async def delete_child(self, sa: IkeSA, child: ChildSA, log: Log) -> None:
        log(f"[IKE] closing CHILD_SA {child.name}{{{child.uid}}} with SPIs {child.spi_in:08x}_i "
            f"{child.spi_out:08x}_o and TS {ts_text(child.local_ts)} === {ts_text(child.remote_ts)}")
        log(f"[IKE] sending DELETE for ESP CHILD_SA with SPI {child.spi_in:08x}")
        child.state = "DELETING"
        async with sa.req_lock, active(sa, "CHILD_DELETE"):
            got = await self.transport.exchange(
                sa, {"exchange": "INFORMATIONAL", "delete_child": [child.spi_in]}, log, "D")
        if got is not None:
            log(f"[ENC] parsed INFORMATIONAL response {got[0]['mid']} [ D ]")
        await self.uninstall(sa, child)
        if child in sa.children:
            sa.children.remove(child)
        log("[IKE] CHILD_SA closed")

    async def delete_ike(self, sa: IkeSA, log: Log) -> None:
        self._log_ike_delete(sa, log)
        async with sa.req_lock, active(sa, "IKE_DELETE"):
            got = await self.transport.exchange(sa, {"exchange": "INFORMATIONAL", "delete_ike": True}, log, "D")
        if got is not None:
            log(f"[ENC] parsed INFORMATIONAL response {got[0]['mid']} [ ]")
        await self.uninstall_all(sa)
        self.state.sas.pop(sa.spi_i, None)
        log("[IKE] IKE_SA deleted")

    async def force_delete_ike(self, sa: IkeSA, log: Log, timeout: float | None) -> None:
        """`--terminate --force`: controller.c terminate_ike with force -- the DELETE is sent
        and, without a timeout, the IKE_SA is destroyed at once; with one, an answer is
        awaited that long and the IKE_SA destroyed either way.  Why: a peer that never
        answers (gone, or its DELETE lost) must not keep this end's SA for the whole
        retransmit schedule."""
        self._log_ike_delete(sa, log)
        sent = asyncio.Event()

        def log_send(line: str) -> None:
            log(line)
            if line.startswith("[NET] sending packet"):
                sent.set()
        exchange = asyncio.ensure_future(self.transport.exchange(
            sa, {"exchange": "INFORMATIONAL", "delete_ike": True}, log_send, "D"))
        first_send = asyncio.ensure_future(sent.wait())
        await asyncio.wait({exchange, first_send}, return_when=asyncio.FIRST_COMPLETED)
        if timeout:
            await asyncio.wait({exchange}, timeout=timeout)
        first_send.cancel()
        if not exchange.done():
            exchange.cancel()
        elif exchange.result() is not None:
            log(f"[ENC] parsed INFORMATIONAL response {exchange.result()[0]['mid']} [ ]")
        await self.destroy(sa)
        log("[IKE] IKE_SA deleted")

    def _log_ike_delete(self, sa: IkeSA, log: Log) -> None:
        log(f"[IKE] deleting IKE_SA {sa.name}[{sa.uid}] between {sa.local}[{sa.local_id}]..."
            f"{sa.remote}[{sa.remote_id}]")
        log(f"[IKE] sending DELETE for IKE_SA {sa.name}[{sa.uid}]")
        sa.state = "DELETING"

    async def terminate(self, sel: TerminateSelector, log: Log) -> int:
        """vici_control.c terminate: children when a child name or id is given (inside
        the IKE_SAs the ike name/id allow), else IKE_SAs by name or id; every IKE_SA the
        daemon holds is looked at, as charon's enumerator does (a DELETING one too, so a
        forced terminate can end an IKE_SA whose DELETE was never answered)."""
        if not sel.any():
            raise Failed("missing terminate selector")
        by_child = bool(sel.child or sel.child_id)
        kids: list[tuple[IkeSA, ChildSA]] = []
        sas: list[IkeSA] = []
        for sa in [s for s in self.state.sas.values() if s.state != "DESTROYING"]:
            if by_child:
                if (sel.ike and sa.name != sel.ike) or (sel.ike_id and sa.uid != sel.ike_id):
                    continue
                kids += [(sa, c) for c in sa.children if c.state != "DELETED"
                         and (not sel.child or c.name == sel.child)
                         and (not sel.child_id or c.uid == sel.child_id)]
            elif (sel.ike and sa.name == sel.ike) or (sel.ike_id and sa.uid == sel.ike_id):
                sas.append(sa)
        for sa, c in kids:
            await self.delete_child(sa, c, log)
        for sa in sas:
            if sel.force:
                await self.force_delete_ike(sa, log, sel.timeout)
            else:
                await self.delete_ike(sa, log)
        if not kids and not sas:
            raise Failed("no matching SAs to terminate found")
        return len(kids) + len(sas)

    async def flush(self) -> None:
        """Daemon shutdown (a reboot): all SAs gone from the engine."""
        for sa in list(self.state.sas.values()):
            for c in sa.children:
                await self.uninstall(sa, c)
        self.state.sas.clear()

    # ------------------------------------------------------------ listing
    async def list_sas(self, ike: str | None = None, child: str | None = None) -> list[dict]:
        """What `swanctl --list-sas` prints, with the engine's per-SA counters."""
        try:
            counters = {(s["spi"], s["direction"]): s for s in await self.engine.list_sas()}
        except EngineError as exc:
            self.state.log(f"list-sas without counters: {exc}")
            counters = {}
        now, now_s = time.time(), int(time.monotonic())
        out = []
        for sa in sorted(self.state.sas.values(), key=lambda s: s.uid):
            if sa.state not in LISTED_IKE_STATES or (ike and sa.name != ike):
                continue
            kids = [_child_entry(c, counters, now, now_s) for c in sa.children if not child or c.name == child]
            if (shown := self.state.faults.params("one_end_child_not_installed")) is not None:
                # fault: this end lists the child REKEYED (superseded) though no rekey
                # happened and its SAs still carry the traffic
                for k in kids:
                    if not shown.get("child") or k["name"] == shown["child"]:
                        k["state"] = "REKEYED"
            if child and not kids:
                continue
            out.append(_ike_entry(sa, kids, now, now_s, self.state.port))
        return out


LISTED_IKE_STATES = ("ESTABLISHED", "REKEYING", "REKEYED", "DELETING")


@asynccontextmanager
async def active(sa: IkeSA, task: str) -> AsyncIterator[None]:
    """`async with active(sa, "CHILD_REKEY")`: the task shows in swanctl's `active:` line
    while this end waits for the peer's answer."""
    sa.tasks_active.append(task)
    try:
        yield
    finally:
        sa.tasks_active.remove(task)


async def hard_expire(children: ChildSAs, sa: IkeSA, child: ChildSA) -> None:
    """The kernel's side of a hard expiry, before charon acts: both SAs reach their hard
    lifetime together (installed together, one life_time) and the kernel frees them
    (sys/netipsec/key.c key_flush_sad, SADB_EXPIRE); charon's policies stay until its
    DELETE exchange ends (child_delete.c destroy_and_reestablish -> the child's
    destroy uninstalls them). Meanwhile a packet meeting the outbound policy finds no
    SA: FreeBSD counts it (netstat -s -p ipsec: "outbound packets with no SA available")
    and frees it. The inbound SA is simply gone; the outbound one stays listed as
    installed here because its policy is what :meth:`uninstall` removes."""
    listing = await children._engine_sas()
    pairs = []
    for direction, installed in (("in", child.in_installed), ("out", child.out_installed)):
        if not installed:
            continue
        spi, dst = (child.spi_in, sa.local) if direction == "in" else (child.spi_out, sa.remote)
        last = children._entry(listing, spi, direction)
        if last:
            child.last_counters[direction] = last
        pairs.append((spi, dst))
    if pairs:
        try:
            await children.engine.expire_sa(pairs)
        except EngineError as exc:
            children.state.log(f"engine expire_sa {', '.join(f'{s:08x}' for s, _ in pairs)}: {exc}")
    child.in_installed = False  # freed; the outbound one's policy goes with uninstall


def _ike_entry(sa: IkeSA, kids: list[dict], now: float, now_s: int, own_port: int) -> dict[str, Any]:
    """One IKE_SA as vici lists it (``own_port``: the daemon's; MOBIKE's float: model.ike_port)."""
    p = sa.proposal
    return {
        "name": sa.name, "uniqueid": sa.uid, "version": 2, "state": sa.state,
        "local_host": sa.local, "local_port": ike_port(sa, own_port), "local_id": sa.local_id,
        "remote_host": sa.remote,
        "remote_port": ike_port(sa, sa.conn.remote_port if sa.initiator else sa.remote_port),
        "remote_id": sa.remote_id, "initiator": sa.initiator, "initiator_spi": sa.spi_i,
        "responder_spi": sa.spi_r, "encr_alg": p.encr if p else "", "encr_keysize": p.keysize if p else 0,
        "integ_alg": p.integ if p else None, "prf_alg": p.prf if p else "", "dh_group": p.dh if p else "",
        "listing": p.listing() if p else "", "established": int(now - sa.established_at),
        "rekey_time": sa.rekey_at - now_s if sa.rekey_at else None,
        "tasks_active": list(sa.tasks_active),
        "children": kids,
    }


def _child_entry(c: ChildSA, counters: dict[tuple[int, str], dict], now: float, now_s: int) -> dict[str, Any]:
    """One child as vici lists it: rekey-time and life-time only when set, and -- as
    vici_query.c list_child_stats -- the scheduled second minus now, so a REKEYED or
    DELETED child whose automatic rekey has fired shows it in the past (negative)."""
    def stats(spi: int, d: str, live: bool) -> dict:
        # a hard-expired outbound SA is gone from the engine's listing while its policy
        # keeps it installed here: its last reading stands (children.hard_expire)
        return (counters.get((spi, d)) or c.last_counters.get(d, {})) if live else c.last_counters.get(d, {})
    cin = stats(c.spi_in, "in", c.in_installed)
    cout = stats(c.spi_out, "out", c.out_installed)
    return {
        "name": c.name, "uniqueid": c.uid, "reqid": c.reqid, "state": c.state, "mode": "TUNNEL",
        "protocol": "ESP", "encr_alg": c.proposal.encr, "encr_keysize": c.proposal.keysize,
        "integ_alg": c.proposal.integ, "listing": c.proposal.listing(),
        "esn": c.proposal.esn == "EXT_SEQ",
        "spi_in": f"{c.spi_in:08x}", "spi_out": f"{c.spi_out:08x}",
        "bytes_in": int(cin.get("bytes", 0)), "packets_in": int(cin.get("packets", 0)),
        "use_in": _ago(now, cin), "bytes_out": int(cout.get("bytes", 0)),
        "packets_out": int(cout.get("packets", 0)), "use_out": _ago(now, cout),
        "install_time": now_s - c.install_s if c.install_s else int(now - c.installed_at),
        "rekey_time": c.rekey_at - now_s if c.rekey_at else None,
        "life_time": c.expire_at - now_s if c.expire_at else None,
        "local_ts": [str(t) for t in c.local_ts], "remote_ts": [str(t) for t in c.remote_ts],
        "cipher": c.cipher, "offload": c.offload,
    }


def _ago(now: float, c: dict) -> int | None:
    t = c.get("last_use")
    if not t or not c.get("packets"):
        return None
    return max(0, int(now - float(t)))
