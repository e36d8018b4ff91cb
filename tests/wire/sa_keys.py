"""An association as the crafter reads it (ipsec_hil.lab.inject.craft.SaKeys: SadEntry's
fields), for the wire tests that build one without `setkey -D`."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sa:
    spi: int
    src: str
    dst: str
    cipher: str
    enc_key: str = field(repr=False)  # random per test, but kept out of failure output as SadEntry's
    auth_key: str | None = field(repr=False)
