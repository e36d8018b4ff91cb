"""ipsec_hil.lab.inject.reasons: the counter a drop must move, per model and reason (no lab)."""
from __future__ import annotations

import pytest

from ipsec_hil.lab.expectations.hardware import REGISTRY
from ipsec_hil.lab.inject.reasons import KERNEL, VARIANT_REASON, drop_counter


@pytest.mark.parametrize("model,reason,want", [
    ("xgs3300", "replay", ("driver", "CRYPTO_DROP_REPLAY_OOW")),
    ("xgs3300", "auth", ("driver", "rx_bad")),
    ("xgs3300", "pad", ("driver", "rx_bad")),
    ("xgs3300", "no_sa", ("esp", "dropped-no-tdb")),  # no driver association: FreeBSD counts it
    ("xgs136", "replay", ("driver", "rx_bad")),
    ("xgs136", "no_sa", ("driver", "rx_nosa")),
])
def test_offloaded(model, reason, want):
    assert drop_counter(REGISTRY.get(model), True, reason) == want


def test_kernel_run_association_counts_freebsd_espstat():
    p = REGISTRY.get("xgs3300")
    assert {r: drop_counter(p, False, r) for r in KERNEL} == {r: ("esp", k) for r, k in KERNEL.items()}
    assert set(VARIANT_REASON.values()) <= set(KERNEL)
    with pytest.raises(ValueError, match="reason 'nope'"):
        drop_counter(p, True, "nope")
