"""Teardown.step: every step runs, an interrupt is re-raised at the end, and an interrupted
step is done once more (teardown steps are idempotent) so what follows it is not skipped --
the rule tests/safety/test_every_step.py found missing (pure, no lab)."""

from __future__ import annotations

import pytest

from ipsec_hil.lab.errors import LabError, ProvisionError, TransportError
from ipsec_hil.lab.provision.changes import Teardown


class _Action:
    """Returns ``text``; raises the queued exceptions first, one per call."""

    def __init__(self, text: str, *raises: BaseException) -> None:
        self.text, self.raises, self.calls = text, list(raises), 0

    def __call__(self) -> str:
        self.calls += 1
        if self.raises:
            raise self.raises.pop(0)
        return self.text


def test_an_interrupted_step_is_done_again_and_the_interrupt_still_wins():
    td = Teardown()
    first = _Action("restored a.conf", KeyboardInterrupt())
    after = _Action("reloaded")
    assert td.step("restore a.conf", first) is True and first.calls == 2
    assert td.step("reload", after) is True
    assert td.done == ["restored a.conf (done again after an interrupt)", "reloaded"] and td.errors == []
    with pytest.raises(KeyboardInterrupt):
        td.finish("conn", lambda line: None)


def test_a_second_interrupt_or_an_error_on_the_retry_is_listed():
    td = Teardown()
    assert td.step("route", _Action("x", KeyboardInterrupt(), KeyboardInterrupt()), kept=" (kept)") is False
    assert td.step("file", _Action("x", KeyboardInterrupt(), LabError("copy missing"))) is False
    assert td.errors == ["route: interrupted (kept)", "file: interrupted, then copy missing"]
    notes: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        td.finish("conn", notes.append)
    assert notes == ["teardown: route: interrupted (kept)", "teardown: file: interrupted, then copy missing"]


def test_a_lab_error_is_not_retried_and_fails_the_teardown():
    td = Teardown()
    failing = _Action("x", LabError("no route"))
    assert td.step("route", failing) is False and failing.calls == 1
    assert td.step("next", _Action("next done")) is True
    with pytest.raises(ProvisionError, match="teardown of conn incomplete: route: no route"):
        td.finish("conn", lambda line: None)


def test_a_lost_connection_is_retried_once_and_only_a_second_loss_fails():
    td = Teardown()
    again = _Action("route removed", TransportError("connection lost"))
    assert td.step("route", again) is True and again.calls == 2
    assert td.done == ["route removed (done again after the connection was lost)"]
    assert td.finish("conn", lambda line: None) == td.done  # nothing to re-raise, no error
    td = Teardown()
    assert td.step("route", _Action("x", TransportError("lost"), TransportError("lost again")), kept=" (kept)") is False
    assert td.errors == ["route: lost; again: lost again (kept)"]
    with pytest.raises(ProvisionError, match="route: lost; again: lost again"):
        td.finish("conn", lambda line: None)
