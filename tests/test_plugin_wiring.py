"""The pytest plugin as a user meets it: markers, options, skip-by-hardware, bad topology.

Runs pytest in a subprocess (the plugin is loaded by the root conftest.py and the
pytester plugin cannot be enabled from a non-root conftest).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MINI = (REPO / "tests/topology/minimal-good.yaml").read_text()

TESTS = '''
import pytest

@pytest.mark.xgs136
def test_needs_136():
    pass

@pytest.mark.xgs3300
@pytest.mark.page("000")
def test_needs_3300():
    pass

def test_plain(request):
    from ipsec_hil.pytest_plugin import get_topology
    topo = get_topology(request.config)
    assert topo.lab.name
    assert request.config.getoption("--traffic-seconds") == 0.5
'''


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_wiring_sample.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("HIL_PSK_T", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pytest.ini"), "--rootdir", str(REPO),
         "-p", "ipsec_hil.pytest_plugin", "-p", "no:cacheprovider", "-rs",
         "--traffic-seconds", "0.5", str(tmp_path / "test_wiring_sample.py"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )


def test_markers_are_registered():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--markers"], cwd=REPO, capture_output=True, text=True, timeout=60
    ).stdout
    for marker in ("xgs136:", "xgs3300:", "outer_v6:", "inner_v6:", "gcm:", "cbc:", "forwarded:",
                   "six_children:", "throughput:", "page(name):"):
        assert f"@pytest.mark.{marker}" in out, marker


def test_test_for_absent_hardware_is_skipped_with_reason(tmp_path):
    # a topology with only an XGS 3300 (and the bench)
    text = MINI.replace("model: xgs136", "model: xgs3300")
    (tmp_path / "only3300.yaml").write_text(text)
    r = _pytest(tmp_path, "--topology", "only3300.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "topology mini has no xgs136" in r.stdout
    assert "2 passed, 1 skipped" in r.stdout


def test_under_xdist_workers_get_the_controllers_topology(tmp_path):
    text = MINI.replace("model: xgs136", "model: xgs3300")
    (tmp_path / "only3300.yaml").write_text(text)
    r = _pytest(tmp_path, "--topology", "only3300.yaml", "-n", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "topology mini has no xgs136" in r.stdout
    assert "2 passed, 1 skipped" in r.stdout


def test_both_models_present_nothing_skipped(tmp_path):
    (tmp_path / "mini.yaml").write_text(MINI)
    r = _pytest(tmp_path, "--topology", "mini.yaml", "-m", "xgs136 or xgs3300")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed, 1 deselected" in r.stdout


def test_bad_topology_stops_the_run_with_file_line(tmp_path):
    (tmp_path / "bad.yaml").write_text(MINI.replace("model: xgs136", "model: xgs9"))
    r = _pytest(tmp_path, "--topology", "bad.yaml")
    assert r.returncode == 4, r.stdout + r.stderr
    assert f"{tmp_path}/bad.yaml:13: hosts.gw2.model: expected one of xgs3300, xgs136, found 'xgs9'" in r.stderr


def test_default_topology_is_the_virtual_lab(tmp_path):
    r = _pytest(tmp_path, "-k", "plain")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "topology: virtual (virtual)" in r.stdout


def test_unregistered_marker_fails_collection(tmp_path):
    (tmp_path / "test_typo.py").write_text("import pytest\n@pytest.mark.xgs1360\ndef test_x():\n    pass\n")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pytest.ini"), "--rootdir", str(REPO),
         "-p", "ipsec_hil.pytest_plugin", "-p", "no:cacheprovider", str(tmp_path / "test_typo.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert r.returncode != 0
    assert "'xgs1360' not found in `markers` configuration option" in r.stdout + r.stderr


def test_loaded_once_from_its_entry_point_or_from_the_conftest():
    """Installed, the plugin comes from its pytest11 entry point and the root conftest's
    pytest_plugins entry finds it registered; with autoload off, the conftest loads it."""
    from importlib.metadata import entry_points

    assert [ep.value for ep in entry_points(group="pytest11") if ep.name == "ipsec_hil.pytest_plugin"] == [
        "ipsec_hil.pytest_plugin"]
    counts = []
    for extra in ({}, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | extra
        r = subprocess.run([sys.executable, "-m", "pytest", "-m", "xgs136", "--collect-only", "-q", "-p",
                            "no:cacheprovider"], cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, (extra, r.stdout[-2000:] + r.stderr[-2000:])
        m = re.search(r"^(\d+)/(\d+) tests collected", r.stdout, re.M)
        assert m and int(m[1]) > 0, (extra, r.stdout[-500:])
        counts.append(m.groups())
    assert counts[0] == counts[1], f"entry point vs conftest collect differently: {counts}"
