"""The suite as a driver repository gets it: the wheel, installed outside the checkout.

Why (issue 39): a driver team ``pip install``\\ s the suite into its own virtualenv and runs
the acceptance tests from its own repository, which has a pytest.ini and tests of its own.
What must hold there is different from a checkout: the import packages are the project's
names (no generic ``plugin``/``twin`` that collide), the data the run reads at run time is in
the wheel (the default lab file as a real file, not the checkout's symlink), the unrelated
tests run untouched with no lab started, and one command runs an acceptance test on the
virtual lab from the installed files alone.

How it stays fast: the wheel is built from a copy of the source roots (so the checkout gets
no build/ directory), installed with ``--no-deps`` into a fresh venv (``--without-pip``,
the outer pip installs into it), and the dependencies come from a directory of links to
this run's own installed dependencies -- everything of the checkout's venv except the suite
itself (its editable hook and metadata), pip/setuptools and hypothesis (the test extra: a
driver repository does not have it, so the run proves it is not needed). About 10 s; with
``PACKAGING_FROM_REGISTRY=1`` the wheel is installed with its dependencies resolved by pip
from the configured index instead (about 75 s here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {"ipsec_hil", "ipsec_hil_twin", "ipsec_hil_acceptance"}
#: What the wheel must carry besides Python files (read at run time, from the package).
DATA = ("ipsec_hil/data/virtual.yaml", "ipsec_hil/data/acceptance.ini",
        "ipsec_hil_twin/fault_registry.toml", "ipsec_hil_twin/shell/cmdclient.pl")
SCRIPTS = {"ipsec-hil-acceptance", "ipsec-hil-lab", "ipsec-hil-lease", "ipsec-hil-report"}
#: One quick acceptance test on the XGS 136 (children up, no traffic): the installed run's proof.
ONE_TEST = "test_all_children_established and npu-v4in4-gcm"
#: Not linked into the installed venv's dependencies (see the module's docstring).
NOT_DEPS = ("ipsec_hil", "__editable__", "hypothesis", "_hypothesis", "pip", "setuptools",
            "_distutils_hack", "pkg_resources", "wheel", "__pycache__")



def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def _clean_env(venv: Path) -> dict[str, str]:
    """A shell of the driver repository's CI: its venv first on PATH, nothing of this checkout
    (no PYTHONPATH, not this run's venv or tools/node, no outer pytest's variables)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST", "PYTHON", "VIRTUAL_ENV", "HIL_PSK", "COV_"))}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                   "/usr/bin", "/sbin", "/bin"])
    env["VIRTUAL_ENV"] = str(venv)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``pip wheel --no-deps`` of a copy of the checkout's source roots."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "plugin", "twin", "tests_hil", "topologies"):
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(p, src / name)
    out = tmp_path_factory.mktemp("wheel")
    res = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                str(src)], src, dict(os.environ))
    assert res.returncode == 0, f"pip wheel failed:\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
    (whl,) = out.glob("ipsec_hil-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv outside the checkout with the wheel installed (see the docstring),
    inside the driver repository as driver teams keep it (``.venv``): the installed
    acceptance package is then under the repository, and must still not count as its tests."""
    root = tmp_path_factory.mktemp("installed")
    venv = root / "driver" / ".venv"
    env = dict(os.environ)
    if os.environ.get("PACKAGING_FROM_REGISTRY") == "1":
        res = _run([sys.executable, "-m", "venv", str(venv)], root, env)
        assert res.returncode == 0, res.stderr
        res = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], root, env, timeout=900)
        assert res.returncode == 0, f"pip install {wheel.name} failed:\n{res.stderr[-3000:]}"
        return venv
    res = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root, env)
    assert res.returncode == 0, res.stderr
    deps = root / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(NOT_DEPS) or entry.suffix == ".pth":
            continue
        (deps / entry.name).symlink_to(entry)
    site = Path(_run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     root, env).stdout.strip())
    (site / "deps.pth").write_text(f"{deps}\n")
    res = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                "--no-deps", "--no-index", str(wheel)], root, env)
    assert res.returncode == 0, f"pip install {wheel.name} failed:\n{res.stderr[-3000:]}"
    return venv


def test_the_wheel_holds_the_projects_packages_and_its_run_time_data(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
        assert tops == PACKAGES, f"top-level names in {wheel.name}: {sorted(tops)}"
        for name in DATA:
            assert name in names, f"{wheel.name} lacks {name}"
        shipped = z.getinfo("ipsec_hil/data/virtual.yaml")
        assert (shipped.external_attr >> 16) & 0o170000 != 0o120000, "virtual.yaml is shipped as a symlink"
        assert z.read(shipped) == (REPO / "topologies" / "virtual.yaml").read_bytes(), \
            "the wheel's virtual.yaml is not topologies/virtual.yaml"
        dist = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = z.read(f"{dist}/entry_points.txt").decode()
        metadata = z.read(f"{dist}/METADATA").decode()
    for script in SCRIPTS:
        assert f"\n{script} = " in entry_points, f"console script {script} missing:\n{entry_points}"
    assert "[pytest11]\nipsec_hil.pytest_plugin = ipsec_hil.pytest_plugin" in entry_points
    hypothesis = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: hypothesis")]
    assert hypothesis and all('extra == "test"' in line for line in hypothesis), hypothesis


@pytest.mark.parametrize("script, usage", [
    ("ipsec-hil-acceptance", "usage: pytest.main()"),  # pytest's own --help: the plugin's options listed
    ("ipsec-hil-lab", "usage: python -m ipsec_hil_twin"),
    ("ipsec-hil-lease", "usage: ipsec-hil-lease"),
    ("ipsec-hil-report", "usage: ipsec-hil-report"),
])
def test_every_console_script_starts_from_the_install(venv, tmp_path, script, usage):
    """Each script's entry point names a module and function that exist in the wheel."""
    res = _run([script, "--help"], tmp_path, _clean_env(venv), timeout=60)
    assert res.returncode == 0 and usage in res.stdout, f"{script} --help exited {res.returncode}:\n{res.stderr[-2000:]}"
    if script == "ipsec-hil-acceptance":
        assert "--topology" in res.stdout and "--hil-preflight" in res.stdout


def _driver_repo(venv: Path) -> Path:
    """The driver repository holding ``venv``: its own pytest.ini (not the suite's), an
    unrelated test, and its own copy of the virtual lab file where the plugin looks by
    default (topologies/virtual.yaml), as a repository that runs the suite on its lab has."""
    repo = venv.parent
    if not (repo / "pytest.ini").exists():
        (repo / "tests").mkdir()
        (repo / "topologies").mkdir()
        shutil.copy(REPO / "topologies" / "virtual.yaml", repo / "topologies" / "virtual.yaml")
        (repo / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -x\n")  # no testpaths: pytest collects from the root, .venv included in the walk
        (repo / "tests" / "test_driver_unit.py").write_text(
            "def test_checksum_folds():\n    assert (0xFFFF + 1) % 0xFFFF == 1\n\n"
            "def test_uses_tmp_path(tmp_path):\n    assert tmp_path.is_dir()\n")
    return repo


@pytest.mark.needs_root  # a private mount namespace
def test_a_driver_repositorys_own_tests_run_untouched_with_no_lab(venv, tmp_path):
    """The plugin loads (its entry point) but starts nothing, even with a lab file where the
    plugin looks by default and the installed acceptance tests under the repository (its
    .venv): the tests it runs are not acceptance tests. /run/ipsec-twin and /run/netns are read-only
    for this run (a private mount namespace), so a lab that tried to start would fail the
    run rather than pass unseen."""
    repo = _driver_repo(venv)
    shutil.rmtree(repo / "reports", ignore_errors=True)  # the acceptance run's, if it ran first
    script = ("set -e; for d in /run/ipsec-twin /run/netns; do mkdir -p $d; mount -t tmpfs -o ro none $d; done; "
              "exec python -m pytest -v --junitxml junit.xml")
    res = _run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], repo, _clean_env(venv),
               timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"the driver repository's tests failed (exit {res.returncode}):\n{out[-4000:]}"
    assert f"from {repo}/topologies/virtual.yaml" in out, f"the suite's plugin did not load:\n{out[-3000:]}"
    cases = ET.parse(repo / "junit.xml").getroot().findall(".//testcase")
    assert sorted(c.get("name") for c in cases) == ["test_checksum_folds", "test_uses_tmp_path"]
    assert "virtual lab:" not in out and "measurement page" not in out
    assert not (repo / "reports").exists(), "the suite wrote reports/ into an unrelated repository"


@pytest.mark.needs_root  # the virtual lab
def test_the_console_script_runs_one_acceptance_test_on_the_virtual_lab(venv, tmp_path):
    repo = _driver_repo(venv)
    res = _run(["ipsec-hil-acceptance", "-m", "xgs136", "-k", ONE_TEST, "--junitxml", "junit.xml", "-p",
                "no:cacheprovider"], repo, _clean_env(venv), timeout=400)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"ipsec-hil-acceptance exited {res.returncode}:\n{out[-5000:]}"
    assert "PytestAssertRewriteWarning" not in out, "acceptance.ini's filter did not take (see its comment)"
    cases = ET.parse(repo / "junit.xml").getroot().findall(".//testcase")
    assert [c.get("name") for c in cases] == ["test_all_children_established[npu-v4in4-gcm]"], out[-2000:]
    assert all(c.find("failure") is None and c.find("error") is None and c.find("skipped") is None for c in cases)
    page = (repo / "reports" / "measurement-page.md").read_text()
    command = next(line for line in page.splitlines() if line.startswith("Command: "))
    assert f"-c {venv}/lib/" in command, f"not the installed suite's ini: {command}"
    assert "1 tests: 1 passed" in page and "| npu | IPv4 | IPv4 | AES-GCM-16 |" in page, page[:2000]
    (result,) = (repo / "reports" / "allure-results").glob("*-result.json")
    row = next(line for line in page.splitlines() if line.startswith("| test_all_children_established["))
    assert row.endswith(f"(allure-results/{result.name}) |"), f"the page does not link the test's Allure result: {row}"
    run_dir = Path(page.split("virtual lab `", 1)[1].split("`", 1)[0]).parent
    assert run_dir.parent == Path("/run/ipsec-twin") and not run_dir.exists(), f"the lab's {run_dir} was left behind"
    netns = _run(["ip", "netns", "list"], repo, dict(os.environ)).stdout
    assert f"{run_dir.name}-" not in netns, f"namespaces of lab {run_dir.name} left behind:\n{netns}"
