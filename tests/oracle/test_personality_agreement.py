"""The suite's hardware profiles and the twin's personalities name the same things.

Why: they are kept apart on purpose (the suite's expectations must not be the lab's
behaviour), so nothing else would notice when one side renames a counter or a module:
the suite would read an OID the lab never emits, or the lab would count into a counter
no test reads.  Each mismatch fails here, naming the model and the counter.
"""
from __future__ import annotations

import pytest

from ipsec_hil.lab.expectations.hardware import MODELS, profile_for
from ipsec_hil_twin.personality import PERSONALITIES, for_host


def test_every_suite_model_has_a_twin_personality():
    missing = [m for m in MODELS if m not in PERSONALITIES]
    assert not missing, (f"the suite knows models {missing} that the virtual lab cannot emulate: "
                         f"add an entry to twin/ipsec_hil_twin/personality.py PERSONALITIES")


@pytest.mark.parametrize("model", sorted(set(MODELS) & set(PERSONALITIES)))
@pytest.mark.parametrize("overrides", [{}, {"unit": 1}, {"unit": 2, "counters": {"sa_count": "dev.x.0.sa"}}],
                         ids=["defaults", "unit1", "unit2-renamed"])
def test_driver_module_and_every_oid_agree(model, overrides):
    suite = profile_for(model, overrides)
    twin = for_host(model, overrides)
    assert twin.base.driver == suite.driver, (
        f"{model}: the suite expects driver {suite.driver!r}, the twin emulates {twin.base.driver!r}")
    assert twin.module_file == suite.module_file, (
        f"{model}: the suite expects module file {suite.module_file}, the twin installs {twin.module_file}")
    emitted = set(twin.counters.values())  # what ipsec_hil_twin.fbsd.sysctl serves for this host
    for name, oid in suite.counters.items():
        assert oid in emitted, (
            f"{model}: the suite reads counter {name!r} at {oid}, which the twin's sysctl does not emit "
            f"(the twin has {twin.counters.get(name, 'no such counter')} for {name!r})")
        assert twin.counters.get(name) == oid, (
            f"{model}: counter {name!r} is {oid} for the suite but {twin.counters.get(name)} for the twin")


@pytest.mark.parametrize("model", sorted(set(MODELS) & set(PERSONALITIES)))
def test_every_counter_the_twin_counts_is_one_the_suite_knows(model):
    """The counting rules only name counters of the model (or kernel/engine slots)."""
    p = PERSONALITIES[model]
    suite = profile_for(model)
    named = {n for f in p.counting._asdict().values() for n in ((f,) if isinstance(f, str) else (f or ()))}
    unknown = sorted(n for n in named if ":" not in n and n not in suite.counters)
    assert not unknown, f"{model}: the twin counts into {unknown}, which the suite's profile does not name"
