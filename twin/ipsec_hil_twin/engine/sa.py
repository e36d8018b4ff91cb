"""The SA specification as the control API receives it (DESIGN.md "Engine control API").

`replay_window` is the association's window in packets (swanctl.conf's child option,
passed by ipsec_hil_twin.ike; FreeBSD rounds it up to whole bytes of bitmap, 8 x 255 at most);
`esn` says the child negotiated extended sequence numbers (`...-esn` proposals).

Why pydantic: add_sa is a boundary (ipsec_hil_twin.ike and tests call it); a bad field must be
refused with a message naming the field, never half-installed.  Keys are kept out of
repr() and error messages.
"""
from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .selectors import Selector, parse_selector
from .sizes import CBC, GCM, encap_header


class SaSpec(BaseModel):
    """One unidirectional ESP association."""

    model_config = ConfigDict(extra="allow", frozen=True, hide_input_in_errors=True)

    spi: int = Field(ge=256, le=0xFFFFFFFF)
    direction: Literal["in", "out"]
    src: str
    dst: str
    cipher: Literal["aes-gcm-16", "aes-cbc-hmac-sha256"]
    enc_key: str = Field(repr=False)
    auth_key: str | None = Field(default=None, repr=False)
    reqid: int = 0
    child: str = ""
    conn: str = ""
    local_ts: list[str] = Field(default_factory=list)
    remote_ts: list[str] = Field(default_factory=list)
    replay_window: int = Field(default=32, ge=0, le=2040)
    esn: bool = False
    offload: bool = True
    encap: bool = False  # NAT-T (RFC 3948): ESP in UDP 4500, IPv4 outer only (sizes.encap_header)
    # The lifetimes strongSwan's kernel-pfkey installs with the SA (SADB_EXT_LIFETIME_SOFT /
    # _HARD), kept only to be shown by setkey -D: soft_* the child's rekey limits (time
    # after jitter), life_* its hard limits, 0 none. soft_time may be negative: a child with
    # rekey_time 0 and a jitter hands the kernel 0 - jitter wrapped to u_int64.
    soft_time: int = 0
    life_time: int = Field(default=0, ge=0)
    soft_bytes: int = Field(default=0, ge=0)
    life_bytes: int = Field(default=0, ge=0)
    soft_packets: int = Field(default=0, ge=0)
    life_packets: int = Field(default=0, ge=0)

    @field_validator("src", "dst")
    @classmethod
    def _addr(cls, v: str) -> str:
        try:
            return str(ipaddress.ip_address(v))
        except ValueError:
            raise ValueError(f"expected an IP address, found {v!r}") from None

    @field_validator("enc_key", "auth_key")
    @classmethod
    def _hex(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            bytes.fromhex(v)
        except ValueError:
            raise ValueError("expected hex digits (value not shown)") from None
        return v.lower()

    @field_validator("local_ts", "remote_ts")
    @classmethod
    def _ts(cls, v: list[str]) -> list[str]:
        for i, t in enumerate(v):
            parse_selector(t, f"[{i}]")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "SaSpec":
        if ipaddress.ip_address(self.src).version != ipaddress.ip_address(self.dst).version:
            raise ValueError("src and dst: expected the same address family")
        if self.esn and self.replay_window == 0:
            # RFC 4303 A2: the receiver infers the high-order bits from its window
            raise ValueError("esn: extended sequence numbers need a replay_window above 0")
        ek = bytes.fromhex(self.enc_key)
        if self.cipher == GCM and len(ek) != 36:
            raise ValueError(f"enc_key: aes-gcm-16 expects 36 bytes (256-bit key + 4-byte salt), found {len(ek)}")
        if self.cipher == CBC:
            if len(ek) != 32:
                raise ValueError(f"enc_key: aes-cbc-hmac-sha256 expects 32 bytes, found {len(ek)}")
            if self.auth_key is None or len(bytes.fromhex(self.auth_key)) != 32:
                raise ValueError("auth_key: aes-cbc-hmac-sha256 expects 32 bytes of HMAC-SHA-256 key")
        return self

    @model_validator(mode="after")
    def _encap_outer(self) -> "SaSpec":
        if self.encap:
            try:
                encap_header(self.outer, True)
            except ValueError as exc:
                raise ValueError(f"encap: {exc}") from None
        return self

    @property
    def outer(self) -> str:
        return "ipv4" if ipaddress.ip_address(self.dst).version == 4 else "ipv6"

    @property
    def key(self) -> tuple[int, str]:
        return (self.spi, self.dst)

    def local_selectors(self) -> list[Selector]:
        return [parse_selector(t) for t in self.local_ts]

    def remote_selectors(self) -> list[Selector]:
        return [parse_selector(t) for t in self.remote_ts]

    def public(self) -> dict:
        """The SA as list_sas shows it: everything except key material."""
        d = self.model_dump()
        d.pop("enc_key", None)
        d.pop("auth_key", None)
        return d
