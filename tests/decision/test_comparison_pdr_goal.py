"""The comparison's PDR goal (ipsec_hil.lab.comparing.build_comparison.pdr_goal) against one stall.

A shared machine, or a bench with a hiccup, can lose packets in one trial at a load the
DUT carries. With one trial deciding a load, that trial becomes the search's upper bound
and the whole search ends below it (a CI run's parent searched 96/20/103/99 Mbit/s). The
comparison's goal judges a load on two trials' time with an exceed ratio of 0.5: the
stalled load is measured again, and the search ends at the knee.
"""

from __future__ import annotations

from ipsec_hil.lab.comparing.build_comparison import PDR_LOSS, PDR_WIDTH, figure_name, pdr_goal
from ipsec_hil.lab.decision.search import Goal, TrialResult, search

KNEE = 100.0  # Mbit/s: no loss at or below, 5 % above


def _dut(stall: bool = True):
    """A sharp knee; with ``stall`` the first final-duration trial at a load the DUT carries
    loses half its packets. Returns the trial function and the stalled load (a list)."""
    stalled: list[float] = []

    def trial(load: float, duration: float) -> TrialResult:
        sent = int(load * 1000 * duration)
        if stall and not stalled and duration == 2.0 and load <= KNEE:
            stalled.append(load)
            return TrialResult(load, sent, sent // 2, duration)
        return TrialResult(load, sent, sent if load <= KNEE else int(sent * 0.95), duration)

    return trial, stalled


def _search(goal: Goal):
    trial, stalled = _dut()
    # as build_comparison._measure_pdr: 2 % .. 1.1 x the link, no intermediate phase
    result = search(trial, max_rate=1.1 * 110, min_rate=0.02 * 110, goals=(goal,), final_duration=2.0,
                    phases=0, max_trials=40)
    return result.goal(goal.name), stalled, result


def test_one_stalled_trial_does_not_set_the_pdr():
    pdr, stalled, result = _search(pdr_goal(2.0))
    assert stalled, "the simulated stall never happened: the test proves nothing"
    assert pdr.lower_bound is not None and pdr.upper_bound is not None
    assert pdr.lower_bound <= KNEE < pdr.upper_bound and pdr.width_reached, pdr.summary()
    again = [t for t in result.trials if t.load == stalled[0] and t.result.duration == 2.0]
    assert len(again) == 2, f"the stalled load {stalled[0]:g} was measured {len(again)} time(s), expected 2"
    print(f"stall at {stalled[0]:.1f} Mbit/s: {pdr.summary()} in {result.trial_count} trials")


def test_the_one_trial_rule_is_what_the_stall_broke():
    """The same DUT and stall with one trial deciding: the search ends below the stall.
    This is the case the comparison's goal exists for; if it ever passed, the stall above
    would prove nothing."""
    pdr, stalled, result = _search(Goal("PDR", PDR_LOSS, width=PDR_WIDTH))
    assert stalled and pdr.upper_bound is not None and pdr.upper_bound <= stalled[0] < KNEE, pdr.summary()
    print(f"one trial deciding, stall at {stalled[0]:.1f} Mbit/s: {pdr.summary()} in {result.trial_count} trials")


def test_a_load_that_loses_twice_is_missed():
    """A real knee still ends the search: above it both trials lose."""
    trial, _ = _dut(stall=False)
    result = search(trial, max_rate=121.0, min_rate=2.2, goals=(pdr_goal(2.0),), final_duration=2.0,
                    phases=0, max_trials=40)
    pdr = result.goal("PDR")
    assert pdr.lower_bound <= KNEE < pdr.upper_bound and pdr.width_reached, pdr.summary()
    assert figure_name("pdr", 2.0).startswith("PDR (loss <= 0.5 %, width 2 %, a load missed when 2 of 2 trials")
