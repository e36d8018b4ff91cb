"""ipsec_hil.lab.measuring.baseline: load/save/compare with crafted baselines (pure, fast)."""

from __future__ import annotations

import json
import statistics

import pytest

from ipsec_hil.lab.measuring import baseline as bl
from ipsec_hil.lab.reporting.sections import baseline_comparison_markdown

NODE = "tests_hil/test_rates.py::test_forwarded_rate[up-1x10s-lab-v4in4-gcm]"
LABEL = "one stream up, 1 stream(s), 10 s"


def _env(md5: str = "a" * 32, topology: str = "virtual") -> dict:
    return bl.environment(topology=topology, virtual=True, traffic_seconds=1.0,
                          appliances=[bl.ApplianceEnv("dut3300", "xgs3300", "octep", md5, 4096, "14.1-RELEASE")])


def _repeat(*figs: tuple[str, float, str], md5: str = "a" * 32, topology: str = "virtual") -> bl.Repeat:
    return bl.Repeat(date="2026-11-29T20:00:00+00:00", environment=_env(md5, topology),
                     figures=[bl.FigureValue(NODE, label, v, unit) for label, v, unit in figs],
                     counters={NODE: ["counter  delta\ntx_encrypt  100\n"]}, outcomes={NODE: "passed"})


def _saved(tmp_path, *values: float, label: str = LABEL) -> bl.Baseline:
    path = tmp_path / "base.json"
    for v in values:
        bl.save(path, _repeat((label, v, "Mbit/s"), ("floor", 80.0, "Mbit/s"), ("frames", 1234, "")))
    return bl.load(path)


def _cur(value: float, unit: str = "Mbit/s", label: str = LABEL) -> list[bl.FigureValue]:
    return [bl.FigureValue(NODE, label, value, unit)]


def test_repeats_accumulate_and_round_trip(tmp_path):
    base = _saved(tmp_path, 95.0, 97.0, 96.0)
    assert len(base.repeats) == 3
    key = bl.figure_key(NODE, LABEL)
    fig, vals = base.rate_samples()[key]
    assert vals == [95.0, 97.0, 96.0] and fig.unit == "Mbit/s"
    assert base.repeats[0].counters[NODE][0].startswith("counter")
    # non-rate figures are kept, not compared
    assert any(f.label == "frames" and f.value == 1234 for f in base.repeats[0].figures)
    assert bl.figure_key(NODE, "frames") not in base.rate_samples()


def test_noise_rule_three_stdev_or_two_percent():
    mean, noise = bl.noise_of([95.0, 97.0, 96.0])
    assert mean == pytest.approx(96.0)
    assert noise == pytest.approx(max(3 * statistics.stdev([95.0, 97.0, 96.0]), 0.02 * 96.0))  # 3.0
    mean, noise = bl.noise_of([100.0, 100.0])
    assert noise == pytest.approx(2.0)  # the 2 % floor when the repeats agree exactly
    mean, noise = bl.noise_of([100.0])
    assert noise == pytest.approx(2.0)


def test_rate_below_mean_minus_noise_is_a_regression(tmp_path):
    base = _saved(tmp_path, 95.0, 97.0, 96.0)  # mean 96, noise 3 -> threshold 93
    c = bl.compare(base, _cur(92.9), _env())
    (row,) = [r for r in c.rows if r.label == LABEL]
    assert row.verdict == "regression" and not c.passed and c.regressions == [row]
    assert row.mean == pytest.approx(96.0) and row.noise == pytest.approx(3.0)
    text = baseline_comparison_markdown(c)
    assert "REGRESSION" in text and "Compared with baseline" in text
    for v, verdict in ((93.1, "ok"), (96.0, "ok"), (98.9, "ok"), (99.1, "improved")):
        c = bl.compare(base, _cur(v), _env())
        assert [r.verdict for r in c.rows if r.label == LABEL] == [verdict], v
        assert c.passed


def test_units_are_normalised_to_mbit(tmp_path):
    base = _saved(tmp_path, 950.0, 950.0)  # noise 19 -> threshold 931
    assert bl.compare(base, _cur(0.94, "Gbit/s"), _env()).passed
    assert not bl.compare(base, _cur(930_000.0, "kbit/s"), _env()).passed


def test_new_and_not_measured_figures_are_not_regressions(tmp_path):
    base = _saved(tmp_path, 95.0, 97.0)
    c = bl.compare(base, [bl.FigureValue(NODE, "four streams up", 300.0, "Mbit/s")], _env())
    verdicts = {r.label: r.verdict for r in c.rows}
    assert verdicts == {"four streams up": "new", LABEL: "not measured", "floor": "not measured"}
    assert c.passed


def test_builds_compared_are_stated(tmp_path):
    base = _saved(tmp_path, 95.0)
    c = bl.compare(base, _cur(95.0), _env(md5="b" * 32))
    assert c.builds_line() == f"dut3300: baseline {'a' * 32} -> this run {'b' * 32}"
    assert "one repeat" in " ".join(c.warnings)
    c2 = bl.compare(base, _cur(95.0), _env())
    assert "(same build)" in c2.builds_line()
    d = c.to_dict()
    assert d["builds"] == {"baseline": {"dut3300": "a" * 32}, "this_run": {"dut3300": "b" * 32}}


def test_repeat_of_another_build_or_lab_is_refused(tmp_path):
    path = tmp_path / "base.json"
    bl.save(path, _repeat((LABEL, 95.0, "Mbit/s")))
    with pytest.raises(bl.BaselineError, match=r"base\.json: repeats\[0\]\.environment\.appliances\.\*\.module_md5: .*one build"):
        bl.save(path, _repeat((LABEL, 95.0, "Mbit/s"), md5="c" * 32))
    with pytest.raises(bl.BaselineError, match=r"repeats\[0\]\.environment\.topology: this run has 'hardware'"):
        bl.save(path, _repeat((LABEL, 95.0, "Mbit/s"), topology="hardware"))
    assert len(bl.load(path).repeats) == 1


@pytest.mark.parametrize("mutate,expect", [
    (lambda d: d.update(schema="other/9"), r"schema: expected 'ipsec-hil-baseline/1', found 'other/9'"),
    (lambda d: d.update(repeats=[]), r"repeats: expected at least one repeat"),
    (lambda d: d["repeats"][0].pop("environment"), r"repeats\[0\]\.environment: expected an object, found nothing"),
    (lambda d: d["repeats"][0]["figures"][0].update(value="fast"),
     r"repeats\[0\]\.figures\[0\]\.value: expected a finite number \(unit Mbit/s\), found 'fast'"),
    (lambda d: d["repeats"][0]["figures"][0].pop("label"), r"repeats\[0\]\.figures\[0\]\.label: expected a label"),
    (lambda d: d["repeats"][0]["environment"]["appliances"]["dut3300"].update(module_md5=5),
     r"repeats\[0\]\.environment\.appliances\.dut3300\.module_md5: expected a string or null, found 5"),
])
def test_bad_baseline_names_file_and_field(tmp_path, mutate, expect):
    path = tmp_path / "base.json"
    bl.save(path, _repeat((LABEL, 95.0, "Mbit/s")))
    d = json.loads(path.read_text())
    mutate(d)
    path.write_text(json.dumps(d))
    with pytest.raises(bl.BaselineError, match=str(path).replace(".", r"\.") + ": " + expect):
        bl.load(path)


def test_not_json_and_missing_file(tmp_path):
    p = tmp_path / "b.json"
    p.write_text('{\n "schema": "ipsec-hil-baseline/1",\n "repeats": [\n')
    with pytest.raises(bl.BaselineError, match=r"b\.json:4: not JSON"):
        bl.load(p)
    with pytest.raises(bl.BaselineError, match=r"nope\.json: baseline file not found"):
        bl.load(tmp_path / "nope.json")


def test_xdist_group_suffix_does_not_change_the_key(tmp_path):
    base = _saved(tmp_path, 95.0, 97.0, 96.0)
    grouped = [bl.FigureValue(NODE + "@dut3300+peer3300+xgs136", LABEL, 80.0, "Mbit/s")]
    c = bl.compare(base, grouped, _env())
    assert [r.verdict for r in c.rows if r.label == LABEL] == ["regression"]
    assert bl.canonical_nodeid("t.py::test[user@host]") == "t.py::test[user@host]"


def test_ndr_and_pdr_figures_are_compared_as_rates(tmp_path):
    """tests_hil/test_ndr_pdr.py records each goal's proved lower bound as a figure named by
    the goal in Mbit/s, and the bounds as text: the bound is a rate the gate compares, the
    text is kept for the reader."""
    from ipsec_hil.lab.decision.search import DEFAULT_GOALS

    node = "tests_hil/test_ndr_pdr.py::test_ndr_pdr[lab-v4in4-gcm]"
    path = tmp_path / "base.json"
    for v in (71.0, 72.0, 71.5):
        bl.save(path, bl.Repeat(date="2026-12-02T05:00:00+00:00", environment=_env(), counters={},
                                outcomes={node: "passed"}, figures=[
                                    *(bl.FigureValue(node, g.name, v, "Mbit/s") for g in DEFAULT_GOALS),
                                    bl.FigureValue(node, "PDR bounds (loss <= 0.5 %)", f"[{v}, 73.0] Mbit/s", "")]))
    base = bl.load(path)
    assert sorted(k.split(" :: ")[-1] for k in base.rate_samples()) == ["NDR", "PDR"]
    c = bl.compare(base, [bl.FigureValue(node, "NDR", 71.2, "Mbit/s"), bl.FigureValue(node, "PDR", 60.0, "Mbit/s")],
                   _env())
    assert {r.label: r.verdict for r in c.rows} == {"NDR": "ok", "PDR": "regression"}
