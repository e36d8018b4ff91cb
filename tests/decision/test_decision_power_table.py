"""The power benchmark's own arithmetic (ipsec_hil.lab.measuring.decision_power): the
builds it asks the twin for, and how its table counts detections and false alarms. The
measured table itself is a benchmark's output (tools/decision-power), not asserted."""

from __future__ import annotations

from ipsec_hil.lab.measuring.decision_power import Decision, Scenario, scenarios, table


def test_the_scenarios_are_identical_builds_and_both_kinds_at_every_level():
    names = [s.name for s in scenarios()]
    assert names == ["identical", "rate x0.98", "rate x0.95", "rate x0.9", "rate x0.8",
                     "cpu x0.98", "cpu x0.95", "cpu x0.9", "cpu x0.8"]
    assert Scenario("up", 0.95).marker() == b"twin-rate-factor=0.95\n"
    assert Scenario("cpu", 0.8).marker() == b"twin-cpu-factor=1.2500\n"  # 0.8 of the parent's efficiency
    assert Scenario(None).marker() == b""


def _d(scenario: Scenario, up: str, cpu: str, pairs: int = 5) -> Decision:
    def v(verdict: str) -> dict:
        return {"verdict": verdict, "ratio": 0.95, "ci": [0.93, 0.97], "equivalence_proved": verdict == "eq",
                "pairs": pairs}
    return Decision(scenario.name, scenario.kind, scenario.level, pairs, 40.0, 30.0,
                    sequential={"up": v(up), "cpu": v(cpu)}, fixed={"up": v("no change"), "cpu": v(cpu)})


def test_the_table_counts_the_changed_figure_as_detection_and_the_other_as_false_alarms():
    sc = Scenario("cpu", 0.95)
    rows = table([_d(sc, "eq", "regression"), _d(sc, "progression", "regression"), _d(sc, "eq", "no change")])
    seq = next(r for r in rows if r.startswith("| cpu x0.95 | sequential"))
    assert "| 67% |" in seq and "| 1/3 (33%) |" in seq
    ident = table([_d(Scenario(None), "regression", "eq"), _d(Scenario(None), "eq", "eq")])
    seq = next(r for r in ident if r.startswith("| identical | sequential"))
    assert "| - |" in seq and "| 1/4 (25%) |" in seq


def test_the_pairs_the_measured_noise_asks_for():
    """More spread asks for more pairs, a bigger effect for fewer; an effect inside the
    margin is never found (None)."""
    from ipsec_hil.lab.decision.sequential import SequentialRule
    from ipsec_hil.lab.measuring.decision_power import pairs_needed

    rule = SequentialRule()
    quiet, noisy = pairs_needed(0.01, rule, 0.95), pairs_needed(0.03, rule, 0.95)
    assert quiet is not None and noisy is not None and quiet < noisy
    assert pairs_needed(0.01, rule, 0.80) == rule.min_pairs
    assert pairs_needed(0.01, rule, 0.98) is None  # 2 %: inside the +-2.5 % margin
    assert pairs_needed(0.02, rule, 1.0, power=0.5) < pairs_needed(0.04, rule, 1.0, power=0.5)
