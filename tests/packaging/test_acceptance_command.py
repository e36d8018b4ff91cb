"""``ipsec-hil-acceptance``'s pytest command line (ipsec_hil.acceptance.pytest_args), alone.

Why: the installed run is only right if the suite's ini, the driver repository as rootdir,
the shipped lab file and the shipped tests are the defaults, and a user's own --topology /
--alluredir / --pyargs replace them rather than being given twice.
"""

from __future__ import annotations

from pathlib import Path

from ipsec_hil import acceptance as acc


def _value(args: list[str], option: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == option]


def test_defaults_the_suites_ini_this_directory_the_shipped_lab_and_tests():
    args = acc.pytest_args(["-m", "xgs136", "-k", "npu"], Path("/repo"))
    assert _value(args, "-c") == [str(acc.ACCEPTANCE_INI)] and acc.ACCEPTANCE_INI.is_file()
    assert _value(args, "--rootdir") == ["/repo"]
    assert _value(args, "--topology") == [str(acc.DEFAULT_TOPOLOGY)] and acc.DEFAULT_TOPOLOGY.is_file()
    assert _value(args, "--alluredir") == ["/repo/reports/allure-results"]
    assert _value(args, "--pyargs") == ["ipsec_hil_acceptance"]
    assert args[-4:] == ["-m", "xgs136", "-k", "npu"]  # the user's own, last


def test_the_users_own_lab_file_and_results_replace_the_defaults():
    args = acc.pytest_args(["--topology=lab/xgs.yaml", "--alluredir", "out"], Path("/repo"))
    assert "--topology" not in args[:-3] and "--alluredir" not in args[:-3]
    assert args[-3:] == ["--topology=lab/xgs.yaml", "--alluredir", "out"]
