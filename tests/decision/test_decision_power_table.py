"""The power benchmark's own arithmetic (ipsec_hil.lab.comparing.decision_power): the
builds it asks the twin for, and how its table counts detections and false alarms. The
measured table itself is a benchmark's output (tools/decision-power), not asserted."""

from __future__ import annotations

from ipsec_hil.lab.comparing.decision_power import Decision, Scenario, scenarios, table


def test_the_scenarios_are_identical_builds_and_both_kinds_at_every_level():
    names = [s.name for s in scenarios()]
    assert names == ["identical", "rate x0.98", "rate x0.95", "rate x0.9", "rate x0.8",
                     "cpu x0.98", "cpu x0.95", "cpu x0.9", "cpu x0.8"]
    assert Scenario("up", 0.95).marker() == b"twin-rate-factor=0.95\n"
    assert Scenario("cpu", 0.8).marker() == b"twin-cpu-factor=1.2500\n"  # 0.8 of the parent's efficiency
    assert Scenario(None).marker() == b""


def _v(verdict: str, pairs: int = 5, proved: bool | None = None) -> dict:
    """One figure's record as ``decide`` writes it (``proved``: a record of another time)."""
    return {"verdict": verdict, "ratio": 0.95, "ci": [0.93, 0.97], "pairs": pairs,
            "equivalence_proved": verdict == "no change" if proved is None else proved}


def _d(scenario: Scenario, up: str, cpu: str, pairs: int = 5) -> Decision:
    return Decision(scenario.name, scenario.kind, scenario.level, pairs, 40.0, 30.0,
                    sequential={"up": _v(up, pairs), "cpu": _v(cpu, pairs)},
                    fixed={"up": _v("unresolved", pairs), "cpu": _v(cpu, pairs)})


def _row(rows: list[str], start: str) -> list[str]:
    return [cell.strip() for cell in next(r for r in rows if r.startswith(start)).strip("|").split("|")]


def test_the_table_counts_the_changed_figure_as_detection_and_the_other_as_false_alarms():
    sc = Scenario("cpu", 0.95)
    rows = table([_d(sc, "no change", "regression"), _d(sc, "progression", "regression"),
                  _d(sc, "no change", "unresolved")])
    seq = _row(rows, "| cpu x0.95 | sequential")
    assert seq[3:6] == ["67%", "1/3 (33%)", "1/3 (33%)"], seq  # detected, false alarms, unresolved
    ident = table([_d(Scenario(None), "regression", "no change"), _d(Scenario(None), "no change", "no change")])
    seq = _row(ident, "| identical | sequential")
    assert seq[3:6] == ["-", "1/4 (25%)", "0/4 (0%)"], seq


def test_an_unresolved_figure_is_counted_as_unresolved_not_as_no_change():
    """Issue 54: a CPU x0.95 decision that ends unresolved is not detected, and the table says
    it was unresolved; identical builds' unresolved figures are no false alarm and no pass.
    A record of the time it was written "no change" without equivalence counts the same."""
    sc = Scenario("cpu", 0.95)
    old = Decision(sc.name, sc.kind, sc.level, 16, 106.0, 28.0, sequential={"cpu": _v("no change", 16, proved=False)},
                   fixed={"cpu": _v("no change", 16, proved=False)})
    rows = table([_d(sc, "no change", "regression"), _d(sc, "no change", "unresolved"), old])
    assert _row(rows, "| cpu x0.95 | sequential")[3:6] == ["33%", "-", "2/3 (67%)"]
    ident = table([_d(Scenario(None), "unresolved", "unresolved"), _d(Scenario(None), "no change", "unresolved")])
    assert _row(ident, "| identical | sequential")[3:6] == ["-", "0/4 (0%)", "3/4 (75%)"]


def test_the_pairs_the_measured_noise_asks_for():
    """More spread asks for more pairs, a bigger effect for fewer; an effect inside the
    margin is never found (None)."""
    from ipsec_hil.lab.decision.sequential import SequentialRule
    from ipsec_hil.lab.comparing.decision_power import pairs_needed

    rule = SequentialRule()
    quiet, noisy = pairs_needed(0.01, rule, 0.95), pairs_needed(0.03, rule, 0.95)
    assert quiet is not None and noisy is not None and quiet < noisy
    assert pairs_needed(0.01, rule, 0.80) == rule.min_pairs
    assert pairs_needed(0.01, rule, 0.98) is None  # 2 %: inside the +-2.5 % margin
    assert pairs_needed(0.02, rule, 1.0, power=0.5) < pairs_needed(0.04, rule, 1.0, power=0.5)
