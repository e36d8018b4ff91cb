"""The initiator role: `swanctl --initiate` (and start_action) as strongSwan 5.9.8 logs it.

Why its own module: the initiator reuses an established IKE_SA with the same peer
config for further children (CREATE_CHILD_SA), retransmits and gives up on a silent
peer, and turns each failure into swanctl's errmsg; the log lines it streams are the
ones the suite's transcripts show.
"""
from __future__ import annotations

import asyncio
import secrets as _secrets
import time
from . import proto
from .conf import Child, Connection
from .children import ChildSAs, IkeSaGone, active
from .engine_client import EngineError
from .lifetimes import Lifetimes
from .model import ChildSA, Failed, IkeSA, Log, find_psk, short_notify
from .proposals import Combo, installable
from .state import IkeState
from .transport import Transport
from .ts import from_json, resolve_dynamic, to_json

INIT_PAYLOADS = "SA KE No N(NATD_S_IP) N(NATD_D_IP) N(FRAG_SUP) N(HASH_ALG) N(REDIR_SUP)"
AUTH_PAYLOADS = "IDi N(INIT_CONTACT) IDr AUTH SA TSi TSr N(MOBIKE_SUP) N(ADD_4_ADDR) N(MULT_AUTH) " \
                "N(EAP_ONLY) N(MSG_ID_SYN_SUP)"


class Initiator:
    def __init__(self, state: IkeState, transport: Transport, children: ChildSAs, lifetimes: Lifetimes) -> None:
        self.state = state
        self.transport = transport
        self.children = children
        self.lifetimes = lifetimes
        self.conn_locks: dict[tuple, asyncio.Lock] = {}

    def _lock(self, key: tuple) -> asyncio.Lock:
        if key not in self.conn_locks:
            self.conn_locks[key] = asyncio.Lock()
        return self.conn_locks[key]

    async def initiate(self, child_name: str | None, ike_name: str | None, log: Log) -> ChildSA | None:
        """Bring up a child (over an existing IKE_SA with the same peer config if there is
        one), or with only `ike_name` an IKE_SA without a child (childless)."""
        config = self.state.config
        if child_name:
            conn, cfg = config.find_child(child_name, ike_name)
        else:
            conn, cfg = config.find_conn(ike_name), None
        remote = config.remote_for(conn)
        local = config.local_for(conn, remote)
        local_id = conn.local.id or local
        async with self._lock((local, remote, local_id, conn.remote.id)):
            sa = next((s for s in self.state.sas.values()
                       if s.same_peer_config(conn, local, remote, local_id)), None)
            if sa is None:
                return await self._initiate_new(conn, cfg, local, remote, local_id, log)
        if cfg is None:
            return None  # the IKE_SA is already up
        return await self.create_child(sa, cfg, log)

    @staticmethod
    def _child_request(sa: IkeSA, cfg: Child, spi: int) -> dict:
        lts = [resolve_dynamic(t, sa.local) for t in cfg.local_ts]
        rts = [resolve_dynamic(t, sa.remote) for t in cfg.remote_ts]
        return {"esp": [c.to_json() for c in installable(cfg.esp_proposals)], "spi": spi,
                "tsi": [to_json(t) for t in lts], "tsr": [to_json(t) for t in rts]}

    async def _initiate_new(self, conn: Connection, cfg: Child | None, local: str, remote: str,
                            local_id: str, log: Log) -> ChildSA | None:
        fail = f"establishing CHILD_SA '{cfg.name}' failed" if cfg else f"establishing IKE_SA '{conn.name}' failed"
        sa = IkeSA(uid=next(self.state.ike_uid), conn=conn, initiator=True, spi_i=_secrets.token_hex(8),
                   spi_r="0" * 16, local=local, local_port=0, remote=remote,
                   remote_port=self.state.port if conn.remote_port == 500 else conn.remote_port, local_id=local_id,
                   ni=proto.nonce())
        self.state.sas[sa.spi_i] = sa
        try:
            log(f"[IKE] initiating IKE_SA {conn.name}[{sa.uid}] to {remote}")
            await self._sa_init(sa, fail, log)
            spi, uid, resp = await self._auth(sa, cfg, fail, log)
            if cfg is None:
                return None
            return await self._finish_child(sa, cfg, resp, spi, sa.ni, sa.nr, b"", log, fail, uid)
        except BaseException:
            if sa.state != "ESTABLISHED":
                self.state.sas.pop(sa.spi_i, None)
            raise

    async def _sa_init(self, sa: IkeSA, fail: str, log: Log) -> None:
        """IKE_SA_INIT: proposals, key exchange and nonces; sa.keys afterwards."""
        kex = proto.KeyExchange.new()
        init = {"exchange": "IKE_SA_INIT", "sa": [c.to_json() for c in sa.conn.proposals],
                "ke": kex.public_hex(), "nonce": sa.ni, "natd_fake": sa.conn.encap}
        sa.init_req = proto.encode({**init, "spi_i": sa.spi_i, "spi_r": sa.spi_r, "mid": 0,
                                    "response": False, "from_initiator": True, "dst": sa.remote})
        got = await self.transport.exchange(sa, init, log, INIT_PAYLOADS)
        if got is None:
            log("[IKE] establishing IKE_SA failed, peer not responding")
            raise Failed(fail)
        resp, raw = got
        if resp.get("notify"):
            log(f"[ENC] parsed IKE_SA_INIT response 0 [ N({short_notify(resp['notify'])}) ]")
            log(f"[IKE] received {resp['notify']} notify error")
            raise Failed(fail)
        log("[ENC] parsed IKE_SA_INIT response 0 [ SA KE No N(NATD_S_IP) N(NATD_D_IP) N(FRAG_SUP) "
            "N(HASH_ALG) N(CHDLESS_SUP) N(MULT_AUTH) ]")
        try:
            chosen = Combo.from_json(resp["sa"][0])
            sa.spi_r, sa.nr = str(resp["spi_r"]), str(resp["nonce"])
            shared = kex.shared(str(resp["ke"]))
        except (KeyError, IndexError, TypeError, ValueError, proto.ProtoError) as exc:
            log(f"[IKE] invalid IKE_SA_INIT response: {exc}")
            raise Failed(fail) from None
        sa.proposal, sa.init_resp = chosen, raw
        sa.encap = sa.conn.encap or resp.get("natd_fake") is True  # RFC 7296 2.23: a NAT on either side
        sa.keys = proto.ike_keys(shared, sa.ni, sa.nr, sa.spi_i, sa.spi_r)
        log(f"[CFG] selected proposal: {chosen.selected()}")

    async def _auth(self, sa: IkeSA, cfg: Child | None, fail: str, log: Log) -> tuple[int, int, dict]:
        """IKE_AUTH with the PSK proof (and the first child's request): (spi, uid, response)."""
        conn, local_id, secrets = sa.conn, sa.local_id, self.state.config.secrets
        peer_id_cfg = conn.remote.id if conn.remote.id not in (None, "%any") else None
        psk = find_psk(secrets, local_id, peer_id_cfg or sa.remote)
        if psk is None:
            log(f"[IKE] no shared key found for '{local_id}' - '{peer_id_cfg or '%any'}'")
            raise Failed(fail)
        log(f"[IKE] authentication of '{local_id}' (myself) with pre-shared key")
        spi = self.children.new_spi()
        uid = next(self.state.child_uid)
        # ike_natd.c process_i: NAT detected, or MOBIKE enabled and the peer supports NAT-T;
        # IKE_AUTH and all after it then go to UDP 4500 behind the non-ESP marker (ike.natt)
        sa.floated = bool(conn.encap or conn.mobike) and self.transport.can_float
        auth = {"exchange": "IKE_AUTH", "idi": local_id,
                "auth": proto.psk_auth(psk.secret, sa.init_req, sa.nr, local_id)}
        if cfg is not None:
            log(f"[IKE] establishing CHILD_SA {cfg.name}{{{uid}}}")
            auth.update(self._child_request(sa, cfg, spi))
        if peer_id_cfg:
            auth["idr"] = peer_id_cfg
        got = await self.transport.exchange(sa, auth, log, AUTH_PAYLOADS,
                                              suppress=bool(cfg and self.state.never_up(cfg.name)))
        if got is None:
            log("[IKE] establishing IKE_SA failed, peer not responding")
            raise Failed(fail)
        resp, _ = got
        if not proto.verify(resp, sa.mac_key(False)):
            log("[IKE] IKE_AUTH response failed the integrity check")
            raise Failed(fail)
        if resp.get("notify"):
            log(f"[ENC] parsed IKE_AUTH response 1 [ N({short_notify(resp['notify'])}) ]")
            log(f"[IKE] received {resp['notify']} notify error")
            raise Failed(fail)
        idr = str(resp.get("idr", ""))
        notify = resp.get("child_notify")
        kid = f"N({short_notify(notify)}) " if notify else ("SA TSi TSr " if cfg is not None else "")
        log(f"[ENC] parsed IKE_AUTH response 1 [ IDr AUTH {kid}N(MOBIKE_SUP) N(ADD_4_ADDR) ]")
        psk_r = find_psk(secrets, local_id, idr)
        if psk_r is None or not _secrets.compare_digest(
                proto.psk_auth(psk_r.secret, sa.init_resp, sa.ni, idr), str(resp.get("auth", ""))):
            log(f"[IKE] authentication of '{idr}' with pre-shared key failed")
            raise Failed(fail)
        log(f"[IKE] authentication of '{idr}' with pre-shared key successful")
        sa.remote_id, sa.state, sa.established_at = idr, "ESTABLISHED", time.time()
        log(f"[IKE] IKE_SA {conn.name}[{sa.uid}] established between {sa.local}[{local_id}]...{sa.remote}[{idr}]")
        after = self.lifetimes.arm_ike(sa)
        log(f"[IKE] scheduling rekeying in {after}s")
        log(f"[IKE] maximum IKE_SA lifetime {int(conn.rekey_time * 1.1)}s")
        return spi, uid, resp

    async def _finish_child(self, sa: IkeSA, cfg: Child, resp: dict, spi: int, ni: str, nr: str,
                            fresh: bytes, log: Log, fail: str, uid: int, old: ChildSA | None = None) -> ChildSA:
        notify = resp.get("child_notify")
        if notify:
            log(f"[IKE] received {notify} notify, no CHILD_SA built")
            log("[IKE] failed to establish CHILD_SA, keeping IKE_SA")
            raise Failed(fail)
        try:
            chosen = Combo.from_json(resp["esp"][0])
            peer_spi = int(resp["spi"])
            tsi = [from_json(t) for t in resp["tsi"]]
            tsr = [from_json(t) for t in resp["tsr"]]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            log(f"[IKE] invalid CHILD_SA response: {exc}")
            raise Failed(fail) from None
        cipher = chosen.engine_cipher()
        if cipher is None:
            log("[IKE] no acceptable proposal found")
            raise Failed(fail)
        log(f"[CFG] selected proposal: {chosen.selected()}")
        keys = proto.child_keys(cipher, sa.keys.sk_d, ni, nr, spi, peer_spi, fresh)  # type: ignore[union-attr]
        children = self.children
        child = children.new(sa, cfg, uid, chosen, cipher, spi, peer_spi, tsi, tsr)
        try:
            await children.install(sa, child, keys, initiator_of_child=True)
        except IkeSaGone as exc:  # a DELETE of the IKE_SA crossed this exchange
            log(f"[IKE] {exc}")
            raise Failed(fail) from None
        except EngineError as exc:
            log("[IKE] unable to install inbound and outbound IPsec SA (SAD) in kernel")
            log("[IKE] failed to establish CHILD_SA, keeping IKE_SA")
            self.state.log(f"engine: {exc}")
            raise Failed(fail) from None
        log(f"[IKE] {children.established(sa, child, old)}")
        return child

    async def create_child(self, sa: IkeSA, cfg: Child, log: Log, old: ChildSA | None = None) -> ChildSA:
        """CREATE_CHILD_SA over an established IKE_SA (a new child, or the rekey of `old`)."""
        fail = f"establishing CHILD_SA '{cfg.name}' failed"
        async with sa.req_lock, active(sa, "CHILD_REKEY" if old else "CHILD_CREATE"):
            spi = self.children.new_spi()
            kex = proto.KeyExchange.new()
            ni = proto.nonce()
            uid = next(self.state.child_uid)
            if old is None:
                log(f"[IKE] establishing CHILD_SA {cfg.name}{{{uid}}}")
            req = {"exchange": "CREATE_CHILD_SA", "nonce": ni, "ke": kex.public_hex(),
                   **self._child_request(sa, cfg, spi)}
            if old is not None:
                req["rekey"] = old.spi_in
                req["tsi"] = [to_json(t) for t in old.local_ts]
                req["tsr"] = [to_json(t) for t in old.remote_ts]
            own_fault = self.state.never_up(cfg.name) or (
                old is not None and self.state.faults.params("rekey_lost") is not None)
            got = await self.transport.exchange(
                sa, req, log, "N(REKEY_SA) SA No KE TSi TSr" if old else "SA No KE TSi TSr", suppress=own_fault)
            if got is None:
                # strongSwan destroys an IKE_SA whose request timed out (e.g. the peer
                # rebooted); for a new child the twin first checks liveness so a peer that
                # ignores one child only (child_never_up) keeps the other children; a rekey
                # that times out destroys it as 5.9.8 does (fault rekey_lost)
                if old is not None or (not own_fault and not await self._alive(sa)):
                    log(f"[IKE] peer not responding, deleting IKE_SA {sa.name}[{sa.uid}]")
                    await self.children.destroy(sa)
                raise Failed(fail)
            resp, _ = got
            if not proto.verify(resp, sa.mac_key(not sa.initiator)):
                log("[IKE] CREATE_CHILD_SA response failed the integrity check")
                raise Failed(fail)
            notify = resp.get("child_notify")
            log(f"[ENC] parsed CREATE_CHILD_SA response {resp['mid']} [ "
                + (f"N({short_notify(notify)})" if notify else "SA No KE TSi TSr") + " ]")
            try:
                fresh = b"" if notify else kex.shared(str(resp["ke"]))
                nr = "" if notify else str(resp["nonce"])
            except (KeyError, proto.ProtoError) as exc:
                log(f"[IKE] invalid CREATE_CHILD_SA response: {exc}")
                raise Failed(fail) from None
            return await self._finish_child(sa, cfg, resp, spi, ni, nr, fresh, log, fail, uid, old)

    async def _alive(self, sa: IkeSA) -> bool:
        """An empty INFORMATIONAL (a liveness check) with the normal retransmits."""
        got = await self.transport.exchange(sa, {"exchange": "INFORMATIONAL"},
                                              lambda line: self.state.log(f"dpd: {line}"), "")
        return got is not None
