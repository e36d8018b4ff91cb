"""Interruption at every step of one configuration's run: cut-running (issue 40). A kind a file,
so that each part is an xdist unit with its own lab: test_every_step.py says why."""

from tests.safety._every_step import MARKS, kind_test

pytestmark = MARKS

test_cut_running_at_every_step = kind_test("cut-running")
