"""Known issues are visible and never hide failures (issue 10, item 3).

Only the measurement an open issue is about runs under it: a failure there is an expected
failure naming the issue; a pass is "issue N did not reproduce: may be fixed" -- on the
page, in Allure and in the terminal summary, distinct from a plain pass; a failure before
the measurement (a reboot, a re-establishment) is a failure.
"""

from __future__ import annotations

import json

import pytest
from tests.plugin.labfiles import lab_file

pytest_plugins = ["pytester"]

# A hardware lab whose appliances are reached locally: nothing starts, nothing is changed.
LAB = lab_file("local", virtual=False)

TESTS = """\
import pytest
from ipsec_hil.lab.expectations.hardware import KnownIssue

ISSUE = KnownIssue("first_stream_after_boot", 777, "slow after a boot")

def test_issue_reproduces(record, known_issue):
    with known_issue(ISSUE):
        assert 396 >= 850, "first stream 396 Mbit/s below the floor"

def test_issue_does_not_reproduce(record, known_issue):
    with known_issue(ISSUE):
        assert 900 >= 850

def test_reboot_fails_before_the_measurement(record, known_issue):
    assert False, "the tunnel did not come back after the reboot"
    with known_issue(ISSUE):
        pass

def test_no_open_issue_is_a_plain_check(record, known_issue):
    with known_issue(None):
        assert 900 >= 850
"""


@pytest.fixture
def run(pytester: pytest.Pytester):
    pytester.makefile(".yaml", lab=LAB)
    (pytester.path / "tests_hil").mkdir()
    (pytester.path / "tests_hil" / "test_known.py").write_text(TESTS)
    result = pytester.runpytest_subprocess("--topology", "lab.yaml", "-rxX", "--alluredir", "allure", "tests_hil")
    return pytester, result


def test_terminal_says_which_issue_reproduced_and_which_may_be_fixed(run):
    pytester, r = run
    r.assert_outcomes(passed=1, failed=1, xfailed=1, xpassed=1)
    r.stdout.fnmatch_lines([
        "*known issues*",
        "issue 777 did not reproduce: may be fixed (slow after a boot) -- *test_issue_does_not_reproduce",
        "issue 777 reproduced (slow after a boot): first stream 396 Mbit/s below the floor -- *test_issue_reproduces",
    ])
    r.stdout.fnmatch_lines(["XPASS *test_issue_does_not_reproduce - issue 777 did not reproduce: may be fixed*"])
    r.stdout.fnmatch_lines(["*_ test_reboot_fails_before_the_measurement _*", "*the tunnel did not come back after the reboot"])


def test_page_has_a_known_issues_section(run):
    pytester, r = run
    page = (pytester.path / "reports" / "measurement-page.md").read_text()
    assert "## Known issues" in page
    assert "**issue 777 did not reproduce: may be fixed (slow after a boot)**" in page


def test_allure_marks_the_pass_as_not_reproduced(run):
    pytester, r = run
    results = [json.loads(p.read_text()) for p in (pytester.path / "allure").glob("*-result.json")]
    by_name = {x["name"]: x for x in results}
    passed = by_name["test_issue_does_not_reproduce"]
    assert passed["statusDetails"]["message"].startswith("XPASS issue 777 did not reproduce: may be fixed")
    assert {"name": "tag", "value": "known issue did not reproduce"} in passed["labels"]
    assert any(link.get("name") == "777" or link.get("url") == "777" for link in passed.get("links", []))
    assert by_name["test_issue_reproduces"]["status"] == "skipped"  # Allure's status for an xfail
    assert by_name["test_reboot_fails_before_the_measurement"]["status"] == "failed"
