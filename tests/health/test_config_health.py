"""The appliances' health around each configuration (issue 42; ipsec_hil.config_health), on
the virtual lab, through the acceptance suite as a driver engineer runs it.

Two tests of one XGS 136 configuration, neither of them about health:
- healthy, the run passes, the page's "Health around each configuration" says so and the
  last test carries both ends' tables in Allure;
- with the twin's ``mbuf_leak`` on the XGS 136 (50 mbufs kept per packet: the pings of the
  last test leave hundreds, against the XGS 136's slack of 128), the run fails naming the
  configuration and the growth, and BOTH tests are failed on the page with the tables --
  though each test's own assertions held;
- the control: the same leak with ``--no-config-health`` passes, so the failure above was
  the configuration's health, not the tests.
"""

from __future__ import annotations

import re

import pytest

from tests.lab_factory import lab_fixture, suite_run

pytestmark = pytest.mark.needs_root

lab = lab_fixture()

CASE = "npu-v4in4-gcm"
NODES = [f"tests_hil/test_bringup.py::test_all_children_established[{CASE}]",
         f"tests_hil/test_matrix.py::test_five_pings_answered[{CASE}]"]


def _run(lab, root, *extra):
    r = suite_run([*NODES, "-q", "-rfE", "--traffic-seconds", "0.2", *extra], root, lab=lab)
    page = root / "reports" / "measurement-page.md"
    return r, (page.read_text() if page.exists() else ""), r.stdout + r.stderr


def test_a_leak_under_any_test_fails_every_test_of_its_configuration(lab, tmp_path):
    allure = tmp_path / "allure"
    r, page, out = _run(lab, tmp_path / "healthy", "--alluredir", str(allure))
    assert r.returncode == 0, out[-4000:]
    assert f"| {CASE} | healthy |" in page, page[-3000:]
    attached = [p for p in allure.glob("*-attachment*") if "health of xgs136 around" in p.read_text(errors="replace")]
    assert attached, "no health table attached in Allure"

    lab.attach().fault("xgs136", "mbuf_leak", n=50)
    r, page, out = _run(lab, tmp_path / "leak")
    assert r.returncode == 1, out[-4000:]
    assert f"appliance health changed around configuration {CASE} (driver defect): xgs136 " in out, out[-4000:]
    grew = re.search(r"mbufs in use\s+\S+\s+(\d+)\s+(\d+)\s+\+(\d+)\s+<= \+(\d+)\s+DEFECT", out)
    assert grew and int(grew.group(3)) > int(grew.group(4)) == 128, out[-4000:]
    failed = re.findall(rf"appliance health changed around the configuration \(driver defect\): {CASE}", page)
    assert len(failed) >= len(NODES), page[:6000]
    assert "2 failed (driver defect)" in page, page[:3000]
    assert f"| {CASE} | **DEFECT**: every test of it failed |" in page and "finding(s): driver defect" in page, page

    r, page, out = _run(lab, tmp_path / "unjudged", "--no-config-health")
    assert r.returncode == 0, out[-4000:]
    assert "Health around each configuration" not in page
    print(f"\nleak: mbufs {grew.group(1)} -> {grew.group(2)} (+{grew.group(3)}, slack {grew.group(4)}); "
          f"both tests failed on the page, the control without the judgement passed")
