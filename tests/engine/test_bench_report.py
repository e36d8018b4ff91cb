"""ipsec_hil_twin.bench's report: medians of several runs, the 14x and CBC-within-30 % verdicts (issue 15)."""
from __future__ import annotations

from ipsec_hil_twin.bench import PathResult, median_run, per_run_ratios, report


def run(gcm: tuple[float, float], cbc: tuple[float, float], ss: tuple[float, float]) -> dict[str, PathResult]:
    def p(name, f, r):
        x = PathResult(name, f, r)
        x.notes.append(f"{name} note")
        return x
    return {"plain": p("plain", 2000, 2000), "twin_gcm": p("twin gcm", *gcm), "twin_cbc": p("twin cbc", *cbc),
            "strongswan": p("strongSwan", *ss)}


def test_median_per_path_and_direction():
    runs = [run((900, 800), (700, 700), (70, 60)), run((1100, 1000), (800, 650), (60, 75)),
            run((1000, 50), (750, 600), (80, 70))]
    m = median_run(runs)
    assert (m["twin_gcm"].fwd, m["twin_gcm"].rev) == (1000, 800)
    assert (m["strongswan"].fwd, m["strongswan"].rev) == (70, 70)
    assert m["twin_gcm"].notes == ["run 1: twin gcm note", "run 2: twin gcm note", "run 3: twin gcm note"]


def test_target_is_fourteen_times_each_way(capsys):
    assert report(1500, [run((1400, 1400), (1300, 1300), (100, 100))])  # exactly 14x
    assert not report(1500, [run((1400, 1390), (1300, 1300), (100, 100))])  # one way short
    out = capsys.readouterr().out
    assert "target twin >= 14x strongSwan both ways: NOT met" in out
    assert "CBC within 30% of GCM: met" in out


def test_ratios_run_by_run_are_shown_not_judged(capsys):
    """Three runs whose CBC/GCM medians per path give 0.69 B->A (missed) while each run's
    own ratio has a median of 0.71: the verdict stays the medians' and says NOT met; the
    run-by-run figures are printed beside it."""
    runs = [run((1101, 1171), (829, 770), (61, 63)), run((1105, 1114), (789, 791), (55, 60)),
            run((919, 804), (696, 633), (47, 50))]
    text = per_run_ratios(runs)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("cbc/gcm B->A"))
    assert line.endswith("0.66, 0.71, 0.79   (median 0.71)"), line
    report(1500, runs)
    out = capsys.readouterr().out
    assert "ratios run by run (not the verdict's basis):" in out
    assert any(ln.split() == ["cbc/gcm", "B->A", "0.69"] for ln in out.splitlines()) and "CBC within 30% of GCM: NOT met" in out
