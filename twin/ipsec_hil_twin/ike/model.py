"""The daemon's run-time state: IKE_SAs and CHILD_SAs, identities and how they match.

Why a module of its own: matching rules (which connection a responder picks, which
shared key applies, which IKE_SA an initiator may reuse) decide the 002 page's outcome
and are unit-testable without sockets.
"""
from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import time
from dataclasses import dataclass, field
from typing import Callable

from ipsec_hil_twin.errors import IkeError

from .conf import Connection, SharedSecret
from .proposals import Combo
from .proto import IkeKeys
from .ts import TS

Log = Callable[[str], None]
"""Where an operation's strongSwan-style log lines go (swanctl's stream, or the daemon log)."""


class Failed(IkeError):
    """An initiate/terminate/rekey step failed; the message is swanctl's errmsg."""


def ts_text(ts: list[TS]) -> str:
    return " ".join(str(t) for t in ts)


def short_notify(notify: str) -> str:
    """A notify's abbreviation in strongSwan's `[ENC] parsed ... [ N(...) ]` lines."""
    return {"NO_PROPOSAL_CHOSEN": "NO_PROP", "AUTHENTICATION_FAILED": "AUTH_FAILED",
            "TS_UNACCEPTABLE": "TS_UNACCEPT", "TEMPORARY_FAILURE": "TEMP_FAIL",
            "CHILD_SA_NOT_FOUND": "CHLD_SA_NOT_FOUND"}.get(notify, notify)


def _ip(text: str):
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def id_match(pattern: str | None, value: str) -> int:
    """0 no match, 1 wildcard (`%any`, `*`), 2 perfect -- strongSwan's ID_MATCH ranks, coarser."""
    if pattern is None or pattern in ("%any", "%any6", ""):
        return 1
    a, b = _ip(pattern), _ip(value)
    if a is not None or b is not None:
        return 2 if a == b else 0
    if pattern == value:
        return 2
    if any(c in pattern for c in "*?") and fnmatch.fnmatchcase(value, pattern):
        return 1
    return 0


def addr_match(entries: list[str], addr: str) -> int:
    """0 no match, 1 any/contained, 2 exactly this address."""
    if not entries:
        return 1
    ip = ipaddress.ip_address(addr)
    best = 0
    for e in entries:
        e = e.strip()
        if e in ("%any", "%any4", "%any6", "0.0.0.0/0", "::/0"):
            if (e == "%any4" and ip.version != 4) or (e == "%any6" and ip.version != 6):
                continue
            best = max(best, 1)
            continue
        try:
            if "-" in e:
                lo, hi = (ipaddress.ip_address(x.strip()) for x in e.split("-", 1))
                if lo.version == ip.version and lo <= ip <= hi:
                    best = max(best, 1)
            elif "/" in e:
                if ip in ipaddress.ip_network(e, strict=False):
                    best = max(best, 1)
            elif ipaddress.ip_address(e) == ip:
                best = 2
        except ValueError:
            continue
    return best


def find_psk(secrets: list[SharedSecret], me: str, other: str) -> SharedSecret | None:
    """The best shared key for (me, other): both ids matching beat one, one beats none."""
    best, best_score = None, -1
    for s in secrets:
        if not s.ids:
            score = 0
        else:
            m_me = max((id_match(i, me) for i in s.ids), default=0)
            m_other = max((id_match(i, other) for i in s.ids), default=0)
            if m_me == 0 and m_other == 0:
                continue
            score = m_me + m_other
        if score > best_score:
            best, best_score = s, score
    return best


@dataclass
class ChildSA:
    uid: int
    name: str
    conn: str
    reqid: int
    proposal: Combo
    cipher: str
    spi_in: int
    spi_out: int
    local_ts: list[TS]
    remote_ts: list[TS]
    rekey_time: int
    life_time: int
    offload: bool = True
    state: str = "INSTALLED"
    installed_at: float = field(default_factory=time.time)
    rand_time: int = 0
    install_s: int = 0
    """Monotonic second of the install (charon's install_time; `installed Ns ago`)."""
    rekey_at: int = 0
    """Monotonic second of the soft expiry (install + rekey_time - jitter), 0: never --
    what strongSwan's child_sa keeps as rekey_time and vici lists as `rekey-time`."""
    expire_at: int = 0
    """Monotonic second of the hard expiry (install + life_time), 0: never."""
    rekey_after: int | None = None
    """The jittered rekey seconds chosen when the child was installed (child_cfg.c
    get_lifetime): the kernel SAs' soft lifetime and the soft expiry arm_child schedules."""
    in_installed: bool = False
    out_installed: bool = False
    pending_out: dict | None = field(default=None, repr=False)
    """The outbound association a rekey responder registers but installs only when the
    old child's DELETE arrives (child_delete.c install_outbound)."""
    last_counters: dict[str, dict] = field(default_factory=dict)
    """Per direction, the engine's counters read just before that association was
    removed (a DELETED child still lists them, as charon keeps its last usestats)."""
    rekeyed_to: "ChildSA | None" = field(default=None, repr=False)
    expiring: bool = False
    recreate: bool = True
    """Whether this end creates the child anew after its hard expiry (False when the
    peer's expiry DELETE crossed ours and the peer is the IKE_SA's initiator)."""

    def established_line(self) -> str:
        """strongSwan's "CHILD_SA ... established" text (both ends log it)."""
        return (f"CHILD_SA {self.name}{{{self.uid}}} established with SPIs {self.spi_in:08x}_i "
                f"{self.spi_out:08x}_o and TS {ts_text(self.local_ts)} === {ts_text(self.remote_ts)}")


@dataclass
class IkeSA:
    uid: int
    conn: Connection
    initiator: bool
    spi_i: str
    spi_r: str
    local: str
    local_port: int
    remote: str
    remote_port: int
    local_id: str = ""
    remote_id: str = ""
    proposal: Combo | None = None
    keys: IkeKeys | None = None
    ni: str = ""
    nr: str = ""
    init_req: bytes = b""
    init_resp: bytes = b""
    encap: bool = False  # NAT-T: ESP in UDP 4500 (either end's encap = yes faked a NAT)
    floated: bool = False
    """The IKE_SA moved to UDP 4500 (ike_sa.c float_ports): the initiator after IKE_SA_INIT
    when a NAT was detected (here: encap = yes) or MOBIKE is enabled and the peer supports
    NAT-T (the twin's peer always does); the responder when IKE_AUTH (or any later request)
    arrives there. Its datagrams then travel on UDP 4500 (ike.natt), and its endpoints read
    [4500] in --list-sas and the [NET] lines (ike_port)."""
    state: str = "CONNECTING"
    established_at: float = 0.0
    next_mid: int = 0
    responses: dict[int, bytes] = field(default_factory=dict)
    inflight: set[int] = field(default_factory=set)
    children: list[ChildSA] = field(default_factory=list)
    req_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    rekey_at: int = 0
    """Monotonic second of the scheduled IKE_SA rekey (vici `rekey-time`), 0: none."""
    tasks_active: list[str] = field(default_factory=list)
    """The exchanges this end has in flight (CHILD_REKEY, IKE_REKEY, CHILD_DELETE ...),
    listed as swanctl's `active:` line."""

    @property
    def name(self) -> str:
        return self.conn.name

    def mac_key(self, sender_is_initiator: bool) -> bytes:
        assert self.keys is not None
        return self.keys.sk_ai if sender_is_initiator else self.keys.sk_ar

    def same_peer_config(self, conn: Connection, local: str, remote: str, local_id: str) -> bool:
        """Whether an initiate for `conn` may reuse this IKE_SA (strongSwan compares the
        peer configs -- addresses, identities, proposals -- not the connection names)."""
        if self.state != "ESTABLISHED" or self.local != local or self.remote != remote:
            return False
        if self.local_id != local_id:
            return False
        if conn.remote.id not in (None, "%any") and id_match(conn.remote.id, self.remote_id) != 2:
            return False
        if self.conn.remote.id != conn.remote.id:
            return False
        return [c.key() for c in self.conn.proposals] == [c.key() for c in conn.proposals]


#: strongSwan's ports: IKEV2_UDP_PORT and IKEV2_NATT_PORT (the one an IKE_SA floats to)
IKE_PORT, NATT_PORT = 500, 4500


def ike_port(sa: IkeSA, port: int) -> int:
    """An endpoint port of ``sa`` as strongSwan reports it: ``port`` (the configured or
    socket's one), or 4500 once the SA floated from the default 500 -- where its datagrams
    then go, behind the non-ESP marker (ipsec_hil_twin.ike.natt)."""
    return NATT_PORT if sa.floated and port == IKE_PORT else port
