"""Rekeying and expiry: CHILD_SAs and IKE_SAs replaced with strongSwan 5.9.8's outcomes.

Why its own module: a rekey touches both roles and the engine in an order that decides
whether traffic survives it (child_rekey.c, child_delete.c, ike_rekey.c in 5.9.8):

1. The rekey initiator sends CREATE_CHILD_SA with REKEY_SA; the old child is REKEYING.
2. The responder installs the new inbound association only (the outbound one is
   registered), answers, and marks the old child REKEYED.
3. The initiator installs the new pair, marks the old child REKEYED, removes the old
   OUTBOUND association (its traffic switches to the new one: the engine, as FreeBSD
   with net.key.preferred_oldsa, keeps using the older of two equal associations while
   both exist) and sends DELETE for the old child (DELETING).
4. The responder, on that DELETE, installs the new outbound association, removes the
   old outbound one, and the old child is DELETED; so is the initiator's on the answer.
5. The old INBOUND associations stay for `delete_rekeyed_delay` (charon's default 5 s,
   DIR/host.json `ike.delete_rekeyed_delay`) so packets already on the wire are still
   decrypted; then they leave the engine and the old child leaves the listing.

A DELETED child lists the counters its associations had when they were removed.
`swanctl --rekey` only queues the rekey and answers at once, as vici's rekey command.
A rekey collision (both ends rekey the same child) is settled without nonces: the end
that initiated the IKE_SA wins, the other answers TEMPORARY_FAILURE or yields.

Hard expiry (life_time): the associations leave the engine first (the kernel deletes
an SA at its hard lifetime), then DELETE is sent and the child is created anew from its
config with new SPIs -- 5.9.8 does that for every expired child that was not rekeyed
(checked against real charon: `closing expired CHILD_SA`, `scheduling CHILD_SA recreate
after hard expire`), so traffic pauses for one exchange, it does not stop.

An IKE_SA rekey (CREATE_CHILD_SA carrying a new SPI, nonce and key exchange) makes a new
IKE_SA with a new unique id; the children move to it unchanged, the old one is deleted.

A CHILD_SA rekey that times out destroys the IKE_SA with its children, as 5.9.8 does:
traffic stops until a new initiate (the silent end keeps its child until life_time).
A rekey refused by the peer (TEMPORARY_FAILURE ...) leaves the old child INSTALLED; the
twin does not retry it (5.9.8 retries after 10-20 s), so it lives to its hard expiry.
An IKE_SA rekey derives the new keys from the fresh exchange and the old SK_d (as IKEv2)
but in the twin's own KDF.

Faults read here: `rekey_lost` (this end neither sends nor answers a CHILD_SA rekey),
`old_sa_kept` (the old associations are never removed from the engine after a rekey),
`counters_restart` (the driver's counters drop by the old associations' packets when
they are removed, ipsec_hil_twin.ike.driver_counters).

`old_sa_kept` ends with the fault, as a driver reload ends a leak on hardware (the
reloaded driver starts with an empty SA table and charon reinstalls what it knows): while
the fault is on, each association it keeps is remembered (`Rekeys.kept`, SPI and
destination); once the fault is off, `sweep_kept` deletes them from the engine. The sweep
runs from a tick in the daemon's loop (`watch_kept`, every KEPT_SWEEP_S while any is kept:
started by the first one kept, ended when none is left) and before
the daemon answers any control request, so a `swanctl --list-sas` issued right after the
fault is switched off already sees an engine without them. Without that end the leaked
associations, the older of two for the same selectors, kept carrying later tunnels'
traffic (the engine prefers the older association) long after the fault was switched off.
"""
from __future__ import annotations

import asyncio
import secrets as _secrets
import time
from typing import Any

from . import proto
from .children import ChildSAs, active
from .driver_counters import forget_packets
from .engine_client import EngineError
from .initiator import Initiator
from .lifetimes import Lifetimes
from .model import ChildSA, Failed, IkeSA, Log, short_notify
from .proposals import Combo, select
from .state import IkeState
from .transport import Transport

DELETE_REKEYED_DELAY = 5.0
"""charon.delete_rekeyed_delay (child_delete.c DELETE_REKEYED_DELAY)."""

KEPT_SWEEP_S = 0.1
"""How often the daemon looks whether `old_sa_kept` was switched off (a stat of faults.json)
while it keeps associations: the fault matrix runs the next healthy test right after
switching it off. Only then: a tick for the daemon's whole life woke every idle daemon ten
times a second, 3.3 ms of CPU a second each -- a tenth of an idle virtual lab's (issue 39)."""


class Rekeys:
    def __init__(self, state: IkeState, transport: Transport, children: ChildSAs, initiator: Initiator,
                 lifetimes: Lifetimes) -> None:
        self.state = state
        self.transport = transport
        self.children = children
        self.initiator = initiator
        self.lifetimes = lifetimes
        ike_cfg = state.host.get("ike") or {}
        self.delay = float(ike_cfg.get("delete_rekeyed_delay", DELETE_REKEYED_DELAY))
        #: associations fault old_sa_kept left in the engine: (spi, destination, what), removed
        #: by sweep_kept once the fault is off
        self.kept: list[tuple[int, str, str]] = []
        self._sweeping = asyncio.Lock()
        self._watch: asyncio.Future | None = None  # watch_kept, while anything is kept

    def _log(self, line: str) -> None:
        self.state.log(f"rekey: {line}")

    def owner(self, child: ChildSA) -> IkeSA | None:
        """The IKE_SA a child belongs to now (an IKE_SA rekey moves children)."""
        return next((sa for sa in self.state.sas.values() if child in sa.children), None)

    # ------------------------------------------------------------ swanctl --rekey
    async def request(self, child: str | None, ike: str | None) -> int:
        """Queue the matching rekeys and return how many (vici_control.c rekey)."""
        n = 0
        for sa in [s for s in self.state.sas.values() if s.state == "ESTABLISHED"]:
            if child:
                if ike and sa.name != ike:
                    continue
                for c in list(sa.children):
                    if c.name == child and c.state == "INSTALLED":
                        self.state.spawn(self.rekey_child(sa, c, self._log))
                        n += 1
            elif ike and sa.name == ike:
                self.state.spawn(self.rekey_ike(sa, self._log))
                n += 1
        if not n:
            raise Failed("no matching SAs to rekey found")
        return n

    async def auto_rekey(self, child: ChildSA) -> None:
        """The soft expiry: rekey the child on the IKE_SA it belongs to now."""
        sa = self.owner(child)
        if sa is not None and sa.state == "ESTABLISHED" and child.state == "INSTALLED":
            self._log(f"CHILD_SA {child.name}{{{child.uid}}} reached its soft lifetime")
            await self.rekey_child(sa, child, self._log)

    async def auto_rekey_ike(self, sa: IkeSA) -> None:
        await self.rekey_ike(sa, self._log)

    # ------------------------------------------------------------ CHILD_SA rekey (initiator)
    async def rekey_child(self, sa: IkeSA, old: ChildSA, log: Log) -> ChildSA | None:
        if old.state != "INSTALLED":
            return None  # the peer's rekey (or a delete) got there first
        cfg = sa.conn.children.get(old.name)
        if cfg is None:
            log(f"[IKE] unable to rekey CHILD_SA {old.name}{{{old.uid}}}: its config is gone")
            return None
        old.state = "REKEYING"
        try:
            new = await self.initiator.create_child(sa, cfg, log, old=old)
        except Failed as exc:
            if old.state == "REKEYING":
                old.state = "INSTALLED"
            log(f"[IKE] CHILD_SA {old.name}{{{old.uid}}} rekeying failed: {exc}")
            return None
        await self.retire(sa, old, "out")
        await self._delete_old(sa, old, log)
        return new

    async def _delete_old(self, sa: IkeSA, old: ChildSA, log: Log) -> None:
        log(f"[IKE] closing CHILD_SA {old.name}{{{old.uid}}} with SPIs {old.spi_in:08x}_i {old.spi_out:08x}_o")
        old.state = "DELETING"
        async with sa.req_lock, active(sa, "CHILD_DELETE"):
            await self.transport.exchange(
                sa, {"exchange": "INFORMATIONAL", "delete_child": [old.spi_in]}, log, "D")
        old.state = "DELETED"
        self.linger(old)

    # ------------------------------------------------------------ CHILD_SA rekey (responder)
    def refuse_rekey(self, sa: IkeSA, old: ChildSA | None) -> str | None:
        """The notify answering a rekey request for `old`, or None to accept it."""
        if old is None:
            return "CHILD_SA_NOT_FOUND"
        if old.state == "INSTALLED":
            return None
        if old.state == "REKEYING" and not sa.initiator:
            self.state.log(f"CHILD_SA {old.name}{{{old.uid}}} rekey collision lost, the peer's rekey wins")
            return None
        self.state.log(f"CHILD_SA {old.name}{{{old.uid}}} is {old.state}: rekey answered TEMPORARY_FAILURE")
        return "TEMPORARY_FAILURE"

    async def on_delete_rekeyed(self, sa: IkeSA, old: ChildSA) -> None:
        """The peer deletes a child it rekeyed: the new outbound association goes in,
        the old outbound one out (child_delete.c destroy_and_reestablish)."""
        new = old.rekeyed_to
        if new is not None and new.pending_out is not None:
            try:
                await self.children.install_outbound(new)
                self.state.log(f"outbound CHILD_SA {new.name}{{{new.uid}}} established with SPIs "
                           f"{new.spi_in:08x}_i {new.spi_out:08x}_o")
            except EngineError as exc:
                self.state.log(f"unable to install outbound IPsec SA (SAD) in kernel: {exc}")
        await self.retire(sa, old, "out")
        old.state = "DELETED"
        self.linger(old)

    # ------------------------------------------------------------ the old child's end
    def linger(self, old: ChildSA) -> None:
        """Keep a DELETED child's inbound association for delete_rekeyed_delay, then drop
        it (or leave it to its hard expiry when that comes first)."""
        if self.delay and (not old.expire_at or time.monotonic() + self.delay < old.expire_at):
            self.state.spawn(self._drop_later(old, self.delay))
        elif not old.expire_at or time.monotonic() >= old.expire_at:
            self.state.spawn(self._drop_later(old, 0))

    async def _drop_later(self, old: ChildSA, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        await self._drop(old)

    async def _drop(self, old: ChildSA) -> None:
        sa = self.owner(old)
        if sa is None:
            return
        for direction, installed in (("in", old.in_installed), ("out", old.out_installed)):
            if installed:
                await self.retire(sa, old, direction)
        if old in sa.children:
            sa.children.remove(old)
        old.state = "DESTROYING"

    async def retire(self, sa: IkeSA, child: ChildSA, direction: str) -> None:
        """One association of a rekeyed child out of the engine, its counters kept."""
        if not (child.in_installed if direction == "in" else child.out_installed):
            return
        spi = child.spi_in if direction == "in" else child.spi_out
        if self.state.faults.params("old_sa_kept") is not None:
            self.state.log(f"fault old_sa_kept: {direction}bound association {spi:08x} of the rekeyed "
                       f"CHILD_SA {child.name}{{{child.uid}}} left in the engine")
            self.kept.append((spi, sa.local if direction == "in" else sa.remote,
                              f"{direction}bound {spi:08x} of {child.name}{{{child.uid}}}"))
            if self._watch is None or self._watch.done():
                self._watch = asyncio.ensure_future(self.watch_kept())
            if direction == "in":
                child.in_installed = False
            else:
                child.out_installed = False
            return
        last = await self.children.remove(sa, child, direction)
        if self.state.faults.params("counters_restart") is not None and last.get("offloaded"):
            taken = forget_packets(self.state.hd.path / "engine.counters", str(self.state.host.get("driver", "")),
                                   direction, int(last.get("packets", 0)))
            self.state.log(f"fault counters_restart: {direction}bound association {spi:08x} deleted, "
                       f"driver counters dropped by {taken}")

    # ------------------------------------------------------------ old_sa_kept's end
    async def sweep_kept(self, *, reboot: bool = False) -> int:
        """The associations old_sa_kept left behind, out of the engine once the fault is off
        (as after a driver reload) -- or, with ``reboot`` (daemon shutdown or reset), whatever
        the fault says: a rebooted kernel's SA table is empty. Returns how many went; cheap
        when there are none."""
        if not self.kept or (not reboot and self.state.faults.params("old_sa_kept") is not None):
            return 0
        async with self._sweeping:  # the tick and a control request may both get here
            gone, self.kept = self.kept, []
            for spi, dst, what in gone:
                await self.children._del(spi, dst)  # noqa: SLF001 -- the one engine delete
                self.state.log(f"fault old_sa_kept {'reset' if reboot else 'switched off'}: {what} removed from the engine")
            return len(gone)

    async def watch_kept(self) -> None:
        """The tick of sweep_kept while associations are kept: it ends once none is (swept,
        or reset by a reboot), and the next association kept starts it again (retire)."""
        while self.kept:
            await asyncio.sleep(KEPT_SWEEP_S)
            try:
                await self.sweep_kept()
            except Exception as exc:  # noqa: BLE001 -- a failed sweep is retried next tick
                self.state.log(f"fault old_sa_kept: sweep failed: {exc!r}")

    # ------------------------------------------------------------ hard expiry
    async def expire(self, child: ChildSA) -> None:
        """life_time reached: the associations are gone, the peer is told, and -- unless
        the child was rekeyed -- a new child is created from the same config
        (child_delete.c: "scheduling CHILD_SA recreate after hard expire")."""
        sa = self.owner(child)
        if sa is None:
            return
        if child.state == "REKEYED":  # the peer's DELETE did not come: switch now (child_delete.c)
            await self.on_delete_rekeyed(sa, child)
            return
        if child.state == "DELETED":  # a rekeyed child lingering: its successor exists
            await self._drop(child)
            return
        if child.state in ("DELETING", "DESTROYING"):  # already going (a DELETE, a terminate)
            return
        log = self._log
        log(f"[IKE] closing expired CHILD_SA {child.name}{{{child.uid}}} with SPIs {child.spi_in:08x}_i "
            f"{child.spi_out:08x}_o")
        child.state, child.expiring = "DELETING", True  # before the first await: a crossing DELETE sees it
        # the kernel frees the SAs at their hard lifetime; charon's policies go when its
        # DELETE exchange ends (child_delete.c process_i -> destroy_and_reestablish)
        await self.children.hard_expire(sa, child)
        async with sa.req_lock, active(sa, "CHILD_DELETE"):
            await self.transport.exchange(
                sa, {"exchange": "INFORMATIONAL", "delete_child": [child.spi_in]}, log, "D")
        await self.children.uninstall(sa, child)
        if child in sa.children:
            sa.children.remove(child)
        child.state = "DESTROYING"
        cfg = sa.conn.children.get(child.name)
        if not child.recreate or cfg is None or sa.state != "ESTABLISHED" or self.state.sas.get(sa.spi_i) is not sa:
            return
        log("[IKE] scheduling CHILD_SA recreate after hard expire")
        try:
            await self.initiator.create_child(sa, cfg, log)
        except Failed as exc:
            log(f"[IKE] recreating CHILD_SA {child.name} failed: {exc}")

    # ------------------------------------------------------------ IKE_SA rekey
    async def rekey_ike(self, sa: IkeSA, log: Log) -> IkeSA | None:
        """CREATE_CHILD_SA for a new IKE_SA; the children move to it, the old one is deleted."""
        if sa.state != "ESTABLISHED" or self.state.sas.get(sa.spi_i) is not sa:
            return None
        kex, ni, spi_i = proto.KeyExchange.new(), proto.nonce(), _secrets.token_hex(8)
        sa.state = "REKEYING"
        async with sa.req_lock, active(sa, "IKE_REKEY"):
            got = await self.transport.exchange(
                sa, {"exchange": "CREATE_CHILD_SA", "rekey_ike": True, "spi": spi_i, "nonce": ni,
                     "ke": kex.public_hex(), "sa": [c.to_json() for c in sa.conn.proposals]}, log, "SA No KE")
        try:
            resp = self._ike_response(sa, got, log)
            chosen = Combo.from_json(resp["sa"][0])
            new = self._successor(sa, spi_i, str(resp["spi_new"]), True, chosen, ni, str(resp["nonce"]),
                                  kex.shared(str(resp["ke"])))
        except (Failed, KeyError, IndexError, TypeError, ValueError, proto.ProtoError) as exc:
            if sa.state == "REKEYING":
                sa.state = "ESTABLISHED"
            log(f"[IKE] IKE_SA {sa.name}[{sa.uid}] rekeying failed: {exc}")
            return None
        log(f"[IKE] IKE_SA {sa.name}[{new.uid}] rekeyed between {sa.local}[{sa.local_id}]..."
            f"{sa.remote}[{sa.remote_id}]")
        async with sa.req_lock, active(sa, "IKE_DELETE"):
            await self.transport.exchange(sa, {"exchange": "INFORMATIONAL", "delete_ike": True}, log, "D")
        self.state.sas.pop(sa.spi_i, None)
        return new

    def _ike_response(self, sa: IkeSA, got: tuple[dict, bytes] | None, log: Log) -> dict:
        if got is None:
            raise Failed("peer not responding")
        resp, _ = got
        if not proto.verify(resp, sa.mac_key(not sa.initiator)):
            raise Failed("response failed the integrity check")
        if resp.get("child_notify"):
            log(f"[ENC] parsed CREATE_CHILD_SA response {resp['mid']} [ N({short_notify(resp['child_notify'])}) ]")
            raise Failed(f"received {resp['child_notify']} notify")
        log(f"[ENC] parsed CREATE_CHILD_SA response {resp['mid']} [ SA No KE ]")
        return resp

    def respond_ike(self, sa: IkeSA, msg: dict[str, Any]) -> dict[str, Any]:
        """The responder's half of an IKE_SA rekey."""
        if sa.state != "ESTABLISHED" and not (sa.state == "REKEYING" and not sa.initiator):
            return {"child_notify": "TEMPORARY_FAILURE"}
        try:
            offered = [Combo.from_json(c) for c in msg["sa"]]
            chosen = select(sa.conn.proposals, offered)
            if chosen is None:
                return {"child_notify": "NO_PROPOSAL_CHOSEN"}
            kex, nr, spi_r = proto.KeyExchange.new(), proto.nonce(), _secrets.token_hex(8)
            self._successor(sa, str(msg["spi"]), spi_r, False, chosen, str(msg["nonce"]), nr,
                            kex.shared(str(msg["ke"])))
        except (KeyError, TypeError, ValueError, proto.ProtoError) as exc:
            self.state.log(f"IKE_SA rekey request from {sa.remote}: {exc}")
            return {"child_notify": "INVALID_SYNTAX"}
        return {"spi_new": spi_r, "nonce": nr, "ke": kex.public_hex(), "sa": [chosen.to_json()]}

    def _successor(self, sa: IkeSA, spi_i: str, spi_r: str, initiator: bool, chosen: Combo,
                   ni: str, nr: str, shared: bytes) -> IkeSA:
        """The new IKE_SA of a rekey, with the old one's children (the old one: REKEYED)."""
        assert sa.keys is not None
        new = IkeSA(uid=next(self.state.ike_uid), conn=sa.conn, initiator=initiator, spi_i=spi_i, spi_r=spi_r,
                    local=sa.local, local_port=sa.local_port, remote=sa.remote, remote_port=sa.remote_port,
                    local_id=sa.local_id, remote_id=sa.remote_id, proposal=chosen, ni=ni, nr=nr,
                    state="ESTABLISHED", established_at=time.time(), floated=sa.floated)
        new.keys = proto.ike_keys(shared + sa.keys.sk_d, ni, nr, spi_i, spi_r)
        new.children, sa.children = sa.children, []
        sa.state = "REKEYED"
        self.state.sas[new.spi_i] = new
        self.lifetimes.arm_ike(new)
        return new
