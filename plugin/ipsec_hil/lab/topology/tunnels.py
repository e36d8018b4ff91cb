"""Tunnels of a lab: their two ends, children, identities, key reference and configurations.

A :class:`Tunnel` is what the file allows (families, ciphers, children); a
:class:`TunnelConfig` is one way the suite builds it (the ``tunnel`` fixture's parameter).
Facts that need the hosts (addresses, the path MTU) are on :class:`Topology`, which has both.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.topology.parts import Cipher, Family, _Model

#: children of one connection. strongSwan sets no count of its own; what bounds it is one vici
#: message (512 KiB, VICI_MESSAGE_SIZE_MAX) for the connection's config and for one IKE_SA's
#: --list-sas, and the daemon's patience. Measured with real charon 5.9.8 through the suite's
#: own provisioning (tests/interop/test_scale.py): 1024 children load, establish and are all
#: listed INSTALLED on both ends; with 2048 some were no longer listed on either end.
MAX_CHILDREN = 1024

_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TunnelEnd(_Model):
    """One end of a tunnel: the host, the port carrying ESP, the port of its LAN."""

    host: str
    port: str
    lan: str
    cipher: Literal["kernel", "offload"] = "offload"


class Children(_Model):
    """How many child SAs a connection has and how traffic is split between them."""

    count: int
    by: Literal["tcp_port"] | None = None
    first_port: int | None = Field(None, ge=1, le=65535)

    @field_validator("count")
    @classmethod
    def _count(cls, v: int) -> int:
        if not 1 <= v <= MAX_CHILDREN:
            raise ValueError(f"expected 1..{MAX_CHILDREN} children, found {v}")
        return v

    @model_validator(mode="after")
    def _split(self) -> Children:
        if self.count > 1 and (self.by is None or self.first_port is None):
            raise ValueError(
                f"expected by: tcp_port and first_port for {self.count} children, found "
                f"by: {self.by}, first_port: {self.first_port}"
            )
        if self.first_port is not None and self.first_port + self.count - 1 > 65535:
            raise ValueError(f"expected first_port + count - 1 <= 65535, found {self.first_port + self.count - 1}")
        return self

    def ports(self) -> list[int]:
        """The TCP port of each child (empty for one child without a split)."""
        if self.first_port is None:
            return []
        return list(range(self.first_port, self.first_port + self.count))


class Identities(_Model):
    """IKE identities of a connection (null: the two outer addresses)."""

    local: str = Field(min_length=1)
    remote: str = Field(min_length=1)


class PskRef(_Model):
    """Where a tunnel's pre-shared key comes from: an environment variable or a file.

    Holds only the reference; :meth:`read` fetches the key when it is needed and the
    value is never stored on the model, logged or put into a message.
    """

    env: str | None = None
    file: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _not_inline(cls, v: Any) -> Any:
        inline = "expected {env: NAME} or {file: PATH}, found an inline key (never write a key in the topology; use env or file)"
        if isinstance(v, (str, bytes, int, float)):
            raise ValueError(inline)
        if isinstance(v, dict) and ({"value", "key", "secret", "psk"} & set(v)):
            raise ValueError(inline)
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_RE.match(v):
            # not repeated: a key pasted here by mistake must not reach a log
            raise ValueError("expected an environment variable name (letters, digits, _), found something else (not shown)")
        return v

    @model_validator(mode="after")
    def _one(self) -> PskRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("expected exactly one of env or file, found " + ("both" if self.env else "neither"))
        return self

    def read(self) -> str:
        """The key. LabError naming the variable or file (never the key) when unusable."""
        if self.env is not None:
            value = os.environ.get(self.env)
            if not value:
                raise LabError(f"pre-shared key: environment variable {self.env} is not set (or empty)")
            return value
        assert self.file is not None
        try:
            value = self.file.read_text().strip()
        except OSError as exc:
            raise LabError(f"pre-shared key: cannot read {self.file}: {exc.strerror}") from None
        if not value:
            raise LabError(f"pre-shared key: {self.file} is empty")
        return value

    def __repr__(self) -> str:  # explicit: there is nothing secret here, keep it that way
        return f"PskRef(env={self.env!r}, file={str(self.file) if self.file else None!r})"


class Inject(_Model):
    """Where the suite puts crafted ESP frames on the wire toward an appliance (issue 12).

    ``via: peer``: the tunnel's other appliance sends them from its own outer port with its
    python3 (OPNsense ships one; the virtual lab's peer shell runs in its namespace);
    ``via: bench``: the bench sends them from ``port``, a bench port on the outer path.
    ``toward`` is the end under test (the one that receives the frames).
    """

    via: Literal["peer", "bench"]
    toward: Literal["local", "remote"] = "local"
    port: str | None = None

    @model_validator(mode="after")
    def _port(self) -> Inject:
        if self.via == "bench" and self.port is None:
            raise ValueError("expected port (the bench's port on the outer path) with via: bench, found none")
        if self.via == "peer" and self.port is not None:
            raise ValueError(f"expected no port with via: peer (the peer sends from its tunnel port), found {self.port!r}")
        return self


class Lifetimes(_Model):
    """A child's lifetimes in seconds, as swanctl.conf's CHILD_SA keys (strongSwan 5.9.8).

    Why in the topology: the rekey tests need children that rekey or expire within seconds,
    and the lab file is what both the suite (render) and the virtual lab read. 0 disables
    ``rekey_time`` or ``life_time``; ``rekey_time: 0`` with a ``life_time`` needs
    ``rand_time: 0`` too (5.9.8 otherwise schedules the rekey in the past, lists
    ``rekeying in -Ns`` and never fires it), and a rekey must come before the hard expiry.

    ``remote_life_time`` (default: ``life_time``) is the remote end's, rendered into its
    swanctl.conf only. Why: each end's kernel expires its own SAs; with one life_time for
    both, which end expires first is a race of milliseconds (the responder installs first,
    FreeBSD's key_timehandler ticks once a second on each). The end that loses the race
    only receives a DELETE and never meets its outbound policy without an SA, the path the
    expiry test accounts for. A longer remote life makes the local end (the DUT) expire
    first at every expiry.
    """

    rekey_time: int = Field(ge=0)
    life_time: int = Field(ge=0)
    rand_time: int = Field(0, ge=0)
    remote_life_time: int | None = Field(None, ge=0)

    @property
    def remote_life(self) -> int:
        """The remote end's life_time: its own when stated, else the tunnel's."""
        return self.life_time if self.remote_life_time is None else self.remote_life_time

    def for_end(self, end: str) -> dict[str, int]:
        """swanctl.conf's CHILD_SA lifetime keys for ``end`` ("local" or "remote")."""
        life = self.remote_life if end == "remote" else self.life_time
        return {"rekey_time": self.rekey_time, "life_time": life, "rand_time": self.rand_time}

    @model_validator(mode="after")
    def _order(self) -> Lifetimes:
        if self.rekey_time == 0 and self.life_time > 0 and self.rand_time > 0:
            raise ValueError(f"expected rand_time: 0 with rekey_time: 0 (5.9.8 would list a rekey in the past "
                             f"that never fires), found rand_time: {self.rand_time}")
        if self.rekey_time and self.life_time and self.rekey_time + self.rand_time >= self.life_time:
            raise ValueError(f"expected rekey_time + rand_time < life_time (the rekey before the hard expiry), "
                             f"found {self.rekey_time} + {self.rand_time} >= {self.life_time}")
        if (self.life_time == 0) != (self.remote_life == 0):
            raise ValueError(f"expected remote_life_time 0 exactly when life_time is 0 (both ends expire or neither), "
                             f"found life_time {self.life_time}, remote_life_time {self.remote_life_time}")
        if self.rekey_time and self.rekey_time + self.rand_time >= self.remote_life:
            raise ValueError(f"expected rekey_time + rand_time < remote_life_time (the rekey before the hard expiry), "
                             f"found {self.rekey_time} + {self.rand_time} >= {self.remote_life_time}")
        return self


class Tolerance(_Model):
    """Relative tolerances for invariants measured under congestion: the loss rules of a
    ledger that closes on counts (issue 52), the counted loss at most this share of what was
    sent. ``congested``: the doors of an end whose engine holds the SAs (the driver under
    test); ``kernel_sender``: those of an end running the kernel's cipher, which counts a
    frame before its port's queue takes it, so a TCP stream it sends loses at that queue
    what TCP's congestion control makes it lose -- the peer's queue, not a driver's."""

    congested: float = Field(0.001, ge=0, le=1)
    kernel_sender: float = Field(0.001, ge=0, le=1)


_End = TypeVar("_End")


def pick_end(which: str, local: _End, remote: _End, owner: str, error: type[LabError] = LabError) -> _End:
    """``local`` or ``remote`` by name; anything else is ``error`` naming ``owner``."""
    if which not in ("local", "remote"):
        raise error(f"{owner}: end must be 'local' or 'remote', not {which!r}")
    return local if which == "local" else remote


@dataclass(frozen=True)
class TunnelConfig:
    """One way to build a tunnel: the key of the tunnel fixture's parametrisation.

    Plain strings, not validated here: a config is also built by hand (tests, a prompt),
    and :mod:`ipsec_hil.lab.provision` refuses an unknown family or cipher naming the field.
    """

    #: family of the outer (ESP-carrying) header: ipv4 | ipv6
    outer: str
    #: family of the packets inside: ipv4 | ipv6
    inner: str
    #: aes-gcm-16 | aes-cbc-hmac-sha256
    cipher: str
    #: child SAs of the connection (the tunnel's children.count)
    children: int = 1

    @property
    def id(self) -> str:
        """Short test id, e.g. ``v4in6-gcm`` (inner v4 in outer v6), ``-c6`` for six children."""
        short = {"aes-gcm-16": "gcm", "aes-cbc-hmac-sha256": "cbc"}[self.cipher]
        kids = f"-c{self.children}" if self.children != 1 else ""
        return f"v{self.inner[-1]}in{self.outer[-1]}-{short}{kids}"


class Tunnel(_Model):
    """A connection between two appliances and the combinations it may be built with."""

    local: TunnelEnd
    remote: TunnelEnd
    outer: list[Family] = Field(min_length=1)
    inner: list[Family] = Field(min_length=1)
    ciphers: list[Cipher] = Field(min_length=1)
    #: NAT traversal forced (swanctl `encap = yes`): ESP in UDP 4500 (RFC 3948), IPv4 outer only
    encap: bool = False
    children: Children = Field(default_factory=lambda: Children(count=1))
    identities: Identities | None = None
    psk: PskRef
    tolerance: Tolerance = Field(default_factory=Tolerance)
    inject: Inject | None = None
    #: the children's lifetimes (None: strongSwan's defaults, 1 h / 66 min); a tunnel with
    #: lifetimes runs only the tests that ask for its kind (ipsec_hil.lab.cases.lifetime_kind)
    lifetimes: Lifetimes | None = None
    #: the children's anti-replay window in packets (swanctl ``replay_window``; None:
    #: strongSwan's 32). FreeBSD keeps the bitmap in bytes, setkey -D's ``replay=`` is the
    #: window / 8 and at most 255 (sadb_sa_replay is a byte): a multiple of 8, 8..2040
    replay_window: int | None = None
    #: children proposed with extended sequence numbers only (``esp_proposals = ...-esn``,
    #: RFC 4304): the wire tests' 64-bit sequence numbers across 2^32
    esn: bool = False
    _name: str = PrivateAttr("")

    @field_validator("children", mode="before")
    @classmethod
    def _children(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError(f"expected a count or {{count, by, first_port}}, found {v!r}")
        if isinstance(v, int):
            return {"count": v}
        return v

    @field_validator("outer", "inner", "ciphers")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        dup = [x for x in dict.fromkeys(v) if v.count(x) > 1]
        if dup:
            raise ValueError(f"expected each value once, found {dup[0]!r} twice")
        return v

    @field_validator("replay_window")
    @classmethod
    def _window_in_bytes(cls, v: int | None) -> int | None:
        if v is not None and (isinstance(v, bool) or not 8 <= v <= 2040 or v % 8):
            raise ValueError(f"expected a multiple of 8 from 8 to 2040 packets (FreeBSD keeps the window in "
                             f"bytes: setkey -D's replay= is the window / 8, at most 255), found {v!r}")
        return v

    @field_validator("encap")
    @classmethod
    def _encap_ipv4_outer(cls, v: bool, info: ValidationInfo) -> bool:
        outer = info.data.get("outer") or []
        if v and "ipv6" in outer:
            raise ValueError("expected outer: [ipv4] with encap: true (FreeBSD encapsulates ESP in UDP "
                             "for an IPv4 outer only: netipsec udp_ipsec_output), found outer "
                             f"{', '.join(outer)}")
        return v

    @property
    def name(self) -> str:
        return self._name

    def end(self, which: str) -> TunnelEnd:
        """The ``local`` or ``remote`` end."""
        return pick_end(which, self.local, self.remote, f"tunnel {self._name}")

    def configs(self) -> list[TunnelConfig]:
        """Every supported (outer, inner, cipher) combination, children as configured."""
        return [
            TunnelConfig(o, i, c, self.children.count)
            for o, i, c in itertools.product(self.outer, self.inner, self.ciphers)
        ]


