"""Teeth both ways for the ledger that closes on counts (issue 52), on each model:

- wire_loss_uncounted on the receiving appliance (one ESP frame in 50 lost on the wire,
  after the sender's driver counted it, counted nowhere) breaks the conservation test of
  that model through its own assertion, "invariant broken", the ledger printed;
- oq_drop_counted on the sending appliance (one frame in 2,000, counted as encrypted, then
  dropped at its port's full output queue and counted there: the driver's transmit drop and
  `netstat -i -d`'s Drop) does not: the same test passes, and its measurement page lists
  the frames under "Counted loss" with the counter that counted them.

Each node runs in a pytest of its own on one running lab (tests/lab_factory.suite_run), as
a user runs the suite; the faults are switched on and off through the lab's own handle.
"""

from __future__ import annotations

import pytest

from tests.lab_factory import lab_fixture, suite_run

pytestmark = [pytest.mark.needs_root]

lab = lab_fixture(name="lab")

#: per model: the conservation node, its sending and receiving appliance, the invariant's words
NODES = {
    "xgs136": ("tests_hil/test_six_children.py::test_six_streams_each_tunnel_carries[many-v4in4-gcm-c6]",
               "xgs136", "peer3300", "frames the 136 handed its engine = frames the peer decrypted",
               "xgs136:tx_drop"),
    "xgs3300": ("tests_hil/test_conservation.py::test_appliance_sourced_conservation[lab-v4in4-gcm]",
                "dut3300", "peer3300", "the peer's ESP input equals the engine's encrypt count",
                "dut3300:TX_DROP_QUEUE_FULL"),
}


def _run_with(lab, tmp_path, node: str, host: str, fault: str, n: int):
    """The node in a pytest of its own on ``lab`` with ``fault`` on ``host``, off again after."""
    handle = lab.attach()
    handle.fault(host, fault, n=n)
    try:
        return suite_run([node, "--traffic-seconds", "0.2", "-q"], tmp_path, lab=lab, timeout=600)
    finally:
        handle.clear_faults()


@pytest.mark.parametrize("model", sorted(NODES))
def test_a_frame_lost_uncounted_breaks_conservation(model, lab, tmp_path):
    node, _sender, receiver, words, _door = NODES[model]
    r = _run_with(lab, tmp_path, node, receiver, "wire_loss_uncounted", 50)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    assert "invariant broken" in out and words in out and "differ by +" in out, out[-3000:]


@pytest.mark.parametrize("model", sorted(NODES))
def test_a_frame_lost_and_counted_is_counted_loss_not_a_failure(model, lab, tmp_path):
    node, sender, _receiver, words, door = NODES[model]
    app = lab.apps[sender]
    port = {"xgs136": "port8", "dut3300": "wan10g"}[sender]
    before = app.snapshot().values()
    r = _run_with(lab, tmp_path, node, sender, "oq_drop_counted", 2000)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    after = app.snapshot().values()
    driver = door.split(":", 1)[1]
    dropped = after[driver] - before[driver]
    # the same frames, counted twice as FreeBSD counts them: by the driver and as the port's Drop
    assert dropped > 0 and after[f"if.{port}.odrop"] - before[f"if.{port}.odrop"] >= dropped, (before, after)
    page = (tmp_path / "reports" / "measurement-page.md").read_text()
    section = page.split("## Counted loss", 1)[1].split("\n## ", 1)[0] if "## Counted loss" in page else ""
    assert words in section and door in section and "frames lost, counted" in section, page[-3000:]
