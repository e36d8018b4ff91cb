"""What the swanctl parsers share: the result types of the two `swanctl --list-sas` parsers
(text and --raw), and the lines every swanctl command may print besides its own."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from ._base import numbered_lines

# libstrongswan complains on stderr about plugins named in its config but not installed
# (seen on Debian 12 for every swanctl run): a warning, never an error
PLUGIN_WARNING = r"plugin '[^']*': failed to load - .+"
# charon's VICI socket did not answer; swanctl exits with the errno and may print its usage text
CHARON_DOWN = r"(?:[Ee]rror: )?connecting to '(?P<uri>[^']*)' URI failed: (?P<why>.+)"
_ERROR_PREFIX = re.compile(r"^[Ee]rror: ")


def charon_error(line: str) -> str:
    """A CHARON_DOWN line as the result keeps it: without the "Error: " some releases print."""
    return _ERROR_PREFIX.sub("", line)


def both_streams(stdout: str, stderr: str) -> list[tuple[str, int, str]]:
    """(stream, 1-based number, line) of stdout then stderr, blank lines included.

    swanctl's lines mean the same whichever stream they arrive on, so a parser classifies
    them together (and a `2>&1` capture parses the same); the stream is kept for the
    error message, which names the line as `stdout`/`stderr` number N.
    """
    return [(stream, no, line) for stream, text in (("stdout", stdout), ("stderr", stderr))
            for no, line in numbered_lines(text)]

IKE_STATES = frozenset(
    "CREATED CONNECTING ESTABLISHED PASSIVE REKEYING REKEYED DELETING DESTROYING".split()
)
CHILD_STATES = frozenset(
    "CREATED ROUTED INSTALLING INSTALLED UPDATING REKEYING REKEYED RETRYING DELETING DELETED "
    "DESTROYING".split()
)
# states for which list_sas.c prints the installed/in/out lines
CHILD_STATES_WITH_SPIS = frozenset("INSTALLED REKEYING REKEYED DELETING DELETED".split())
MODES = frozenset("TRANSPORT TUNNEL BEET PASS DROP".split())


@dataclass(frozen=True)
class ChildSa:
    """One CHILD_SA. SPIs are 8 lowercase hex digits; counters None when not printed."""

    name: str
    uniqueid: int
    reqid: int
    state: str
    mode: str
    encap: bool  # "-in-UDP" (NAT-T)
    protocol: str  # ESP | AH
    proposal: str  # e.g. "AES_GCM_16-256" or "AES_CBC-256/HMAC_SHA2_256_128"
    installed_ago: Optional[int] = None
    rekey_in: Optional[int] = None
    expires_in: Optional[int] = None
    spi_in: Optional[str] = None
    spi_out: Optional[str] = None
    cpi_in: Optional[str] = None
    cpi_out: Optional[str] = None
    bytes_in: Optional[int] = None
    packets_in: Optional[int] = None
    use_in: Optional[int] = None  # seconds since last inbound packet
    bytes_out: Optional[int] = None
    packets_out: Optional[int] = None
    use_out: Optional[int] = None
    local_ts: tuple[str, ...] = ()
    remote_ts: tuple[str, ...] = ()


@dataclass(frozen=True)
class IkeSa:
    name: str
    uniqueid: int
    state: str
    version: int
    initiator_spi: str
    responder_spi: str
    initiator: bool  # True when this side initiated (the `*`)
    local_id: str
    local_host: str
    local_port: int
    remote_id: str
    remote_host: str
    remote_port: int
    proposal: Optional[str] = None  # e.g. "AES_GCM_16-256/PRF_HMAC_SHA2_256/CURVE_25519"
    established_ago: Optional[int] = None
    rekey_in: Optional[int] = None
    reauth_in: Optional[int] = None
    expires_in: Optional[int] = None
    local_vips: tuple[str, ...] = ()
    remote_vips: tuple[str, ...] = ()
    tasks_queued: tuple[str, ...] = ()
    tasks_active: tuple[str, ...] = ()
    tasks_passive: tuple[str, ...] = ()
    children: tuple[ChildSa, ...] = ()


@dataclass(frozen=True)
class SaList:
    """Everything `swanctl --list-sas` printed; empty output -> no SAs."""

    ike_sas: tuple[IkeSa, ...] = field(default_factory=tuple)

    def children(self) -> list[tuple[IkeSa, ChildSa]]:
        return [(ike, child) for ike in self.ike_sas for child in ike.children]

    def child(self, name: str) -> list[ChildSa]:
        return [c for _, c in self.children() if c.name == name]
