"""ipsec_hil.lab.rekey's reads, on strongSwan 5.9.8's own listing (a golden file), no lab.

The rekey tests judge "an old association left behind" by the engine's count against what
the listing implies; these checks pin that arithmetic and the re-read that keeps a count
taken mid-removal from reading as a leak (engine_sample), and the drop-count helper the
wire tests use (ipsec_hil.lab.inject.counted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from ipsec_hil.lab import rekey
from ipsec_hil.lab.inject.counted import assert_drops_counted
from ipsec_hil.lab.remote.shell import RunResult

#: one DELETED child (its inbound association lingers) and the INSTALLED one after a rekey
OVERLAP = (Path(__file__).resolve().parents[1] / "golden" / "swanctl_list_sas"
           / "real-5.9.8-rekey-overlap-negative-rekey-time.txt").read_text()
INSTALLED_ONLY = OVERLAP.split("  net: #2")[0].replace("net: #1, reqid 1, DELETED", "net: #1, reqid 1, INSTALLED")


@dataclass
class ScriptedHost:
    """Answers each run() with the next (listing, count, listing) reading of engine_sample."""

    readings: list[tuple[str, int, str]]
    scripts: list[str] = field(default_factory=list)

    def run(self, script: str, timeout: float | None = None) -> RunResult:
        self.scripts.append(script)
        first, held, second = self.readings.pop(0)
        split = "@@hil-rekey-split\n"
        return RunResult(f"{first}{split}{held}\n{split}{second}", "", 0, 0.01, "dut")


def _app(*readings: tuple[str, int, str]):
    profile = SimpleNamespace(oid=lambda name: f"dev.npuep.0.ipsec.{name}")
    return SimpleNamespace(name="dut", host=ScriptedHost(list(readings)), command_timeout=5.0, profile=profile)


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch):
    monkeypatch.setattr(rekey, "CONFIRM_S", 0.0)


def test_an_overlap_implies_three_associations_and_a_matching_count_is_consistent():
    kids, got = rekey.engine_sample(_app((OVERLAP, 3, OVERLAP)), "lab")
    assert [c.state for c in kids] == ["DELETED", "INSTALLED"]
    assert got is not None and got.listed == 3 and got.held == 3
    assert got.installed_out == ["1822a870"]


def test_a_count_taken_mid_removal_is_read_again_and_the_second_reading_counts():
    """The daemon removed the DELETED child's SA before its listing caught up: 2 held where 3
    are listed; a moment later the listing shows the INSTALLED child alone, 2 held."""
    app = _app((OVERLAP, 2, OVERLAP), (INSTALLED_ONLY, 2, INSTALLED_ONLY))
    kids, got = rekey.engine_sample(app, "lab")
    assert len(app.host.scripts) == 2, "a disagreeing count must be read again"
    assert got is not None and got.held == got.listed == 2 and [c.state for c in kids] == ["INSTALLED"]


def test_an_association_left_behind_stays_a_disagreement():
    app = _app((OVERLAP, 4, OVERLAP), (OVERLAP, 4, OVERLAP))
    _, got = rekey.engine_sample(app, "lab")
    assert got is not None and (got.held, got.listed) == (4, 3)


def test_a_listing_that_changed_between_its_two_reads_gives_no_sample():
    _, got = rekey.engine_sample(_app((OVERLAP, 3, INSTALLED_ONLY)), "lab")
    assert got is None


def test_drops_of_reasons_sharing_a_counter_are_summed():
    figures: list[tuple[str, object]] = []
    record = SimpleNamespace(figure=lambda label, value, unit="": figures.append((label, value)))
    app = SimpleNamespace(name="xgs136")
    counters = {"replay": ("driver", "rx_bad"), "auth": ("driver", "rx_bad"), "no_sa": ("driver", "rx_nosa")}
    d = {"driver": {"rx_bad": 5, "rx_nosa": 1}, "esp": {}}
    assert_drops_counted(record, app, d, counters, {"replay": 3, "auth": 2, "no_sa": 1})
    assert figures == [("rx_bad moved (expected 5)", 5), ("rx_nosa moved (expected 1)", 1)]
    with pytest.raises(AssertionError, match=r"xgs136: rx_bad moved 5, expected 4 \(replay, auth\)"):
        assert_drops_counted(record, app, d, counters, {"replay": 2, "auth": 2})
