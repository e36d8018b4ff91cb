"""The gate's comparison runs with what the decision's power was measured with (issue 54).

Why: the power table in docs/DESIGN.md ("The merge decision") is a promise about a
configuration -- 8 s trials, 2 s warm-up, a 16-pair budget, the up stream's rate and the CPU
per data frame. A gate whose ``--parent-driver`` phase ran on other defaults (it ran 2 s
trials on up,down until issue 54, where the CPU figure needs ~25 pairs) would keep none
of it. These tests read the plugin's own option defaults, not a copy of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ipsec_hil import compare_plugin
from ipsec_hil.lab.comparing import build_comparison as bc
from ipsec_hil.lab.comparing import decision_power as dp
from ipsec_hil.lab.decision.sequential import SequentialRule

RECORDED = Path(__file__).parent / "recorded" / "decision-power-54.jsonl"


class _Options:
    """Stands in for pytest's option group: records each option's keyword arguments."""

    def __init__(self) -> None:
        self.options: dict[str, dict] = {}

    def getgroup(self, _name: str) -> _Options:
        return self

    def addoption(self, name: str, **kwargs) -> None:
        self.options[name] = kwargs


def _defaults() -> dict[str, object]:
    parser = _Options()
    compare_plugin.pytest_addoption(parser)
    return {name: kw.get("default") for name, kw in parser.options.items()}


def test_the_gate_trial_length_is_the_measured_one():
    defaults = _defaults()
    assert defaults["--compare-seconds"] == bc.DEFAULT_SECONDS == 8.0
    # the design and budget: the sequential rule's own default budget, 16 pairs
    assert defaults["--compare-design"] == "sequential"
    assert defaults["--compare-pairs"] is None and SequentialRule().max_pairs == 16


def test_the_gate_figures_are_the_ones_whose_power_was_measured():
    figures = tuple(str(_defaults()["--compare-figures"]).split(","))
    assert figures == bc.FIGURES == ("up", bc.CPU)
    assert figures == tuple(bc.check_figures(figures))
    # decision-power measures these very figures, and its recorded identical builds carry both
    identical = [json.loads(line) for line in RECORDED.read_text().splitlines()
                 if json.loads(line)["scenario"] == "identical"]
    assert identical, f"{RECORDED}: no identical-build decision recorded"
    assert all(set(d["trials"]) == set(figures) for d in identical)
    assert dp.scenarios((0.95,))[0].kind is None  # identical builds judged on every default figure


def test_the_down_stream_is_still_a_known_figure_and_carries_the_cpu_window():
    """Opting in to ``up,down,cpu`` keeps the CPU figure's window over every stream measured."""
    assert "down" in bc.KNOWN_FIGURES
    assert bc.cpu_streams(("up", "down", bc.CPU)) == ("up", "down")
    assert bc.cpu_streams((bc.CPU,)) == ("up",)
