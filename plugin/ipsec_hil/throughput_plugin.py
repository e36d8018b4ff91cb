"""Options of the NDR/PDR search (tests_hil/test_ndr_pdr.py) and the fixture that reads them.

Why options: the goal loss ratios are the methodology's parameters (RFC 2544 NDR is 0 %
loss; FD.io CSIT's PDR 0.5 %); a lab with stray drops may need a different PDR ratio or a
wider goal width, and a hardware lab longer trials -- without editing the test.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ipsec_hil.lab.decision.search import Goal

__all__: list[str] = []


@dataclass(frozen=True)
class SearchSettings:
    """The search's goals and trial durations, as the options gave them."""

    goals: tuple[Goal, ...]
    final_duration: float
    initial_duration: float
    latency_fractions: tuple[float, ...]
    ceiling_margin: float = 0.1
    width: float = 0.02


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil")
    group.addoption("--ndr-loss", type=float, default=0.0, metavar="RATIO",
                    help="goal loss ratio of NDR (default 0)")
    group.addoption("--pdr-loss", type=float, default=0.005, metavar="RATIO",
                    help="goal loss ratio of PDR (default 0.005 = 0.5 %%)")
    group.addoption("--search-width", type=float, default=0.02, metavar="RATIO",
                    help="goal relative width (upper - lower) / upper of the NDR/PDR search (default 0.02)")
    group.addoption("--search-trial-seconds", type=float, default=1.0, metavar="S",
                    help="final trial duration of the NDR/PDR search (default 1 s; initial trials a quarter); "
                         "longer when the path's stated queue needs it (topologies/README.md, Queues)")
    group.addoption("--search-margin", type=float, default=0.1, metavar="RATIO",
                    help="the search's ceiling above the path's bottleneck line rate (default 0.1 = 1.1 x)")


@pytest.fixture(scope="session")
def search_settings(pytestconfig: pytest.Config) -> SearchSettings:
    """The NDR/PDR goals from the options; a bad value is a usage error naming the option."""
    opt = pytestconfig.getoption
    try:
        width = opt("--search-width")
        goals = (Goal("NDR", opt("--ndr-loss"), width=width), Goal("PDR", opt("--pdr-loss"), width=width))
    except ValueError as exc:
        raise pytest.UsageError(f"--ndr-loss/--pdr-loss/--search-width: {exc}") from None
    final = opt("--search-trial-seconds")
    if not final > 0:
        raise pytest.UsageError(f"--search-trial-seconds {final}: expected a duration > 0")
    margin = opt("--search-margin")
    if not 0 < margin <= 1:
        raise pytest.UsageError(f"--search-margin {margin}: expected a ratio in (0, 1], e.g. 0.1")
    return SearchSettings(goals, final, final / 4, (0.1, 0.5, 0.9), margin, width)
