"""``ipsec-hil-acceptance`` (or ``python -m ipsec_hil.acceptance``): the acceptance tests of
an installed suite, run from a driver repository.

Why a command of its own: a driver repository that ``pip install``\\ s the suite has neither
this project's tests_hil/ nor its pytest.ini, and has a pytest.ini of its own whose
testpaths and addopts are for its own tests. This runs the shipped acceptance tests by
module name (``--pyargs ipsec_hil_acceptance``) with the suite's ini
(``ipsec_hil/data/acceptance.ini``: strict markers, the plugins it keeps out) and the
current directory as rootdir, so the page and Allure results land in ./reports
(``reports/measurement-page.md``, ``reports/allure-results/``, emptied first as
tools/run-acceptance does, unless ``--alluredir`` is given; ``ipsec-hil-report`` turns them
into the HTML report). The lab is the shipped virtual lab unless ``--topology FILE`` names
the repository's own lab file. Every other argument goes to pytest unchanged (``-m
xgs136``, ``-k``, ``-n``, ``--driver``).

The plugin is named with ``-p`` as well as loaded from its entry point: with
PYTEST_DISABLE_PLUGIN_AUTOLOAD set the entry point is not read, and under one name pytest
never registers it twice.

What a person types: a virtual lab's template (the default) is started for the run and
torn down after (root: network namespaces; the lab not coming up exits 17, LAB_NOT_UP), a
running lab's lab.resolved.yaml or a hardware lab file is used as it is; a lab file that is
missing or invalid, or an option pytest does not know, is pytest's usage error (exit 4,
`ERROR: ...` naming the file and line).

In a checkout, ``bash tools/run-acceptance`` is the same run with the checkout's files.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
#: The virtual lab's file as shipped (a link to topologies/virtual.yaml in a checkout).
DEFAULT_TOPOLOGY = DATA / "virtual.yaml"
#: The acceptance run's pytest ini when the suite is installed.
ACCEPTANCE_INI = DATA / "acceptance.ini"
#: The import package that holds the acceptance tests (tests_hil/ in a checkout).
ACCEPTANCE_PACKAGE = "ipsec_hil_acceptance"
#: Allure results, relative to the directory the command runs in.
RESULTS = Path("reports") / "allure-results"


def _given(args: list[str], option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in args)


def pytest_args(args: list[str], cwd: Path) -> list[str]:
    """The pytest command line for ``args`` as the user typed them (pure: tested alone)."""
    out = ["-c", str(ACCEPTANCE_INI), "--rootdir", str(cwd), "-p", "ipsec_hil.pytest_plugin"]
    if not _given(args, "--topology"):
        out += ["--topology", str(DEFAULT_TOPOLOGY)]
    if not _given(args, "--alluredir"):
        out += ["--alluredir", str(cwd / RESULTS)]
    if not _given(args, "--pyargs"):
        out += ["--pyargs", ACCEPTANCE_PACKAGE]
    return out + args


def main(argv: list[str] | None = None) -> int:
    import pytest  # only here: the module's constants are read without pytest

    args = list(sys.argv[1:] if argv is None else argv)
    cwd = Path(os.getcwd())
    if not _given(args, "--alluredir"):
        # this run's results only (the report's history carries earlier runs); cleared here,
        # not with --clean-alluredir, which every xdist worker would apply again
        shutil.rmtree(cwd / RESULTS, ignore_errors=True)
    rc = int(pytest.main(pytest_args(args, cwd)))
    if rc in (0, 1) and (cwd / RESULTS).is_dir() and not _given(args, "--alluredir"):
        print(f"ipsec-hil-acceptance: HTML report: ipsec-hil-report --results {RESULTS}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
