"""Every console script, given what a person types, answers in a line and a documented exit
status -- never a traceback (issue 55).

Why: a newcomer's `ipsec-hil-survey topologies/virtual.yaml --out DIR` -- the default lab
file, a virtual lab's template -- ended in `TransportError: dut3300: mgmt lacks address`.
Each script here is run as a process, as typed (the console script from the venv's bin/
where it is installed, else `python -m`), with the template, a missing file, a broken
YAML and an unknown option. A script that needs a running lab names the command that
starts one (ipsec_hil.cli); one whose job is to start it (ipsec-hil-acceptance, the
decision-power benchmark, `ipsec-hil-lab up`) is given the template elsewhere, where a lab
may start: tests/packaging/test_installed_suite.py runs an acceptance test through
ipsec-hil-acceptance on the shipped template, tests/twin_lab starts labs with `up`.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "topologies" / "virtual.yaml"
BROKEN = "lab:\n  name: x\n  virtual: true\nhosts: [\n"
"""A lab file whose YAML ends in the middle of a list (line 5)."""

# name: (console entry point or None, `python -m` module, the arguments around a lab file,
#        exit status for a bad lab file / an unknown option, takes the template itself)
SCRIPTS = {
    "ipsec-hil-survey": ("ipsec_hil.lab.survey.__main__:main", "ipsec_hil.lab.survey",
                         ["{lab}", "--out", "{tmp}/bundle"], 2, False),
    "ipsec-hil-lease": ("ipsec_hil.lab.sharing.lease_cli:main", "ipsec_hil.lab.sharing", ["status", "{lab}"], 2, False),
    "ipsec-hil-report": ("ipsec_hil.report_cli:main", "ipsec_hil.report_cli", ["{lab}"], 2, False),
    "ipsec-hil-lab": ("ipsec_hil_twin.__main__:main", "ipsec_hil_twin", ["up", "{lab}", "--prefix", "tw0000"], 1, True),
    "ipsec-hil-acceptance": ("ipsec_hil.acceptance:main", "ipsec_hil.acceptance",
                             ["--topology", "{lab}", "--co", "-q", "-p", "no:cacheprovider"], 4, True),
    "decision-power": (None, "ipsec_hil.lab.comparing.decision_power",
                       ["--topology", "{lab}", "--out", "{tmp}/d.jsonl"], 2, True),
    "bring-up-bench": (None, "ipsec_hil.lab.traffic.bench_bringup", ["{lab}"], 2, False),
}
NO_LAB_FILE = {"ipsec-hil-flakes": "ipsec_hil.flakes_cli:main"}
"""Scripts that take no lab file themselves (ipsec-hil-flakes hands its pytest arguments on,
a lab file among them): what a person types there is tests/report/test_history.py's."""
USAGE_STATUS = {"ipsec-hil-lab": 2}
"""An unknown option's status where it differs from a bad lab file's (the twin's errors are 1)."""


def _argv(name: str) -> list[str]:
    entry, module = SCRIPTS[name][:2]
    script = Path(sys.executable).parent / name
    if entry is not None and script.exists():
        return [str(script)]
    return [sys.executable, "-m", module]


def _run(name: str, lab: str, tmp_path: Path, extra: tuple[str, ...] = ()) -> tuple[int, list[str]]:
    args = [a.format(lab=lab, tmp=tmp_path) for a in SCRIPTS[name][2]]
    r = subprocess.run(_argv(name) + args + list(extra), cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    return r.returncode, [line for line in r.stderr.splitlines() if line.strip()]


def test_every_console_script_is_here():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert {n: e for n, e in scripts.items()} == {**{n: s[0] for n, s in SCRIPTS.items() if s[0]}, **NO_LAB_FILE}


@pytest.mark.parametrize("name", [n for n, s in SCRIPTS.items() if not s[4]])
def test_a_template_is_refused_with_the_command_that_starts_it(name, typed):
    status, err = _run(name, "topologies/virtual.yaml", typed)
    assert status == 2 and len(err) == 1, err
    if name == "ipsec-hil-report":  # it reads a run's results, not a lab
        assert "is a lab file" in err[0] and "ipsec-hil-acceptance --topology topologies/virtual.yaml" in err[0]
    else:
        assert err[0].startswith(f"{_prog(name)}: topologies/virtual.yaml is a virtual lab's template"), err
        assert "`python -m ipsec_hil_twin up topologies/virtual.yaml`" in err[0]
        assert "lab.resolved.yaml" in err[0]


def _prog(name: str) -> str:
    return f"python -m {SCRIPTS[name][1]}" if SCRIPTS[name][0] is None else name


@pytest.fixture
def typed(tmp_path):
    """The template where a newcomer's relative path finds it, and a broken lab file."""
    (tmp_path / "topologies").mkdir()
    (tmp_path / "topologies" / "virtual.yaml").write_text(TEMPLATE.read_text())
    (tmp_path / "broken.yaml").write_text(BROKEN)
    return tmp_path


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_missing_or_broken_lab_file_and_an_unknown_option_are_one_line(name, typed):
    bad = SCRIPTS[name][3]
    status, err = _run(name, "missing.yaml", typed)
    assert status == bad and len(err) == 1 and "missing.yaml" in err[0], err
    status, err = _run(name, "broken.yaml", typed)
    assert status == bad and "broken.yaml" in err[-1], err
    if name == "ipsec-hil-acceptance":
        assert err == ["ERROR: invalid topology:", err[1]] and "broken.yaml:5:" in err[1]  # pytest's usage error
    else:
        assert len(err) == 1, err
        assert name == "ipsec-hil-report" or "broken.yaml:5:" in err[0], err
    status, err = _run(name, "topologies/virtual.yaml", typed, ("--no-such-option",))
    assert status == USAGE_STATUS.get(name, bad), err
    if name == "ipsec-hil-acceptance":  # pytest's usage error: its usage line, the error, its ini and rootdir
        assert any(line.endswith("error: unrecognized arguments: --no-such-option") for line in err), err
    else:
        assert len(err) == 1 and "unrecognized arguments: " in err[0] and "--no-such-option" in err[0], err
        assert err[0].endswith(" --help` lists the options)"), err
