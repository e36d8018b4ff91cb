"""`python -m twin.ike.daemon --host-dir DIR`: the appliance's charon, in its namespace.

Why: the suite brings tunnels up with `swanctl` exactly as on hardware; this daemon
negotiates them with the peer appliance's daemon over UDP 500 (twin.ike.proto -- the
twin's own protocol, NOT interoperable with real IKEv2) and installs each child's two
associations into the local ESP engine (DIR/engine.sock).  Outcomes follow strongSwan
5.9.8: the responder picks a connection by addresses and identities (best match, ties
in load order); children whose selectors do not fit that connection's children get
TS_UNACCEPTABLE; an established IKE_SA with the same addresses, identities and
proposals is reused for further children (CREATE_CHILD_SA); no common proposal gives
NO_PROPOSAL_CHOSEN; a wrong key AUTHENTICATION_FAILED; an unreachable peer retransmits
(5 times by default, timing shortened, DIR/host.json `ike` or $TWIN_IKE_RETRANSMIT) and
gives up.

Deliberate differences from strongSwan, documented so nobody mistakes them:
- `start_action = trap` is emulated as start-on-load (no acquires in the twin).
- No automatic rekeying/expiry (the times are shown in --list-sas, `--rekey` works).
- A CREATE_CHILD_SA that times out fails that child only; the IKE_SA is kept.
- ESP DH groups (PFS) are not compared; every CREATE_CHILD_SA uses a fresh X25519 anyway.
- `offload` of each association: DIR/host.json `kernel_cipher` (bool, or a map from
  tunnel/connection name to bool); a connection named `<tunnel>` or `<tunnel>-...` uses
  its tunnel's flag.  kernel -> offload false.

Faults (DIR/faults.json, re-read per packet): `peer_unreachable {}` -- every IKE packet
received is ignored; `child_never_up {child}` -- requests carrying that child are never
sent (initiator) or never answered (responder): the initiator retransmits and gives up,
no association is installed.

On start, DIR/root/usr/local/etc/swanctl/swanctl.conf (if present) is loaded and its
start actions honoured, as OPNsense does at boot.
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import itertools
import json
import os
import secrets as _secrets
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

from twin.runtime import HostDir, read_json

from . import proto
from .conf import Child, ConfSyntaxError, Config, Connection, SharedSecret, load
from .engine_client import EngineClient, EngineError
from .model import ChildSA, IkeSA, addr_match, find_psk, id_match
from .proposals import Combo, installable, select
from .ts import TS, from_json, narrow, resolve_dynamic, to_json

SWANCTL_CONF = "/usr/local/etc/swanctl/swanctl.conf"
Log = Callable[[str], None]


class Timing:
    """Retransmission schedule: timeout * base**k for k = 0..tries (strongSwan's formula)."""

    def __init__(self, timeout: float = 0.15, base: float = 1.5, tries: int = 5) -> None:
        self.timeout, self.base, self.tries = timeout, base, tries

    @classmethod
    def load(cls, host: dict[str, Any]) -> "Timing":
        t = cls()
        cfg = host.get("ike") or {}
        t.timeout = float(cfg.get("retransmit_timeout", t.timeout))
        t.base = float(cfg.get("retransmit_base", t.base))
        t.tries = int(cfg.get("retransmit_tries", t.tries))
        env = os.environ.get("TWIN_IKE_RETRANSMIT")
        if env:
            a, b, c = env.split(",")
            t.timeout, t.base, t.tries = float(a), float(b), int(c)
        return t

    def waits(self) -> list[float]:
        return [self.timeout * self.base ** k for k in range(self.tries + 1)]


class Failed(Exception):
    """An initiate/terminate step failed; the message is swanctl's errmsg."""


def _fmt(addr: str, port: int) -> str:
    return f"{addr}[{port}]"


def _ts_text(ts: list[TS]) -> str:
    return " ".join(str(t) for t in ts)


class _Endpoint(asyncio.DatagramProtocol):
    def __init__(self, daemon: "Daemon") -> None:
        self.daemon = daemon
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:  # type: ignore[override]
        self.daemon.on_datagram(data, addr, self)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable etc.: retransmits decide
        pass


class Daemon:
    def __init__(self, host_dir: str | Path, port: int = 500) -> None:
        self.hd = HostDir(host_dir)
        self.port = port
        self.host = read_json(self.hd.host_json, default={})
        self.timing = Timing.load(self.host)
        self.engine = EngineClient(self.hd.engine_sock)
        self.conns: list[Connection] = []
        self.secrets: list[SharedSecret] = []
        self.sas: dict[str, IkeSA] = {}          # by initiator SPI
        self.pending: dict[tuple[str, int], asyncio.Future] = {}
        self.listeners: list[_Endpoint] = []
        self.clients: dict[str, _Endpoint] = {}
        self.ike_uid = itertools.count(1)
        self.child_uid = itertools.count(1)
        self.reqids: dict[tuple[str, str], int] = {}
        self.conn_locks: dict[tuple, asyncio.Lock] = {}
        self.tasks: set[asyncio.Task] = set()
        self.started = time.time()

    # ------------------------------------------------------------ plumbing
    def log(self, line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)

    def faults(self) -> dict[str, dict]:
        try:
            data = read_json(self.hd.faults_json, default={})
            return data if isinstance(data, dict) else {}
        except (ValueError, OSError):
            return {}

    def never_up(self, child: str) -> bool:
        f = self.faults().get("child_never_up")
        return bool(f) and f.get("child") == child

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for fam, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            sock = socket.socket(fam, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if fam == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((host, self.port))
            except OSError as exc:
                sock.close()
                if fam == socket.AF_INET6 and exc.errno in (97, 99):  # no IPv6 in this namespace
                    continue
                raise
            _, ep = await loop.create_datagram_endpoint(lambda: _Endpoint(self), sock=sock)
            self.listeners.append(ep)
        try:
            self.hd.ike_sock.unlink()
        except FileNotFoundError:
            pass
        self.server = await asyncio.start_unix_server(self.on_client, path=str(self.hd.ike_sock),
                                                      limit=16 * 1024 * 1024)
        boot_conf = self.hd.rootpath(SWANCTL_CONF)
        if boot_conf.is_file():
            try:
                res = self.load_file(str(boot_conf))
                self.log(f"boot: loaded {len(res['loaded'])} connections from {boot_conf}")
            except Exception as exc:  # a broken file must not keep the daemon down
                self.log(f"boot: loading {boot_conf} failed: {exc}")
        self.log(f"listening on UDP {self.port}, control {self.hd.ike_sock}")

    async def _client(self, local: str) -> _Endpoint:
        ep = self.clients.get(local)
        if ep is None or ep.transport is None or ep.transport.is_closing():
            # bound to <local>:500 next to the wildcard listener (SO_REUSEADDR on both), so
            # requests leave from port 500 as strongSwan's do; the kernel delivers datagrams
            # for this address to this socket, and on_datagram serves them all alike
            loop = asyncio.get_running_loop()
            fam = socket.AF_INET6 if ":" in local else socket.AF_INET
            sock = socket.socket(fam, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((local, self.port))
            except OSError:
                sock.bind((local, 0))
            _, ep = await loop.create_datagram_endpoint(lambda: _Endpoint(self), sock=sock)
            self.clients[local] = ep
        return ep

    def spawn(self, coro) -> asyncio.Task:
        t = asyncio.ensure_future(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    # ------------------------------------------------------------ configuration
    def load_file(self, path: str) -> dict[str, Any]:
        """Replace the loaded configuration (swanctl --load-all): returns what happened."""
        if not os.path.isfile(path):
            unloaded = len(self.conns)
            self.conns = []
            return {"missing": path, "file": path, "loaded": [], "errors": [], "unloaded": unloaded,
                    "secrets": [], "found": 0}
        try:
            cfg = load(path)
        except ConfSyntaxError as exc:
            unloaded = len(self.conns)
            self.conns = []
            return {"syntax_error": str(exc), "file": path, "loaded": [], "errors": [],
                    "unloaded": unloaded, "secrets": [], "found": 0}
        return self.apply(cfg)

    def apply(self, cfg: Config) -> dict[str, Any]:
        new_names = {c.name for c in cfg.connections} | {e.name for e in cfg.errors if e.kind != "secret"}
        unloaded = sum(1 for c in self.conns if c.name not in new_names)
        self.conns = list(cfg.connections)
        self.secrets = list(cfg.secrets)
        errors = [{"name": e.name, "why": e.why, "where": e.where, "kind": e.kind} for e in cfg.errors]
        warnings = list(cfg.warnings) + [f"{c.name}: {w}" for c in cfg.connections for w in c.warnings]
        for c in self.conns:
            for ch in c.children.values():
                if ch.start_action in ("start", "trap", "trap|start", "start|trap"):
                    self.spawn(self._auto_start(ch.name, c.name))
        return {"loaded": [c.name for c in cfg.connections], "errors": errors, "unloaded": unloaded,
                "secrets": [s.name for s in cfg.secrets],
                "found": len(cfg.connections) + sum(1 for e in cfg.errors if e.kind != "secret"),
                "warnings": warnings}

    async def _auto_start(self, child: str, conn: str) -> None:
        try:
            await self.initiate(child, conn, lambda line: self.log(f"start_action: {line}"))
        except Failed as exc:
            self.log(f"start_action: {conn}/{child}: {exc}")

    def find_child_cfg(self, child: str, ike: str | None) -> tuple[Connection, Child]:
        for c in self.conns:
            if ike and c.name != ike:
                continue
            if child in c.children:
                return c, c.children[child]
        raise Failed(f"CHILD_SA config '{child}' not found")

    def reqid(self, conn: str, child: str) -> int:
        key = (conn, child)
        if key not in self.reqids:
            self.reqids[key] = len(self.reqids) + 1
        return self.reqids[key]

    def offload_for(self, conn: str) -> bool:
        kc = self.host.get("kernel_cipher", False)
        if isinstance(kc, bool):
            return not kc
        if isinstance(kc, dict):
            if conn in kc:
                return not bool(kc[conn])
            # the suite names connections `hil-<tunnel>-<tags>`; the longest tunnel name wins
            hits = [(len(n), f) for n, f in kc.items()
                    if conn.startswith(f"hil-{n}-") or conn.startswith(f"{n}-") or conn == f"hil-{n}"]
            if hits:
                return not bool(max(hits)[1])
        return True

    def replay_window(self) -> int:
        return int(self.host.get("replay_window", 32))

    # ------------------------------------------------------------ addresses
    def local_for(self, conn: Connection, remote: str) -> str:
        for a in conn.local_addrs:
            try:
                ip = ipaddress.ip_address(a)
                if ip.version == ipaddress.ip_address(remote).version:
                    return str(ip)
            except ValueError:
                continue
        fam = socket.AF_INET6 if ":" in remote else socket.AF_INET
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.connect((remote, conn.remote_port))
            return s.getsockname()[0]

    def remote_for(self, conn: Connection) -> str:
        for a in conn.remote_addrs:
            try:
                return str(ipaddress.ip_address(a))
            except ValueError:
                continue
        raise Failed(f"establishing CHILD_SA failed")

    # ------------------------------------------------------------ engine
    async def install(self, sa: IkeSA, child: ChildSA, keys: proto.ChildKeys, initiator_of_child: bool) -> None:
        """Both associations of a child; the inbound one first, as the kernel would."""
        enc_in, auth_in = (keys.enc_ri, keys.auth_ri) if initiator_of_child else (keys.enc_ir, keys.auth_ir)
        enc_out, auth_out = (keys.enc_ir, keys.auth_ir) if initiator_of_child else (keys.enc_ri, keys.auth_ri)
        common = {"cipher": child.cipher, "reqid": child.reqid, "child": child.name, "conn": child.conn,
                  "local_ts": [str(t) for t in child.local_ts], "remote_ts": [str(t) for t in child.remote_ts],
                  "replay_window": self.replay_window(), "offload": child.offload}
        sa_in = {"spi": child.spi_in, "direction": "in", "src": sa.remote, "dst": sa.local,
                 "enc_key": enc_in.hex(), "auth_key": auth_in.hex() if auth_in else None, **common}
        sa_out = {"spi": child.spi_out, "direction": "out", "src": sa.local, "dst": sa.remote,
                  "enc_key": enc_out.hex(), "auth_key": auth_out.hex() if auth_out else None, **common}
        await self.engine.add_sa(sa_in)
        try:
            await self.engine.add_sa(sa_out)
        except EngineError:
            await self._del(child.spi_in, sa.local)
            raise

    async def _del(self, spi: int, dst: str) -> None:
        try:
            await self.engine.del_sa(spi, dst)
        except EngineError as exc:
            self.log(f"engine del_sa {spi:08x}: {exc}")

    async def uninstall(self, sa: IkeSA, child: ChildSA) -> None:
        await self._del(child.spi_in, sa.local)
        await self._del(child.spi_out, sa.remote)

    def new_spi(self) -> int:
        used = {c.spi_in for s in self.sas.values() for c in s.children}
        while True:
            spi = _secrets.randbelow(0xFFFFFFFF - 0x100) + 0x100
            spi |= 0xC0000000  # strongSwan's SPIs start with c (kernel allocator range)
            if spi not in used:
                return spi

    # ------------------------------------------------------------ sending requests
    async def exchange(self, sa: IkeSA, msg: dict[str, Any], log: Log, desc: str,
                       suppress: bool = False) -> tuple[dict, bytes] | None:
        """Send one request with retransmits; the parsed response or None after giving up."""
        mid = sa.next_mid
        sa.next_mid += 1
        msg = {**msg, "spi_i": sa.spi_i, "spi_r": sa.spi_r, "mid": mid, "response": False,
               "from_initiator": sa.initiator, "dst": sa.remote}
        if sa.keys is not None:
            msg = proto.sign(msg, sa.mac_key(sa.initiator))
        data = proto.encode(msg)
        if desc:
            log(f"[ENC] generating {msg['exchange']} request {mid} [ {desc} ]")
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.pending[(sa.spi_i, mid)] = fut
        ep = await self._client(sa.local)
        try:
            for k, wait in enumerate(self.timing.waits()):
                if k:
                    log(f"[IKE] retransmit {k} of request with message ID {mid}")
                if not suppress:
                    assert ep.transport is not None
                    ep.transport.sendto(data, (sa.remote, sa.remote_port))
                port = ep.transport.get_extra_info("sockname")[1] if ep.transport else 0
                log(f"[NET] sending packet: from {_fmt(sa.local, port)} to {_fmt(sa.remote, sa.remote_port)} ({len(data)} bytes)")
                try:
                    resp, raw, addr = await asyncio.wait_for(asyncio.shield(fut), wait)
                    log(f"[NET] received packet: from {_fmt(addr[0], addr[1])} to {_fmt(sa.local, port)} ({len(raw)} bytes)")
                    return resp, raw
                except asyncio.TimeoutError:
                    continue
            log(f"[IKE] giving up after {self.timing.tries} retransmits")
            return None
        finally:
            self.pending.pop((sa.spi_i, mid), None)

    # ------------------------------------------------------------ receiving
    def on_datagram(self, data: bytes, addr, ep: _Endpoint) -> None:
        if "peer_unreachable" in self.faults():
            return
        try:
            msg = proto.decode(data)
        except proto.ProtoError as exc:
            self.log(f"dropped datagram from {addr[0]}: {exc}")
            return
        if msg["response"]:
            fut = self.pending.get((msg["spi_i"], msg["mid"]))
            if fut is not None and not fut.done():
                fut.set_result((msg, data, addr))
            return
        self.spawn(self.on_request(msg, data, addr, ep))

    async def on_request(self, msg: dict, raw: bytes, addr, ep: _Endpoint) -> None:
        try:
            reply = await self.respond(msg, raw, addr)
        except Exception as exc:  # never let one bad packet kill the daemon
            self.log(f"error handling {msg.get('exchange')} from {addr[0]}: {exc!r}")
            return
        if reply is not None and ep.transport is not None:
            ep.transport.sendto(reply, addr)

    async def respond(self, msg: dict, raw: bytes, addr) -> bytes | None:
        ex = msg["exchange"]
        peer = addr[0].split("%")[0]
        if peer.startswith("::ffff:"):
            peer = peer[7:]
        sa = self.sas.get(msg["spi_i"])
        if ex == "IKE_SA_INIT":
            if sa is not None and not sa.initiator and 0 in sa.responses:
                return sa.responses[0]
            return self.respond_init(msg, raw, peer, addr[1])
        if sa is None or sa.keys is None:
            self.log(f"{ex} for unknown IKE_SA {msg['spi_i']} from {peer}")
            return None
        if not proto.verify(msg, sa.mac_key(bool(msg.get("from_initiator")))):
            self.log(f"{ex} from {peer}: integrity check failed, dropped")
            return None
        mid = msg["mid"]
        if mid in sa.responses:
            return sa.responses[mid]
        if mid in sa.inflight:  # a retransmit while the first copy is still being handled
            return None
        sa.inflight.add(mid)
        try:
            if ex == "IKE_AUTH":
                body = await self.respond_auth(sa, msg)
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
            self.sas.pop(sa.spi_i, None)
        return data

    def respond_init(self, msg: dict, raw: bytes, peer: str, peer_port: int) -> bytes:
        local = str(msg.get("dst", ""))
        try:
            offered = [Combo.from_json(c) for c in msg.get("sa", [])]
        except (KeyError, TypeError, ValueError):
            offered = []
        chosen, conn = None, None
        for c in self.conns:
            if c.version not in (0, 2) or not addr_match(c.local_addrs, local) or not addr_match(c.remote_addrs, peer):
                continue
            chosen = select(c.proposals, offered)
            if chosen is not None:
                conn = c
                break
        base = {"exchange": "IKE_SA_INIT", "spi_i": msg["spi_i"], "mid": 0, "response": True}
        if conn is None or chosen is None:
            self.log(f"IKE_SA_INIT from {peer}: no acceptable proposal found, sending NO_PROPOSAL_CHOSEN")
            return proto.encode({**base, "spi_r": "0" * 16, "notify": "NO_PROPOSAL_CHOSEN"})
        kex = proto.KeyExchange.new()
        sa = IkeSA(uid=next(self.ike_uid), conn=conn, initiator=False, spi_i=msg["spi_i"],
                   spi_r=_secrets.token_hex(8), local=local, local_port=self.port, remote=peer,
                   remote_port=peer_port, proposal=chosen, ni=msg["nonce"], nr=proto.nonce())
        shared = kex.shared(msg["ke"])
        sa.keys = proto.ike_keys(shared, sa.ni, sa.nr, sa.spi_i, sa.spi_r)
        data = proto.encode({**base, "spi_r": sa.spi_r, "sa": [chosen.to_json()], "ke": kex.public_hex(),
                             "nonce": sa.nr})
        sa.init_req, sa.init_resp = raw, data
        sa.responses[0] = data
        self.sas[sa.spi_i] = sa
        return data

    def pick_conn(self, local: str, peer: str, idi: str, idr: str | None) -> Connection | None:
        best, best_score = None, 0
        for c in self.conns:
            qa = addr_match(c.local_addrs, local) and addr_match(c.remote_addrs, peer)
            if not qa:
                continue
            if idr is not None:
                ql = id_match(c.local.id if c.local.id is not None else local, idr)
            else:
                ql = 1
            qr = id_match(c.remote.id, idi)
            if not ql or not qr:
                continue
            score = ql + qr
            if score > best_score:  # ties: the first loaded wins
                best, best_score = c, score
        return best

    async def respond_auth(self, sa: IkeSA, msg: dict) -> dict | None:
        idi, idr = str(msg.get("idi", "")), msg.get("idr")
        conn = self.pick_conn(sa.local, sa.remote, idi, idr)
        if conn is None:
            self.log(f"looking for peer configs matching {sa.local}[{idr or '%any'}]...{sa.remote}[{idi}]: "
                     "no matching peer config found")
            return {"notify": "AUTHENTICATION_FAILED", "_drop_sa": True}
        my_id = conn.local.id or sa.local
        psk = find_psk(self.secrets, my_id, idi)
        if psk is None:
            self.log(f"no shared key found for '{my_id}' - '{idi}'")
            return {"notify": "AUTHENTICATION_FAILED", "_drop_sa": True}
        want = proto.psk_auth(psk.secret, sa.init_req, sa.nr, idi)
        if not isinstance(msg.get("auth"), str) or not _secrets.compare_digest(want, msg["auth"]):
            self.log(f"tried 1 shared key for '{my_id}' - '{idi}', but MAC mismatched")
            return {"notify": "AUTHENTICATION_FAILED", "_drop_sa": True}
        sa.conn, sa.local_id, sa.remote_id = conn, my_id, idi
        sa.state, sa.established_at = "ESTABLISHED", time.time()
        for other in list(self.sas.values()):
            # INITIAL_CONTACT (strongSwan sends it in every IKE_AUTH, see the sample): older
            # IKE_SAs with the same peer and identities are stale -- the peer restarted
            if (other is not sa and other.remote == sa.remote and other.local_id == my_id
                    and other.remote_id == idi and other.state == "ESTABLISHED"):
                self.log(f"INITIAL_CONTACT: deleting stale IKE_SA {other.name}[{other.uid}]")
                await self._destroy(other)
        self.log(f"IKE_SA {conn.name}[{sa.uid}] established between {sa.local}[{my_id}]...{sa.remote}[{idi}]")
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
        old = None
        if msg.get("rekey") is not None:
            old = next((c for c in sa.children if c.spi_out == int(msg["rekey"])), None)
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
            self.log(f"{sa.conn.name}: traffic selectors {_ts_text(tsi)} === {_ts_text(tsr)} unacceptable")
            return {"child_notify": "TS_UNACCEPTABLE"}
        if self.never_up(cfg.name):
            self.log(f"fault child_never_up: not answering the request for {cfg.name}")
            return None
        chosen = select(installable(cfg.esp_proposals), offered)
        if chosen is None:
            self.log(f"{cfg.name}: no acceptable proposal found")
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
        spi_in = self.new_spi()
        keys = proto.child_keys(cipher, sa.keys.sk_d, ni, nr, peer_spi, spi_in, fresh)  # type: ignore[union-attr]
        child = ChildSA(uid=next(self.child_uid), name=cfg.name, conn=sa.conn.name,
                        reqid=self.reqid(sa.conn.name, cfg.name), proposal=chosen, cipher=cipher,
                        spi_in=spi_in, spi_out=peer_spi, local_ts=my_tsr, remote_ts=my_tsi,
                        rekey_time=cfg.rekey_time, life_time=cfg.life_time,
                        offload=self.offload_for(sa.conn.name))
        try:
            await self.install(sa, child, keys, initiator_of_child=False)
        except EngineError as exc:
            self.log(f"unable to install inbound and outbound IPsec SA (SAD) in kernel: {exc}")
            return {"child_notify": "NO_PROPOSAL_CHOSEN"}
        sa.children.append(child)
        if old is not None:
            old.state = "REKEYED"
        self.log(f"CHILD_SA {child.name}{{{child.uid}}} established with SPIs {child.spi_in:08x}_i "
                 f"{child.spi_out:08x}_o and TS {_ts_text(child.local_ts)} === {_ts_text(child.remote_ts)}")
        return {"esp": [chosen.to_json()], "spi": spi_in, "tsi": [to_json(t) for t in my_tsi],
                "tsr": [to_json(t) for t in my_tsr], **extra}

    async def respond_info(self, sa: IkeSA, msg: dict) -> dict:
        if msg.get("delete_ike"):
            for c in list(sa.children):
                await self.uninstall(sa, c)
            sa.children.clear()
            sa.state = "DELETING"
            self.log(f"received DELETE for IKE_SA {sa.name}[{sa.uid}]")
            return {"_drop_sa": True}
        gone = []
        for spi in msg.get("delete_child", []):
            for c in list(sa.children):
                if c.spi_out == int(spi):
                    await self.uninstall(sa, c)
                    sa.children.remove(c)
                    gone.append(c.spi_in)
                    self.log(f"closed CHILD_SA {c.name}{{{c.uid}}} on DELETE")
        return {"delete_child": gone}

    # ------------------------------------------------------------ initiating
    def _lock(self, key: tuple) -> asyncio.Lock:
        if key not in self.conn_locks:
            self.conn_locks[key] = asyncio.Lock()
        return self.conn_locks[key]

    async def initiate(self, child_name: str | None, ike_name: str | None, log: Log) -> ChildSA | None:
        """Bring up a child (over an existing IKE_SA with the same peer config if there is
        one), or with only `ike_name` an IKE_SA without a child (childless)."""
        if child_name:
            conn, cfg = self.find_child_cfg(child_name, ike_name)
        else:
            conn = next((c for c in self.conns if c.name == ike_name), None)
            if conn is None:
                raise Failed(f"IKE_SA config '{ike_name}' not found")
            cfg = None
        remote = self.remote_for(conn)
        local = self.local_for(conn, remote)
        local_id = conn.local.id or local
        async with self._lock((local, remote, local_id, conn.remote.id)):
            sa = next((s for s in self.sas.values()
                       if s.same_peer_config(conn, local, remote, local_id)), None)
            if sa is None:
                return await self._initiate_new(conn, cfg, local, remote, local_id, log)
        if cfg is None:
            return None  # the IKE_SA is already up
        return await self._create_child(sa, cfg, log)

    def _child_request(self, sa: IkeSA, conn: Connection, cfg: Child, spi: int) -> dict:
        lts = [resolve_dynamic(t, sa.local) for t in cfg.local_ts]
        rts = [resolve_dynamic(t, sa.remote) for t in cfg.remote_ts]
        return {"esp": [c.to_json() for c in installable(cfg.esp_proposals)], "spi": spi,
                "tsi": [to_json(t) for t in lts], "tsr": [to_json(t) for t in rts]}

    async def _initiate_new(self, conn: Connection, cfg: Child | None, local: str, remote: str,
                            local_id: str, log: Log) -> ChildSA | None:
        fail = f"establishing CHILD_SA '{cfg.name}' failed" if cfg else f"establishing IKE_SA '{conn.name}' failed"
        sa = IkeSA(uid=next(self.ike_uid), conn=conn, initiator=True, spi_i=_secrets.token_hex(8),
                   spi_r="0" * 16, local=local, local_port=0, remote=remote,
                   remote_port=self.port if conn.remote_port == 500 else conn.remote_port, local_id=local_id, ni=proto.nonce())
        self.sas[sa.spi_i] = sa
        try:
            log(f"[IKE] initiating IKE_SA {conn.name}[{sa.uid}] to {remote}")
            kex = proto.KeyExchange.new()
            init = {"exchange": "IKE_SA_INIT", "sa": [c.to_json() for c in conn.proposals],
                    "ke": kex.public_hex(), "nonce": sa.ni}
            sa.init_req = proto.encode({**init, "spi_i": sa.spi_i, "spi_r": sa.spi_r, "mid": 0,
                                        "response": False, "from_initiator": True, "dst": remote})
            got = await self.exchange(sa, init, log,
                                      "SA KE No N(NATD_S_IP) N(NATD_D_IP) N(FRAG_SUP) N(HASH_ALG) N(REDIR_SUP)")
            if got is None:
                log("[IKE] establishing IKE_SA failed, peer not responding")
                raise Failed(fail)
            resp, raw = got
            if resp.get("notify"):
                log(f"[ENC] parsed IKE_SA_INIT response 0 [ N({_short(resp['notify'])}) ]")
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
            sa.keys = proto.ike_keys(shared, sa.ni, sa.nr, sa.spi_i, sa.spi_r)
            log(f"[CFG] selected proposal: {chosen.selected()}")
            peer_id_cfg = conn.remote.id if conn.remote.id not in (None, "%any") else None
            psk = find_psk(self.secrets, local_id, peer_id_cfg or remote)
            if psk is None:
                log(f"[IKE] no shared key found for '{local_id}' - '{peer_id_cfg or '%any'}'")
                raise Failed(fail)
            log(f"[IKE] authentication of '{local_id}' (myself) with pre-shared key")
            spi = self.new_spi()
            uid = next(self.child_uid)
            auth = {"exchange": "IKE_AUTH", "idi": local_id,
                    "auth": proto.psk_auth(psk.secret, sa.init_req, sa.nr, local_id)}
            if cfg is not None:
                log(f"[IKE] establishing CHILD_SA {cfg.name}{{{uid}}}")
                auth.update(self._child_request(sa, conn, cfg, spi))
            if peer_id_cfg:
                auth["idr"] = peer_id_cfg
            got = await self.exchange(
                sa, auth, log, "IDi N(INIT_CONTACT) IDr AUTH SA TSi TSr N(MOBIKE_SUP) N(ADD_4_ADDR) "
                "N(MULT_AUTH) N(EAP_ONLY) N(MSG_ID_SYN_SUP)", suppress=bool(cfg and self.never_up(cfg.name)))
            if got is None:
                log("[IKE] establishing IKE_SA failed, peer not responding")
                raise Failed(fail)
            resp, _ = got
            if not proto.verify(resp, sa.mac_key(False)):
                log("[IKE] IKE_AUTH response failed the integrity check")
                raise Failed(fail)
            if resp.get("notify"):
                log(f"[ENC] parsed IKE_AUTH response 1 [ N({_short(resp['notify'])}) ]")
                log(f"[IKE] received {resp['notify']} notify error")
                raise Failed(fail)
            idr = str(resp.get("idr", ""))
            notify = resp.get("child_notify")
            kid = f"N({_short(notify)}) " if notify else ("SA TSi TSr " if cfg is not None else "")
            payloads = f"IDr AUTH {kid}N(MOBIKE_SUP) N(ADD_4_ADDR)"
            log(f"[ENC] parsed IKE_AUTH response 1 [ {payloads} ]")
            psk_r = find_psk(self.secrets, local_id, idr)
            if psk_r is None or not _secrets.compare_digest(
                    proto.psk_auth(psk_r.secret, sa.init_resp, sa.ni, idr), str(resp.get("auth", ""))):
                log(f"[IKE] authentication of '{idr}' with pre-shared key failed")
                raise Failed(fail)
            log(f"[IKE] authentication of '{idr}' with pre-shared key successful")
            sa.remote_id, sa.state, sa.established_at = idr, "ESTABLISHED", time.time()
            log(f"[IKE] IKE_SA {conn.name}[{sa.uid}] established between {sa.local}[{local_id}]...{remote}[{idr}]")
            log(f"[IKE] scheduling rekeying in {conn.rekey_time}s")
            log(f"[IKE] maximum IKE_SA lifetime {int(conn.rekey_time * 1.1)}s")
            if cfg is None:
                return None
            return await self._finish_child(sa, cfg, resp, spi, sa.ni, sa.nr, b"", log, fail, uid)
        except BaseException:
            if sa.state != "ESTABLISHED":
                self.sas.pop(sa.spi_i, None)
            raise

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
        child = ChildSA(uid=uid, name=cfg.name, conn=sa.conn.name,
                        reqid=self.reqid(sa.conn.name, cfg.name), proposal=chosen, cipher=cipher,
                        spi_in=spi, spi_out=peer_spi, local_ts=tsi, remote_ts=tsr,
                        rekey_time=cfg.rekey_time, life_time=cfg.life_time,
                        offload=self.offload_for(sa.conn.name))
        try:
            await self.install(sa, child, keys, initiator_of_child=True)
        except EngineError as exc:
            log("[IKE] unable to install inbound and outbound IPsec SA (SAD) in kernel")
            log("[IKE] failed to establish CHILD_SA, keeping IKE_SA")
            self.log(f"engine: {exc}")
            raise Failed(fail) from None
        sa.children.append(child)
        if old is not None:
            old.state = "REKEYED"
        log(f"[IKE] CHILD_SA {child.name}{{{child.uid}}} established with SPIs {child.spi_in:08x}_i "
            f"{child.spi_out:08x}_o and TS {_ts_text(child.local_ts)} === {_ts_text(child.remote_ts)}")
        return child

    async def _create_child(self, sa: IkeSA, cfg: Child, log: Log, old: ChildSA | None = None) -> ChildSA:
        fail = f"establishing CHILD_SA '{cfg.name}' failed"
        async with sa.req_lock:
            spi = self.new_spi()
            kex = proto.KeyExchange.new()
            ni = proto.nonce()
            uid = next(self.child_uid)
            if old is None:
                log(f"[IKE] establishing CHILD_SA {cfg.name}{{{uid}}}")
            req = {"exchange": "CREATE_CHILD_SA", "nonce": ni, "ke": kex.public_hex(),
                   **self._child_request(sa, sa.conn, cfg, spi)}
            if old is not None:
                req["rekey"] = old.spi_in
                req["tsi"] = [to_json(t) for t in old.local_ts]
                req["tsr"] = [to_json(t) for t in old.remote_ts]
            own_fault = self.never_up(cfg.name)
            got = await self.exchange(sa, req, log, "N(REKEY_SA) SA No KE TSi TSr" if old else "SA No KE TSi TSr",
                                      suppress=own_fault)
            if got is None:
                if not own_fault and not await self._alive(sa):
                    # strongSwan destroys an IKE_SA whose request timed out (e.g. the peer
                    # rebooted); the twin first checks liveness so a peer that ignores one
                    # child only (child_never_up) keeps the other children
                    log(f"[IKE] peer not responding, deleting IKE_SA {sa.name}[{sa.uid}]")
                    await self._destroy(sa)
                raise Failed(fail)
            resp, _ = got
            if not proto.verify(resp, sa.mac_key(not sa.initiator)):
                log("[IKE] CREATE_CHILD_SA response failed the integrity check")
                raise Failed(fail)
            notify = resp.get("child_notify")
            log(f"[ENC] parsed CREATE_CHILD_SA response {resp['mid']} [ "
                + (f"N({_short(notify)})" if notify else "SA No KE TSi TSr") + " ]")
            try:
                fresh = b"" if notify else kex.shared(str(resp["ke"]))
                nr = "" if notify else str(resp["nonce"])
            except (KeyError, proto.ProtoError) as exc:
                log(f"[IKE] invalid CREATE_CHILD_SA response: {exc}")
                raise Failed(fail) from None
            return await self._finish_child(sa, cfg, resp, spi, ni, nr, fresh, log, fail, uid, old)

    async def _alive(self, sa: IkeSA) -> bool:
        """An empty INFORMATIONAL (a liveness check) with the normal retransmits."""
        got = await self.exchange(sa, {"exchange": "INFORMATIONAL"}, lambda line: self.log(f"dpd: {line}"), "")
        return got is not None

    async def _destroy(self, sa: IkeSA) -> None:
        """Forget an IKE_SA and its children locally (no DELETE sent)."""
        for c in list(sa.children):
            await self.uninstall(sa, c)
        sa.children.clear()
        sa.state = "DESTROYING"
        self.sas.pop(sa.spi_i, None)

    # ------------------------------------------------------------ terminate / rekey
    async def delete_child(self, sa: IkeSA, child: ChildSA, log: Log) -> None:
        log(f"[IKE] closing CHILD_SA {child.name}{{{child.uid}}} with SPIs {child.spi_in:08x}_i "
            f"{child.spi_out:08x}_o and TS {_ts_text(child.local_ts)} === {_ts_text(child.remote_ts)}")
        log(f"[IKE] sending DELETE for ESP CHILD_SA with SPI {child.spi_in:08x}")
        child.state = "DELETING"
        async with sa.req_lock:
            got = await self.exchange(sa, {"exchange": "INFORMATIONAL", "delete_child": [child.spi_in]},
                                      log, "D")
        if got is not None:
            log(f"[ENC] parsed INFORMATIONAL response {got[0]['mid']} [ D ]")
        await self.uninstall(sa, child)
        if child in sa.children:
            sa.children.remove(child)
        log("[IKE] CHILD_SA closed")

    async def delete_ike(self, sa: IkeSA, log: Log) -> None:
        log(f"[IKE] deleting IKE_SA {sa.name}[{sa.uid}] between {sa.local}[{sa.local_id}]..."
            f"{sa.remote}[{sa.remote_id}]")
        log(f"[IKE] sending DELETE for IKE_SA {sa.name}[{sa.uid}]")
        sa.state = "DELETING"
        async with sa.req_lock:
            got = await self.exchange(sa, {"exchange": "INFORMATIONAL", "delete_ike": True}, log, "D")
        if got is not None:
            log(f"[ENC] parsed INFORMATIONAL response {got[0]['mid']} [ ]")
        for c in list(sa.children):
            await self.uninstall(sa, c)
        sa.children.clear()
        self.sas.pop(sa.spi_i, None)
        log("[IKE] IKE_SA deleted")

    async def terminate(self, ike: str | None, child: str | None, log: Log) -> int:
        n = 0
        for sa in list(self.sas.values()):
            if sa.state != "ESTABLISHED":
                continue
            if child:
                for c in list(sa.children):
                    if c.name == child and (ike is None or sa.name == ike):
                        await self.delete_child(sa, c, log)
                        n += 1
            elif ike and sa.name == ike:
                await self.delete_ike(sa, log)
                n += 1
        if not n:
            raise Failed("no matching SAs to terminate found")
        return n

    async def rekey(self, child: str | None, ike: str | None, log: Log) -> int:
        n = 0
        for sa in list(self.sas.values()):
            if sa.state != "ESTABLISHED":
                continue
            for c in list(sa.children):
                if c.state != "INSTALLED" or (child and c.name != child) or (ike and sa.name != ike):
                    continue
                cfg = sa.conn.children.get(c.name)
                if cfg is None:
                    continue
                await self._create_child(sa, cfg, log, old=c)
                await self.delete_child(sa, c, log)
                n += 1
        if not n:
            raise Failed("no matching SAs to rekey found")
        return n

    async def flush(self) -> None:
        """Daemon shutdown (a reboot): all SAs gone from the engine."""
        for t in list(self.tasks):
            if t is not asyncio.current_task():
                t.cancel()
        for sa in list(self.sas.values()):
            for c in sa.children:
                await self.uninstall(sa, c)
        self.sas.clear()

    # ------------------------------------------------------------ queries
    async def list_sas(self, ike: str | None = None, child: str | None = None) -> list[dict]:
        try:
            counters = {(s["spi"], s["direction"]): s for s in await self.engine.list_sas()}
        except EngineError:
            counters = {}
        now = time.time()
        out = []
        for sa in sorted(self.sas.values(), key=lambda s: s.uid):
            if sa.state not in ("ESTABLISHED", "DELETING") or (ike and sa.name != ike):
                continue
            kids = []
            for c in sa.children:
                if child and c.name != child:
                    continue
                cin, cout = counters.get((c.spi_in, "in"), {}), counters.get((c.spi_out, "out"), {})
                kids.append({
                    "name": c.name, "uniqueid": c.uid, "reqid": c.reqid, "state": c.state, "mode": "TUNNEL",
                    "protocol": "ESP", "encr_alg": c.proposal.encr, "encr_keysize": c.proposal.keysize,
                    "integ_alg": c.proposal.integ, "listing": c.proposal.listing(),
                    "spi_in": f"{c.spi_in:08x}", "spi_out": f"{c.spi_out:08x}",
                    "bytes_in": int(cin.get("bytes", 0)), "packets_in": int(cin.get("packets", 0)),
                    "use_in": _ago(now, cin), "bytes_out": int(cout.get("bytes", 0)),
                    "packets_out": int(cout.get("packets", 0)), "use_out": _ago(now, cout),
                    "install_time": int(now - c.installed_at),
                    "rekey_time": max(0, int(c.rekey_time - (now - c.installed_at))),
                    "life_time": max(0, int(c.life_time - (now - c.installed_at))),
                    "local_ts": [str(t) for t in c.local_ts], "remote_ts": [str(t) for t in c.remote_ts],
                    "cipher": c.cipher, "offload": c.offload,
                })
            if child and not kids:
                continue
            p = sa.proposal
            out.append({
                "name": sa.name, "uniqueid": sa.uid, "version": 2, "state": sa.state,
                "local_host": sa.local, "local_port": self.port, "local_id": sa.local_id,
                "remote_host": sa.remote, "remote_port": sa.conn.remote_port if sa.initiator else sa.remote_port,
                "remote_id": sa.remote_id, "initiator": sa.initiator, "initiator_spi": sa.spi_i,
                "responder_spi": sa.spi_r, "encr_alg": p.encr if p else "", "encr_keysize": p.keysize if p else 0,
                "integ_alg": p.integ if p else None, "prf_alg": p.prf if p else "", "dh_group": p.dh if p else "",
                "listing": p.listing() if p else "", "established": int(now - sa.established_at),
                "rekey_time": max(0, int(sa.conn.rekey_time - (now - sa.established_at))),
                "children": kids,
            })
        return out

    def list_conns(self) -> list[dict]:
        out = []
        for c in self.conns:
            out.append({
                "name": c.name, "version": c.version, "rekey_time": c.rekey_time,
                "local_addrs": c.local_addrs or ["%any"], "remote_addrs": c.remote_addrs or ["%any"],
                "local_port": c.local_port, "remote_port": c.remote_port,
                "local_id": c.local.id or "%any", "remote_id": c.remote.id or "%any",
                "children": [{"name": ch.name, "mode": ch.mode, "rekey_time": ch.rekey_time,
                              "local_ts": ch.local_ts_text, "remote_ts": ch.remote_ts_text}
                             for ch in c.children.values()],
            })
        return out

    # ------------------------------------------------------------ control socket
    async def on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def send(obj: dict) -> None:
            try:
                writer.write((json.dumps(obj) + "\n").encode())
            except Exception:
                pass
        try:
            line = await reader.readline()
            if not line:
                return
            req = json.loads(line)
            op = req.get("op")
            if op == "load":
                send({"ok": True, **self.load_file(req["file"])})
            elif op == "list_sas":
                send({"ok": True, "sas": await self.list_sas(req.get("ike"), req.get("child"))})
            elif op == "list_conns":
                send({"ok": True, "conns": self.list_conns()})
            elif op == "reset":  # the supervisor's/tests' "as after a reboot": no SAs, no config
                await self.flush()
                self.conns, self.secrets = [], []
                send({"ok": True})
            elif op == "status":
                send({"ok": True, "pid": os.getpid(), "ike_sas": len(self.sas), "uptime": time.time() - self.started})
            elif op in ("initiate", "terminate", "rekey"):
                await self._streamed(op, req, send, writer)
            else:
                send({"ok": False, "error": f"unknown op {op!r}"})
            await writer.drain()
        except (ConnectionError, json.JSONDecodeError) as exc:
            self.log(f"control client: {exc!r}")
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def _streamed(self, op: str, req: dict, send, writer) -> None:
        def log(line: str) -> None:
            send({"log": line})
        if op == "initiate":
            coro = self.initiate(req["child"], req.get("ike"), log)
        elif op == "terminate":
            coro = self.terminate(req.get("ike"), req.get("child"), log)
        else:
            coro = self.rekey(req.get("child"), req.get("ike"), log)
        task = self.spawn(coro)
        timeout = req.get("timeout")
        try:
            if timeout:
                await asyncio.wait_for(asyncio.shield(task), float(timeout))
            else:
                await task
            send({"done": True, "ok": True})
        except asyncio.TimeoutError:
            name = req.get("child") or req.get("ike")
            send({"done": True, "ok": False, "timeout": True,
                  "error": f"CHILD_SA '{name}' not established after {int(float(timeout) * 1000)}ms"})
        except Failed as exc:
            send({"done": True, "ok": False, "error": str(exc)})


def _short(notify: str) -> str:
    return {"NO_PROPOSAL_CHOSEN": "NO_PROP", "AUTHENTICATION_FAILED": "AUTH_FAILED",
            "TS_UNACCEPTABLE": "TS_UNACCEPT"}.get(notify, notify)


def _ago(now: float, c: dict) -> int | None:
    t = c.get("last_use")
    if not t or not c.get("packets"):
        return None
    return max(0, int(now - float(t)))


async def _main(host_dir: str, port: int) -> None:
    d = Daemon(host_dir, port)
    await d.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    await stop.wait()
    await d.flush()
    try:
        d.hd.ike_sock.unlink()
    except FileNotFoundError:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twin.ike.daemon", description=__doc__.split("\n")[0])
    ap.add_argument("--host-dir", required=True, help="the appliance's host dir (DESIGN.md)")
    ap.add_argument("--port", type=int, default=500, help="UDP port (500; tests may pick another)")
    args = ap.parse_args(argv)
    asyncio.run(_main(args.host_dir, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
