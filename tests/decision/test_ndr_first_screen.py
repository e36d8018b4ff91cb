"""The first screen shows an unbracketed NDR/PDR in words, never as a rate (issue 41)."""

from __future__ import annotations

from types import SimpleNamespace

from ipsec_hil.lab.decision.search import Goal, GoalResult
from ipsec_hil.lab.reporting.first_screen import model_rows
from ipsec_hil.lab.reporting.report import Figure


def _entry(*figures):
    return SimpleNamespace(tunnel_case="lab-v4in4-gcm", hardware=("xgs3300",), figures=list(figures), nodeid="x",
                           outcome="passed", checks=[])


def test_not_bracketed_is_said_in_words_and_a_bracketed_rate_as_a_number():
    at_least = GoalResult(Goal("NDR", 0.0), 95.6, None, None, True, 1.0, "the bench's limit met the goal", 96.5)
    words = at_least.verdict("Mbit/s")
    assert words == "at least 95.6 Mbit/s, not bracketed: the bench's limit (it offered at most 96.5 when asked more)"
    row = model_rows([_entry(Figure("NDR", words), Figure("NDR bounds (loss <= 0 %)", "[95.6, None] Mbit/s"),
                             Figure("PDR", 88.2, "Mbit/s"))])["xgs3300"][0]
    assert row[5] == words and row[6] == "88.2"
