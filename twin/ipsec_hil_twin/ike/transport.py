"""UDP 500 (and 4500 once an IKE_SA floats) for the daemon: the listening sockets, the
per-address request sockets, and one request with strongSwan's retransmission schedule.

Why apart from the roles: both the initiator (IKE_SA_INIT, IKE_AUTH, CREATE_CHILD_SA)
and the child-SA teardown (INFORMATIONAL) send requests and wait for the matching
response; datagrams arriving for either role come in here and are handed on.
"""
from __future__ import annotations

import asyncio
import os
import socket
from typing import Any, Protocol

from . import natt, proto
from .model import IKE_PORT, NATT_PORT, IkeSA, Log
from .state import IkeState


class RequestHandler(Protocol):
    """Who answers the requests that arrive (the responder, ipsec_hil_twin.ike.responder)."""

    async def on_request(self, msg: dict, raw: bytes, addr: Any, ep: "Endpoint") -> None: ...


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


def _fmt(addr: str, port: int) -> str:
    return f"{addr}[{port}]"


class Endpoint(asyncio.DatagramProtocol):
    def __init__(self, transport: "Transport") -> None:
        self.owner = transport
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:  # type: ignore[override]
        self.owner.on_datagram(data, addr, self)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable etc.: retransmits decide
        self.owner.state.log(f"UDP error (the retransmits decide): {exc!r}")


class NattReply:
    """The endpoint a request that came to UDP 4500 is answered through: the marker, port
    4500 and the address it came to (``natt.NattSender``)."""

    natt = True

    def __init__(self, sender: natt.NattSender, local: str) -> None:
        self.sender, self.local = sender, local
        self.transport = self

    def sendto(self, data: bytes, addr) -> None:
        self.sender.sendto(data, addr, self.local)

    def get_extra_info(self, name: str, default=None):
        return self.sender.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self.sender.is_closing()


class Transport:
    """UDP 500 of one daemon: requests with retransmits out, datagrams in (responses to
    their requests, requests to the RequestHandler given to listen())."""

    def __init__(self, state: IkeState) -> None:
        self.state = state
        self.handler: RequestHandler | None = None
        self.timing = Timing.load(state.host)
        self.pending: dict[tuple[str, int], asyncio.Future] = {}
        self.listeners: list[Endpoint] = []
        self.clients: dict[str, Endpoint] = {}
        self.natt: natt.NattSender | None = None
        """UDP 4500 (ike.natt), open when the daemon is on the default port 500: strongSwan
        floats only from there (ike_sa.c float_ports)."""
        self.natt_socks: list[socket.socket] = []

    async def listen(self, handler: RequestHandler) -> None:
        """The wildcard sockets on UDP `port`, IPv4 and (where the namespace has it) IPv6;
        requests that arrive go to `handler`."""
        self.handler = handler
        loop = asyncio.get_running_loop()
        for fam, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            sock = socket.socket(fam, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if fam == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((host, self.state.port))
            except OSError as exc:
                sock.close()
                if fam == socket.AF_INET6 and exc.errno in (97, 99):  # no IPv6 in this namespace
                    continue
                raise
            _, ep = await loop.create_datagram_endpoint(lambda: Endpoint(self), sock=sock)
            self.listeners.append(ep)
        if self.state.port == IKE_PORT:
            sender, self.natt_socks = natt.open_natt(self._natt_datagram, loop)
            # no raw socket (no CAP_NET_RAW): nothing floats, as a charon without its 4500 socket
            self.natt = sender if self.natt_socks else None

    @property
    def can_float(self) -> bool:
        """Whether an IKE_SA of this daemon may move to UDP 4500."""
        return self.natt is not None

    def _natt_datagram(self, data: bytes, addr, local: str) -> None:
        assert self.natt is not None
        self.on_datagram(data, addr, NattReply(self.natt, local))

    async def _client(self, local: str) -> Endpoint:
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
                sock.bind((local, self.state.port))
            except OSError:
                sock.bind((local, 0))
            _, ep = await loop.create_datagram_endpoint(lambda: Endpoint(self), sock=sock)
            self.clients[local] = ep
        return ep

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
        ep: Endpoint | NattReply = (NattReply(self.natt, sa.local) if sa.floated and self.natt is not None
                                    else await self._client(sa.local))
        dest = (sa.remote, NATT_PORT if isinstance(ep, NattReply) else sa.remote_port)
        try:
            for k, wait in enumerate(self.timing.waits()):
                if k:
                    log(f"[IKE] retransmit {k} of request with message ID {mid}")
                if not suppress:
                    assert ep.transport is not None
                    ep.transport.sendto(data, dest)
                port = ep.transport.get_extra_info("sockname")[1] if ep.transport else 0
                shown, peer = port, dest[1]
                log(f"[NET] sending packet: from {_fmt(sa.local, shown)} to {_fmt(sa.remote, peer)} ({len(data)} bytes)")
                try:
                    resp, raw, addr = await asyncio.wait_for(asyncio.shield(fut), wait)
                    log(f"[NET] received packet: from {_fmt(addr[0], addr[1])} to "
                        f"{_fmt(sa.local, shown)} ({len(raw)} bytes)")
                    return resp, raw
                except asyncio.TimeoutError:
                    continue
            log(f"[IKE] giving up after {self.timing.tries} retransmits")
            return None
        finally:
            self.pending.pop((sa.spi_i, mid), None)

    def on_datagram(self, data: bytes, addr, ep: Endpoint | NattReply) -> None:
        """A response completes its request's future; a request goes to the responder."""
        if self.state.faults.params("peer_unreachable") is not None:
            return
        try:
            msg = proto.decode(data)
        except proto.ProtoError as exc:
            self.state.log(f"dropped datagram from {addr[0]}: {exc}")
            return
        if msg["response"]:
            fut = self.pending.get((msg["spi_i"], msg["mid"]))
            if fut is not None and not fut.done():
                fut.set_result((msg, data, addr))
            return
        if self.handler is not None:
            self.state.spawn(self.handler.on_request(msg, data, addr, ep))
