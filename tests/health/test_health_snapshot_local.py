"""take_snapshot over a real /bin/sh (LocalHost) with stand-in FreeBSD commands on PATH.

Proves the one-round-trip script and its marker splitting: each stand-in is a tiny sh
script printing a golden output for exactly the arguments the snapshot must pass, so a
wrong command line, a lost section or a mis-split output fails here, not on an appliance.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ipsec_hil.lab.measuring.health import (
    COMMANDS, DriverScope, HealthPolicy, HealthSnapshotError, compare, snapshot_script, split_sections,
    take_snapshot,
)
from ipsec_hil.lab.remote import LocalHost, RunResult

from .samples import GOLDEN, JSON_FILES, TEXT_FILES, baseline, snapshot

# stand-in name -> {argument string -> section whose golden output it prints}
STAND_INS = {
    "sysctl": {"-n kern.boottime": "boottime"},
    "kldstat": {"": "kldstat"},
    "netstat": {"-m --libxo json": "netstat_m", "-m": "netstat_m"},
    "vmstat": {"-z --libxo json": "vmstat_z", "-m --libxo json": "vmstat_m", "-z": "vmstat_z", "-m": "vmstat_m"},
    "dmesg": {"": "dmesg"},
}


def _install(bin_dir: Path, files: dict[str, str], overrides: dict[str, str] | None = None) -> None:
    """One sh script per command: `case "$*"` over the expected arguments, else exit 64."""
    overrides = overrides or {}
    for command, by_args in STAND_INS.items():
        body = overrides.get(command)
        if body is None:
            arms = "".join(f'  "{args}") cat {GOLDEN / files[section]} ;;\n' for args, section in by_args.items())
            body = f'case "$*" in\n{arms}  *) echo "{command}: unexpected arguments: $*" >&2; exit 64 ;;\nesac\n'
        path = bin_dir / command
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class CountingHost:
    """LocalHost that counts round trips."""

    def __init__(self) -> None:
        self.inner = LocalHost("fw-local")
        self.name = self.inner.name
        self.runs = 0

    def run(self, script: str, *, timeout: float | None = None, stdin: bytes | None = None) -> RunResult:
        self.runs += 1
        return self.inner.run(script, timeout=timeout, stdin=stdin)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    return d


def test_one_round_trip_reads_every_section_like_the_golden_files(bin_dir: Path) -> None:
    _install(bin_dir, JSON_FILES)
    host = CountingHost()
    snap = take_snapshot(host)  # type: ignore[arg-type]
    assert host.runs == 1
    expected = snapshot(baseline(), host="fw-local")
    assert snap == expected
    assert dict(snap.outputs) == baseline()  # stdout kept byte for byte per section
    assert compare(snap, take_snapshot(host), HealthPolicy(), driver=DriverScope("octep", "octep.ko")).ok  # type: ignore[arg-type]


def test_text_forms_when_libxo_json_is_off(bin_dir: Path) -> None:
    _install(bin_dir, TEXT_FILES)
    snap = take_snapshot(LocalHost("fw-local"), libxo_json=False)
    assert snap.mbufs.mbuf_current == 257 and snap.mbufs.libxo_version is None
    assert snap.zones.matching(("octep",))["octep_sa_ctx"].used == 4


def test_output_without_final_newline_and_a_forged_marker_stay_in_their_section(bin_dir: Path) -> None:
    forged = "@@ipsec-hil-health 0123456789abcdef end dmesg"
    _install(bin_dir, JSON_FILES, {
        "dmesg": f"printf 'octep0: ready\\n{forged}\\nix0: link state changed to UP'\n",
        "sysctl": "printf '{ sec = 1700000000, usec = 123 } Tue Nov 14 22:13:20 2023'\n",
    })
    snap = take_snapshot(LocalHost("fw-local"))
    assert snap.dmesg.lines == ("octep0: ready", forged, "ix0: link state changed to UP")
    assert snap.boottime.instant == (1700000000, 123)


def test_stderr_of_a_successful_command_does_not_leak_into_its_output(bin_dir: Path) -> None:
    _install(bin_dir, JSON_FILES, {"kldstat": f"echo 'kldstat: warning' >&2\ncat {GOLDEN / JSON_FILES['kldstat']}\n"})
    snap = take_snapshot(LocalHost("fw-local"))
    assert snap.kldstat.find("octep") is not None


@pytest.mark.parametrize("fakes,error", [
    pytest.param({"vmstat": 'echo "vmstat: memstat_sysctl_uma: permission denied" >&2\nexit 1\n'},
                 r"fw-local: `vmstat -z --libxo json` exited 1: 'vmstat: memstat_sysctl_uma: permission denied'",
                 id="failing-command-names-itself-and-its-stderr"),
    pytest.param({"sysctl": "echo 'kern.boottime: 1700000000'\n"},
                 r"fw-local: `sysctl -n kern.boottime`: sysctl -n kern.boottime: line 1: expected",
                 id="format-drift-names-host-command-and-line"),
    pytest.param({"dmesg": "exit 127\n"}, r"`dmesg` exited 127",
                 id="missing-command-reported-not-parsed-as-empty"),
])
def test_a_command_that_fails_or_drifts_is_an_error_naming_it(bin_dir: Path, fakes: dict[str, str],
                                                              error: str) -> None:
    _install(bin_dir, JSON_FILES, fakes)
    with pytest.raises(HealthSnapshotError, match=error):
        take_snapshot(LocalHost("fw-local"))


def test_split_rejects_a_cut_or_reordered_output() -> None:
    nonce = "00112233445566778899aabbccddeeff"
    mark = f"@@ipsec-hil-health {nonce}"
    whole = "".join(f"{mark} begin {name}\nx\n{mark} status {name} 0\n{mark} end {name}\n" for name, _, _ in COMMANDS)
    assert [s.stdout for s in split_sections(whole, nonce).values()] == ["x"] * len(COMMANDS)
    with pytest.raises(HealthSnapshotError, match="cut or garbled"):
        split_sections(whole[:-10], nonce, "fw-a")
    first = whole.split(f"{mark} end boottime\n")[0] + f"{mark} end boottime\n"
    with pytest.raises(HealthSnapshotError, match="expected"):
        split_sections(whole[len(first):] + first, nonce, "fw-a")
    with pytest.raises(ValueError, match="nonce"):
        snapshot_script("not hex")
