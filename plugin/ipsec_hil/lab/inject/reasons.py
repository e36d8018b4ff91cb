"""Which counter a dropped frame must move, by reason: the profile's driver counters for
an offloaded association, FreeBSD's espstat otherwise (issue 12, invariant 2).

Why FreeBSD's keys here: where no driver counter exists (an unknown SPI on octep: no
driver association, the kernel's ipsec_common_input answers), or the association is run
by the kernel, FreeBSD 14's esp_input()/esp_input_cb() count (sys/netipsec/xform_esp.c):
a replay `esps_replay`, an ICV mismatch `esps_badauth`, a payload not header + IV + whole
blocks + ICV `esps_badilen`, a last pad byte that is not the pad length `esps_badenc`, an
unknown SPI `esps_notdb`; netstat's JSON names them as below.
"""
from __future__ import annotations

from typing import Any

KERNEL = {
    "replay": "possible-replay-detected",
    "auth": "dropped-bad-auth",
    "length": "dropped-bad-length",
    "pad": "dropped-bad-crypto",
    "no_sa": "dropped-no-tdb",
}
VARIANT_REASON = {"icv_bit": "auth", "ciphertext_bit": "auth", "truncated": "length",
                  "bad_pad_length": "pad", "unknown_spi": "no_sa"}
_ROLE = {"replay": "replay_drops", "auth": "auth_drops", "length": "malformed_drops",
         "pad": "malformed_drops", "no_sa": "no_sa_drops"}


def drop_counter(profile: Any, offloaded: bool, reason: str) -> tuple[str, str]:
    """("driver" | "esp", counter name) that one drop for `reason` moves exactly once."""
    if reason not in KERNEL:
        raise ValueError(f"reason {reason!r}: expected one of {', '.join(KERNEL)}")
    names = getattr(profile.roles, _ROLE[reason]) if offloaded or reason == "no_sa" else ()
    if names:
        return "driver", names[0]
    return "esp", KERNEL[reason]
