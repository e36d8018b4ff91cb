"""The responder role: answering IKE_SA_INIT, IKE_AUTH, CREATE_CHILD_SA and INFORMATIONAL.

Why its own module: the responder decides the 002 page's outcomes -- which connection
it picks for the peer's addresses and identities, TS_UNACCEPTABLE for selectors that
fit none of that connection's children, NO_PROPOSAL_CHOSEN, AUTHENTICATION_FAILED --
and answers retransmits from its cache so a request is handled once.
"""
from __future__ import annotations

import secrets as _secrets
import time
from typing import Any

from . import proto
from .children import ChildSAs, IkeSaGone
from .engine_client import EngineError
from .lifetimes import Lifetimes
from .model import IkeSA, addr_match, find_psk, ts_text
from .proposals import Combo, installable, select
from .rekey import Rekeys
from .state import IkeState
from .transport import Endpoint
from .ts import from_json, narrow, resolve_dynamic, to_json


class Responder:
    """Answers the peer's requests (the transport's RequestHandler)."""

    def __init__(self, state: IkeState, children: ChildSAs, lifetimes: Lifetimes, rekeys: Rekeys) -> None:
        self.state = state
        self.children = children
        self.lifetimes = lifetimes
        self.rekeys = rekeys

    async def on_request(self, msg: dict, raw: bytes, addr: Any, ep: Endpoint) -> None:
        try:
            reply = await self.respond(msg, raw, addr, natt=getattr(ep, "natt", False))
        except Exception as exc:  # never let one bad packet kill the daemon
            self.state.log(f"error handling {msg.get('exchange')} from {addr[0]}: {exc!r}")
            return
        if reply is not None and ep.transport is not None:
            ep.transport.sendto(reply, addr)

    async def respond(self, msg: dict, raw: bytes, addr, natt: bool = False) -> bytes | None:
        """The reply to one request (None: none is sent). ``natt``: it came to UDP 4500,
        which floats its IKE_SA there (strongSwan's ike_sa.c float_ports, on the responder
        when IKE_AUTH, or any later request, arrives on 4500)."""
        ex = msg["exchange"]
        peer = addr[0].split("%")[0]
        if peer.startswith("::ffff:"):
            peer = peer[7:]
        sa = self.state.sas.get(msg["spi_i"])
        if ex == "IKE_SA_INIT":
            if sa is not None and not sa.initiator and 0 in sa.responses:
                return sa.responses[0]
            return self.respond_init(msg, raw, peer, addr[1])
        if sa is None or sa.keys is None:
            self.state.log(f"{ex} for unknown IKE_SA {msg['spi_i']} from {peer}")
            return None
        if not proto.verify(msg, sa.mac_key(bool(msg.get("from_initiator")))):
            self.state.log(f"{ex} from {peer}: integrity check failed, dropped")
            return None
        if natt:
            sa.floated = True
        mid = msg["mid"]
        if mid in sa.responses:
            return sa.responses[mid]
        if mid in sa.inflight:  # a retransmit while the first copy is still being handled
            return None
        sa.inflight.add(mid)
        try:
            if ex == "IKE_AUTH":
                body = await self.respond_auth(sa, msg)
            elif ex == "CREATE_CHILD_SA" and msg.get("rekey_ike"):
                body = self.rekeys.respond_ike(sa, msg)
            elif ex == "CREATE_CHILD_SA":
                body = await self.respond_child(sa, msg, first=False)
            elif ex == "INFORMATIONAL":
                body = await self.respond_info(sa, msg)
            else:
                return None
        finally:
            sa.inflight.discard(mid)
        if body is None:
            return None
        drop = body.pop("_drop_sa", False)
        out = {"exchange": ex, "spi_i": sa.spi_i, "spi_r": sa.spi_r, "mid": mid, "response": True,
               "from_initiator": sa.initiator, **body}
        if sa.keys is not None:
            out = proto.sign(out, sa.mac_key(sa.initiator))
        data = proto.encode(out)
        sa.responses[mid] = data
        if drop:
            self.state.sas.pop(sa.spi_i, None)
        return data

    def respond_init(self, msg: dict, raw: bytes, peer: str, peer_port: int) -> bytes:
        local = str(msg.get("dst", ""))
        try:
            offered = [Combo.from_json(c) for c in msg.get("sa", [])]
        except (KeyError, TypeError, ValueError):
            offered = []
        chosen, conn = None, None
        for c in self.state.config.conns:
            if c.version not in (0, 2) or not addr_match(c.local_addrs, local) or not addr_match(c.remote_addrs, peer):
                continue
            chosen = select(c.proposals, offered)
            if chosen is not None:
                conn = c
                break
        base = {"exchange": "IKE_SA_INIT", "spi_i": msg["spi_i"], "mid": 0, "response": True}
        if conn is None or chosen is None:
            self.state.log(f"IKE_SA_INIT from {peer}: no acceptable proposal found, sending NO_PROPOSAL_CHOSEN")
            return proto.encode({**base, "spi_r": "0" * 16, "notify": "NO_PROPOSAL_CHOSEN"})
        kex = proto.KeyExchange.new()
        sa = IkeSA(uid=next(self.state.ike_uid), conn=conn, initiator=False, spi_i=msg["spi_i"],
                   spi_r=_secrets.token_hex(8), local=local, local_port=self.state.port, remote=peer,
                   remote_port=peer_port, proposal=chosen, ni=msg["nonce"], nr=proto.nonce())
        shared = kex.shared(msg["ke"])
        sa.keys = proto.ike_keys(shared, sa.ni, sa.nr, sa.spi_i, sa.spi_r)
        sa.encap = conn.encap or msg.get("natd_fake") is True  # RFC 7296 2.23: a NAT on either side
        data = proto.encode({**base, "spi_r": sa.spi_r, "sa": [chosen.to_json()], "ke": kex.public_hex(),
                             "nonce": sa.nr, "natd_fake": conn.encap})
        sa.init_req, sa.init_resp = raw, data
        sa.responses[0] = data
        self.state.sas[sa.spi_i] = sa
        return data

    async def respond_auth(self, sa: IkeSA, msg: dict) -> dict | None:
        idi, idr = str(msg.get("idi", "")), msg.get("idr")
        conn = self.state.config.pick_conn(sa.local, sa.remote, idi, idr)
        if conn is None:
            self.state.log(f"looking for peer configs matching {sa.local}[{idr or '%any'}]...{sa.remote}[{idi}]: "
                       "no matching peer config found")
            return {"notify": "AUTHENTICATION_FAILED", "_drop_sa": True}
        my_id = conn.local.id or sa.local
        psk = find_psk(self.state.config.secrets, my_id, idi)
        if psk is None:
            self.state.log(f"no shared key found for '{my_id}' - '{idi}'")
            return {"notify": "AUTHENTICATION_FAILED", "_drop_sa": True}
        want = proto.psk_auth(psk.secret, sa.init_req, sa.nr, idi)
        if not isinstance(msg.get("auth"), str) or not _secrets.compare_digest(want, msg["auth"]):
            self.state.log(f"tried 1 shared key for '{my_id}' - '{idi}', but MAC mismatched")
            return {"notify": "AUTHENTICATION_FAILED", "_drop_sa": True}
        sa.conn, sa.local_id, sa.remote_id = conn, my_id, idi
        sa.state, sa.established_at = "ESTABLISHED", time.time()
        self.lifetimes.arm_ike(sa)
        for other in list(self.state.sas.values()):
            # INITIAL_CONTACT (strongSwan sends it in every IKE_AUTH, see the sample): older
            # IKE_SAs with the same peer and identities are stale -- the peer restarted
            if (other is not sa and other.remote == sa.remote and other.local_id == my_id
                    and other.remote_id == idi and other.state == "ESTABLISHED"):
                self.state.log(f"INITIAL_CONTACT: deleting stale IKE_SA {other.name}[{other.uid}]")
                await self.children.destroy(other)
        self.state.log(f"IKE_SA {conn.name}[{sa.uid}] established between {sa.local}[{my_id}]...{sa.remote}[{idi}]")
        auth_r = proto.psk_auth(psk.secret, sa.init_resp, sa.ni, my_id)
        if "esp" not in msg:  # childless IKE_SA (swanctl --initiate --ike X)
            return {"idr": my_id, "auth": auth_r}
        child = await self.respond_child(sa, msg, first=True)
        if child is None:
            return None  # child_never_up: no answer at all
        return {"idr": my_id, "auth": auth_r, **child}

    async def respond_child(self, sa: IkeSA, msg: dict, first: bool) -> dict | None:
        try:
            tsi = [from_json(t) for t in msg["tsi"]]
            tsr = [from_json(t) for t in msg["tsr"]]
            offered = [Combo.from_json(c) for c in msg["esp"]]
            peer_spi = int(msg["spi"])
        except (KeyError, TypeError, ValueError):
            return {"child_notify": "INVALID_SYNTAX"}
        if not self.children.alive(sa):  # this end is deleting it (RFC 7296 2.25)
            self.state.log(f"CREATE_CHILD_SA on IKE_SA {sa.name}[{sa.uid}] while it is {sa.state}: TEMPORARY_FAILURE")
            return {"child_notify": "TEMPORARY_FAILURE"}
        old = None
        if msg.get("rekey") is not None:
            if self.state.faults.params("rekey_lost") is not None:
                self.state.log(f"fault rekey_lost: not answering the rekey of SPI {int(msg['rekey']):08x}")
                return None
            old = next((c for c in sa.children if c.spi_out == int(msg["rekey"])), None)
            refused = self.rekeys.refuse_rekey(sa, old)
            if refused:
                return {"child_notify": refused}
        cfg, my_tsr, my_tsi = None, [], []
        for ch in sa.conn.children.values():
            if old is not None and ch.name != old.name:
                continue
            lts = [resolve_dynamic(t, sa.local) for t in ch.local_ts]
            rts = [resolve_dynamic(t, sa.remote) for t in ch.remote_ts]
            a, b = narrow(lts, tsr), narrow(rts, tsi)
            if a and b:
                cfg, my_tsr, my_tsi = ch, a, b
                break
        if cfg is None:
            self.state.log(f"{sa.conn.name}: traffic selectors {ts_text(tsi)} === {ts_text(tsr)} unacceptable")
            return {"child_notify": "TS_UNACCEPTABLE"}
        if self.state.never_up(cfg.name):
            self.state.log(f"fault child_never_up: not answering the request for {cfg.name}")
            return None
        chosen = select(installable(cfg.esp_proposals), offered)
        if chosen is None:
            self.state.log(f"{cfg.name}: no acceptable proposal found")
            return {"child_notify": "NO_PROPOSAL_CHOSEN"}
        cipher = chosen.engine_cipher()
        assert cipher is not None
        if first:
            ni, nr, fresh, extra = sa.ni, sa.nr, b"", {}
        else:
            ni, nr = str(msg["nonce"]), proto.nonce()
            kex = proto.KeyExchange.new()
            fresh = kex.shared(str(msg["ke"]))
            extra = {"nonce": nr, "ke": kex.public_hex()}
        children = self.children
        spi_in = children.new_spi()
        keys = proto.child_keys(cipher, sa.keys.sk_d, ni, nr, peer_spi, spi_in, fresh)  # type: ignore[union-attr]
        child = children.new(sa, cfg, next(self.state.child_uid), chosen, cipher, spi_in, peer_spi, my_tsr, my_tsi)
        if old is not None:
            old.state = "REKEYED"  # claimed before the first await: our own timer must not rekey it too
        try:
            # a rekey's outbound association waits for the old child's DELETE
            await children.install(sa, child, keys, initiator_of_child=False, outbound=old is None)
        except IkeSaGone as exc:  # this end's DELETE of the IKE_SA crossed the request
            self.state.log(str(exc))
            return {"child_notify": "TEMPORARY_FAILURE"}
        except EngineError as exc:
            self.state.log(f"unable to install inbound and outbound IPsec SA (SAD) in kernel: {exc}")
            if old is not None:
                old.state = "INSTALLED"
            return {"child_notify": "NO_PROPOSAL_CHOSEN"}
        self.state.log(children.established(sa, child, old))
        return {"esp": [chosen.to_json()], "spi": spi_in, "tsi": [to_json(t) for t in my_tsi],
                "tsr": [to_json(t) for t in my_tsr], **extra}

    async def respond_info(self, sa: IkeSA, msg: dict) -> dict:
        if msg.get("delete_ike"):
            sa.state = "DELETING"  # before the first await: no child may finish installing now
            await self.children.uninstall_all(sa)
            self.state.log(f"received DELETE for IKE_SA {sa.name}[{sa.uid}]")
            return {"_drop_sa": True}
        gone = []
        for spi in msg.get("delete_child", []):
            for c in list(sa.children):
                if c.spi_out != int(spi):
                    continue
                if c.state in ("DELETED", "DELETING"):
                    if c.expiring and not sa.initiator:
                        # both ends' life_time ran out at once: one of them recreates the
                        # child, the IKE_SA's initiator (twin rule, against duplicates)
                        c.recreate = False
                    continue  # already going: no DELETE back (child_delete.c process_payloads)
                gone.append(c.spi_in)
                if c.state == "REKEYED":
                    await self.rekeys.on_delete_rekeyed(sa, c)
                    continue
                c.state = "DELETING"  # before the first await: our own expiry must not recreate it
                await self.children.uninstall(sa, c)
                sa.children.remove(c)
                c.state = "DESTROYING"
                self.state.log(f"closed CHILD_SA {c.name}{{{c.uid}}} on DELETE")
        return {"delete_child": gone}
