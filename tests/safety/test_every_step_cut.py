"""Interruption at every step of one configuration's run: cut (issue 40; the kinds and
what is compared: _every_step.py). A file of its own, its steps in parts (_every_step.PARTS):
each part an xdist unit with its own lab (tests/file_order.py SHARDED_FILES)."""

from __future__ import annotations

import pytest

from tests.safety._every_step import PART_IDS, run_kind

pytestmark = [pytest.mark.needs_root, pytest.mark.safety_exhaustive]


@pytest.mark.parametrize("part", PART_IDS)
def test_cut_at_every_step(every, part):
    run_kind(every, "cut", part)
