"""A third appliance model is one profile entry -- here, in a driver repository's own file.

The suite is installed (its ``pytest11`` entry point loads the plugin), the driver
repository has its own tests_hil/, a profiles file naming its model and a lab file with
an appliance of that model: ``-m <model>`` selects that model's tunnel cases, without a
line of the suite edited. Without the profiles file the same lab file is refused.
"""

from __future__ import annotations

import pytest
from tests.plugin.labfiles import lab_file

pytest_plugins = ["pytester"]

PROFILES = """\
models:
  xgs4500:
    driver: fooep
    module_file: /boot/modules/fooep.ko
    marker: needs an XGS 4500 (driver fooep) in the topology
    counters: [tx_enc, rx_dec, rx_bad]
    roles: {encrypted: [tx_enc], decrypted: [rx_dec], errors: [rx_bad]}
    known_issues: [{key: first_stream_after_boot, number: 777, summary: slow after a boot}]
"""

LAB = lab_file("fourlab", models=("xgs4500", "xgs136"), names=("new4500", "peer136"),
               tunnel={"outer": ["ipv4", "ipv6"]})

TESTS = """\
import pytest

@pytest.mark.tunnels()
def test_tunnel_carries(tunnel):
    pass

@pytest.mark.xgs3300
def test_needs_a_3300():
    pass
"""


@pytest.fixture
def driver_repo(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".yaml", profiles=PROFILES, lab=LAB)
    (pytester.path / "tests_hil").mkdir()
    (pytester.path / "tests_hil" / "test_fooep.py").write_text(TESTS)
    return pytester


def test_marker_of_a_model_from_a_profiles_option_selects_its_cases(driver_repo):
    r = driver_repo.runpytest_subprocess("--hil-profiles", "profiles.yaml", "--topology", "lab.yaml",
                                         "-m", "xgs4500", "--collect-only", "-q", "tests_hil")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    r.stdout.fnmatch_lines([
        "tests_hil/test_fooep.py::test_tunnel_carries[[]t-v4in4-gcm[]]",
        "tests_hil/test_fooep.py::test_tunnel_carries[[]t-v4in6-gcm[]]",
        "2/3 tests collected (1 deselected)*",
    ])


def test_a_profiles_file_named_in_the_ini_works_the_same(driver_repo):
    driver_repo.makeini("[pytest]\ntestpaths = tests_hil\nhil_profiles = profiles.yaml\nhil_topology = lab.yaml\n")
    r = driver_repo.runpytest_subprocess("-m", "xgs4500", "--collect-only", "-q")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    r.stdout.fnmatch_lines(["2/3 tests collected (1 deselected)*"])
    markers = driver_repo.runpytest_subprocess("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.xgs4500: needs an XGS 4500 (driver fooep) in the topology"])


def test_the_same_lab_without_the_profile_is_refused(driver_repo):
    r = driver_repo.runpytest_subprocess("--topology", "lab.yaml", "-m", "xgs4500", "--collect-only", "-q",
                                         "tests_hil")
    assert r.ret == 4
    assert "hosts.new4500.model: expected one of xgs3300, xgs136, found 'xgs4500'" in r.stderr.str()


def test_a_bad_profiles_file_names_file_and_field(driver_repo):
    driver_repo.makefile(".yaml", bad=PROFILES.replace("encrypted: [tx_enc]", "encrypted: [tx_nope]"))
    r = driver_repo.runpytest_subprocess("--hil-profiles", "bad.yaml", "--topology", "lab.yaml", "--collect-only")
    assert r.ret == 4
    assert "bad.yaml: models.xgs4500: xgs4500: roles.encrypted names unknown counter(s) tx_nope" in r.stderr.str()
