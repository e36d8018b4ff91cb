"""The plots render to PNG files (the page embeds them); their content was checked by eye."""

from __future__ import annotations

import numpy as np
import pytest

from ipsec_hil.lab.decision.bench import SEARCH_CASES, run_case
from ipsec_hil.lab.decision.compare import FigureTrials, compare_trials, interleaved_schedule
from ipsec_hil.lab.decision.errors import DecisionError
from ipsec_hil.lab.decision.latency import ProbeSample, summarize
from ipsec_hil.lab.decision.plot import plot_comparisons, plot_latency, plot_search
from ipsec_hil.lab.decision.simulate import simulated_trials

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(data: bytes, path) -> None:
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert path.exists() and path.read_bytes() == data


def test_comparison_plot(tmp_path):
    rng = np.random.default_rng(0)
    comparisons = [
        compare_trials(FigureTrials(name, simulated_trials(rng, interleaved_schedule(6), candidate_ratio=r, drift=-0.1), unit="Mbit/s"))
        for name, r in (("udp rate", 0.8), ("tcp rate", 1.0))
    ]
    path = tmp_path / "compare.png"
    _assert_png(plot_comparisons(comparisons, path), path)


def test_search_plot(tmp_path):
    result, _ = run_case(next(c for c in SEARCH_CASES if c.name.startswith("gradual")))
    path = tmp_path / "search.png"
    _assert_png(plot_search(result, path, unit="packets/s"), path)


def test_search_plot_of_a_lossless_dut_has_no_upper_line(tmp_path):
    result, _ = run_case(next(c for c in SEARCH_CASES if c.name == "never loses"))
    path = tmp_path / "lossless.png"
    _assert_png(plot_search(result, path), path)


def test_latency_plot(tmp_path):
    summaries = [
        summarize([ProbeSample(0.0, d * 1e-6) for d in range(10, 60)], fraction=f, offered=f * 1e5)
        for f in (0.1, 0.5, 0.9)
    ]
    path = tmp_path / "latency.png"
    _assert_png(plot_latency(summaries, path), path)


def test_empty_input_is_named():
    with pytest.raises(DecisionError, match="comparisons"):
        plot_comparisons([])
    with pytest.raises(DecisionError, match="summaries"):
        plot_latency([])
