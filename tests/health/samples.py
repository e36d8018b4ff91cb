"""Health-check samples built from the golden outputs (tests/golden), baseline and variations.

A "capture" is the stdout of each snapshot command keyed by section name; the tests edit
one thing in a copy of the baseline so each finding is tripped by exactly that change.
"""
from __future__ import annotations

import json
from pathlib import Path

from ipsec_hil.lab.measuring.health import HealthSnapshot
from ipsec_hil.lab.parsers import boottime, dmesg, kldstat, netstat_m, vmstat_m, vmstat_z

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

#: section -> golden file of the JSON (libxo) form the snapshot asks for by default
JSON_FILES = {
    "boottime": "boottime/fbsd14.txt",
    "kldstat": "kldstat/fbsd14.txt",
    "netstat_m": "netstat_m/fbsd14-json-under-load.txt",
    "vmstat_z": "vmstat_z/fbsd14-json.txt",
    "vmstat_m": "vmstat_m/fbsd14-json.txt",
    "dmesg": "dmesg/fbsd14-boot-tail.txt",
}
#: the same for `libxo_json=False` (text forms)
TEXT_FILES = {**JSON_FILES, "netstat_m": "netstat_m/real-fbsd14-amd64.txt",
              "vmstat_z": "vmstat_z/fbsd14-text.txt", "vmstat_m": "vmstat_m/fbsd14-text.txt"}


def baseline(files: dict[str, str] = JSON_FILES) -> dict[str, str]:
    return {section: (GOLDEN / path).read_text() for section, path in files.items()}


def snapshot(capture: dict[str, str], host: str = "fw-a") -> HealthSnapshot:
    return HealthSnapshot(
        host=host, boottime=boottime.parse(capture["boottime"]), kldstat=kldstat.parse(capture["kldstat"]),
        mbufs=netstat_m.parse(capture["netstat_m"]), zones=vmstat_z.parse(capture["vmstat_z"]),
        malloc=vmstat_m.parse(capture["vmstat_m"]), dmesg=dmesg.parse(capture["dmesg"]),
    )


def edit_json(capture: dict[str, str], section: str, edit) -> dict[str, str]:  # noqa: ANN001 - a callback
    """A copy of CAPTURE whose SECTION (a libxo JSON document) went through EDIT(doc)."""
    doc = json.loads(capture[section])
    edit(doc)
    return {**capture, section: json.dumps(doc)}


def mbufs_plus(capture: dict[str, str], **added: int) -> dict[str, str]:
    """netstat -m with the given counters raised (current and total move together)."""
    def edit(doc: dict) -> None:
        stats = doc["mbuf-statistics"]
        for key, value in added.items():
            stats[key] += value
            total = {"mbuf-current": "mbuf-total", "cluster-current": "cluster-total"}.get(key)
            if total:
                stats[total] += value
    return edit_json(capture, "netstat_m", edit)


def zone_set(capture: dict[str, str], name: str, **values: int) -> dict[str, str]:
    def edit(doc: dict) -> None:
        (zone,) = [z for z in doc["memory-zone-statistics"]["zone"] if z["name"] == name]
        zone.update(values)
    return edit_json(capture, "vmstat_z", edit)


def malloc_set(capture: dict[str, str], name: str, **values: int) -> dict[str, str]:
    def edit(doc: dict) -> None:
        (entry,) = [t for t in doc["malloc-statistics"]["memory"] if t["type"] == name]
        entry.update(values)
    return edit_json(capture, "vmstat_m", edit)
