"""twin.bench's report: medians of several runs, the 14x and CBC-within-30 % verdicts (issue 15)."""
from __future__ import annotations

from twin.bench import PathResult, median_run, report


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
