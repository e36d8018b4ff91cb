"""ESP size arithmetic used by the engine's routes and PMTU gate.

Why here: the numbers must live in exactly one place, `plugin.lab.esp_math`
(DESIGN.md).  The engine imports it when it is available; until that module exists
(it is built in parallel) the same formulas are written once below, from
RFC 4303/4106/4868 and FreeBSD's ipsec_hdrsiz_internal(), and used only as a fallback.
"""
from __future__ import annotations

GCM = "aes-gcm-16"
CBC = "aes-cbc-hmac-sha256"
CIPHERS = (GCM, CBC)

# (IV bytes, ICV bytes, alignment) per suite: RFC 4106 section 3 / RFC 3602 + RFC 4868.
_SUITE = {GCM: (8, 16, 4), CBC: (16, 16, 16)}
_OUTER_HDR = {"ipv4": 20, "ipv6": 40}


def _check(cipher: str, outer: str) -> None:
    if cipher not in _SUITE:
        raise ValueError(f"cipher {cipher!r}: expected one of {', '.join(CIPHERS)}")
    if outer not in _OUTER_HDR:
        raise ValueError(f"outer family {outer!r}: expected ipv4 or ipv6")


def _local_esp_overhead(cipher: str, outer: str, inner_len: int) -> int:
    _check(cipher, outer)
    iv, icv, align = _SUITE[cipher]
    padded = -(-(inner_len + 2) // align) * align
    return _OUTER_HDR[outer] + 8 + iv + (padded - inner_len) + icv


def _local_max_inner(cipher: str, outer: str, path_mtu: int) -> int:
    _check(cipher, outer)
    iv, icv, align = _SUITE[cipher]
    room = path_mtu - _OUTER_HDR[outer] - 8 - iv - icv  # bytes for inner + pad + 2
    return (room // align) * align - 2


def _local_kernel_worst_case_header(outer: str, block: int = 64) -> int:
    # esp_hdrsiz(NULL): sizeof(struct newesp) 8 + EALG_MAX_BLOCK_LEN + 9 + 16, plus outer IP.
    _check(GCM, outer)
    return 8 + block + 9 + 16 + _OUTER_HDR[outer]


try:  # the single source of truth once H1 has committed it
    from plugin.lab import esp_math as _em  # type: ignore[attr-defined]

    esp_overhead = _em.esp_overhead
    max_inner = _em.max_inner
    kernel_worst_case_header = _em.kernel_worst_case_header
    SOURCE = "plugin.lab.esp_math"
except Exception:  # pragma: no cover - depends on what is committed
    esp_overhead = _local_esp_overhead
    max_inner = _local_max_inner
    kernel_worst_case_header = _local_kernel_worst_case_header
    SOURCE = "twin.engine.sizes (fallback)"


def forwarded_limit(path_mtu: int, outer: str, block: int = 64) -> int:
    """FreeBSD's gate for a forwarded packet entering a policy (ipsec6_check_pmtu)."""
    return path_mtu - kernel_worst_case_header(outer, block)
