"""The other configurations of the lab tunnel: all four kinds at a sample of each one's
steps, chosen with the stated seed (_every_step.SEED, SAMPLE steps each; issue 40)."""

from __future__ import annotations

import pytest

from tests.safety._every_step import KINDS, MARKS, OTHERS, SAMPLE, SEED, run_all, sample

pytestmark = MARKS


@pytest.mark.parametrize("config", OTHERS, ids=[c.id for c in OTHERS])
def test_all_kinds_at_sampled_steps(every, config):
    steps = every.record(config)
    every.settle()
    chosen = sample(steps, SAMPLE)
    run_all(every, config, chosen, KINDS, f"all kinds, {config.id} (sample of {SAMPLE}, seed {SEED})", len(steps))
