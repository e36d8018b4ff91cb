"""Interruption at every step of one configuration's run, Ctrl-C (issue 40; the kinds and
what is compared: _every_step.py). Also: the steps are enumerated by a recording, not
picked, and a second recording names the same ones.

The other kinds are their own files (test_every_step_cut.py, _cut_running.py,
_sigkill.py) and the other configurations test_every_step_sampled.py. Each kind's steps are
in parts (_every_step.PARTS); under ``--dist loadfile`` each part is a work unit of its own
with its own lab (tests/file_order.py SHARDED_FILES), as the fault matrix's shards, so the
stage's workers share the set (tools/run-safety). Each prints its count: steps x kinds.
"""

from __future__ import annotations

from tests.safety._every_step import CONFIG, MARKS, kind_test
from tests.safety._inject import STEPS, trigger

pytestmark = MARKS


def test_every_step_is_enumerated_and_stable(every):
    """The recording names every call once, a second recording names the same steps, and
    the hand-picked steps of test_integrity.py are among them."""
    steps = every.record(CONFIG)
    every.settle()
    again = every.record(CONFIG)
    assert len(set(steps)) == len(steps), "a step name is not unique"
    assert sorted(again) == sorted(steps), (
        f"a second recording differs: only first {sorted(set(steps) - set(again))[:5]}, "
        f"only second {sorted(set(again) - set(steps))[:5]}")
    for name in STEPS:
        if name == "test":
            continue  # the old echo body; the body is now real reads (_lab.scenario)
        hit = trigger(name, every.plan.local.host, every.plan.remote.host)
        assert any(hit(h, op, text) for h, op, text, _ in steps), f"hand-picked step {name!r} not among the recorded"
    ops = sorted({op for _, op, _, _ in steps})
    hosts = sorted({h for h, _, _, _ in steps})
    print(f"\n{CONFIG.id}: {len(steps)} remote steps ({', '.join(f'{o} {sum(s[1] == o for s in steps)}' for o in ops)}; "
          f"hosts {', '.join(f'{h} {sum(s[0] == h for s in steps)}' for h in hosts)}) "
          f"x 4 kinds = {4 * len(steps)} scenarios")
    diffs = every.differences()
    assert not diffs, diffs


test_ctrl_c_at_every_step = kind_test("ctrl-c")
