"""The size tests compare two independent models: either one wrong, in every process, fails them.

Why: before the twin had its own FreeBSD model it took its limits from
ipsec_hil.lab.expectations.esp_math, so a wrong formula moved the lab and the expectation
together and every size test passed (issue 10). Changing esp_math inside the pytest process
only (as this test once did) cannot show that: the lab runs as ``python -m ipsec_hil_twin``
subprocesses that import their own copy, so a twin that still read esp_math would pass it
too (issue 42). Here the change is made where BOTH sides see it: a ``sitecustomize`` on
PYTHONPATH (inherited by pytest, the lab's supervisor and every component it forks or
starts) installs an import hook that rewrites a module's source as it is imported.

- the suite's arithmetic made wrong everywhere (esp_math: the worst-case ICV 24 bytes,
  SPI + sequence 12): a twin that took its sizes from esp_math would move with it and the
  tests would pass; they fail, each through its own assertion;
- the converse, the same change made to the twin's own size model everywhere
  (ipsec_hil_twin.engine.sizes): the suite never imports it, the lab's gate and own route
  move, and the tests fail the same way -- the lab's figures come from that model;
- the control: the hook installed with nothing to change, the tests pass.

The hook's log shows where it ran and what it rewrote, so a run the change never reached
(a lab that did not inherit it) is an error here, not a pass.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_root

REPO = Path(__file__).resolve().parents[2]
SELECT = "lab-v6in4-gcm"  # the 3300 pair, IPv6 inner over IPv4 outer: both size tests run
SIZE_TESTS = ("test_forwarded_ipv6_packet_too_big", "test_own_largest_packet_passes_one_more_refused")

SUITE = "ipsec_hil.lab.expectations.esp_math"
TWIN = "ipsec_hil_twin.engine.sizes"
MUTATIONS = {
    # the same two mistakes in each model: esp_hdrsiz(NULL)'s max ICV as 24 bytes, and
    # SPI + sequence number as 12 bytes
    SUITE: [("_KERNEL_WORST_CASE_FIXED = 8 + 9 + 16", "_KERNEL_WORST_CASE_FIXED = 8 + 9 + 24"),
            ("ESP_HEADER = 8  #", "ESP_HEADER = 12  #")],
    TWIN: [("ESP_NO_SA_MAX_ICV = 16\n", "ESP_NO_SA_MAX_ICV = 24\n"),
           ("SIZEOF_NEWESP = 8\n", "SIZEOF_NEWESP = 12\n")],
}

OWN_FAILS_BY = {SUITE: "was answered; it must be refused", TWIN: "the exact ESP limit"}
"""How the own-packet test fails under each change (the limits move in opposite directions)."""

SITECUSTOMIZE = r'''"""Test hook (tests/oracle/test_esp_math_has_teeth_on_the_lab.py): rewrites the source of
the modules named in $ORACLE_MUTATE as they are imported, in every process that starts
with this directory on PYTHONPATH; each process notes in $ORACLE_MUTATE_LOG that it ran."""
import importlib.abc
import json
import os
import sys

_RULES = json.loads(os.environ.get("ORACLE_MUTATE", "{}"))
_LOG = os.environ.get("ORACLE_MUTATE_LOG")


def _note(what):
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "what": what, "argv": sys.orig_argv[1:4]}) + "\n")


class _Rewrite(importlib.abc.Loader):
    def __init__(self, base, name):
        self.base, self.name = base, name

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        src = self.base.get_source(self.name)
        for old, new in _RULES[self.name]:
            if old not in src:
                raise ImportError(f"oracle mutation: {old!r} is not in {self.name} any more")
            src = src.replace(old, new)
        exec(compile(src, module.__spec__.origin, "exec"), module.__dict__)
        _note("mutated " + self.name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _RULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _Rewrite(spec.loader, name)
                return spec
        return None


sys.meta_path.insert(0, _Finder())
_note("hook")
'''


def run_size_tests(tmp_path: Path, mutate: str | None) -> tuple[int, str, dict[str, str], list[dict]]:
    """(exit status, output, test name -> outcome, the hook's log) of one run with the
    hook on PYTHONPATH rewriting ``mutate`` (a module of MUTATIONS, or None: nothing).
    The outcome is "passed", "skipped", "error: MESSAGE" or "failed: MESSAGE"."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "hook.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")]))
    env["ORACLE_MUTATE"] = json.dumps({mutate: MUTATIONS[mutate]} if mutate else {})
    env["ORACLE_MUTATE_LOG"] = str(log)
    junit = tmp_path / "junit.xml"
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}",
            "tests_hil/test_sizes.py", "-k", SELECT]
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    found: dict[str, str] = {}
    if junit.exists():
        for case in ET.parse(junit).iter("testcase"):
            name = case.get("name", "").split("[")[0]
            kids = {k.tag: k.get("message", "") for k in case}
            outcome = "passed"
            for tag in ("skipped", "error", "failure"):
                if tag in kids:
                    outcome = f"{'failed' if tag == 'failure' else tag}: {kids[tag]}"
            found[name] = outcome
    notes = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return r.returncode, out, found, notes


def _twin_process(note: dict) -> bool:
    return any("ipsec_hil_twin" in str(a) for a in note["argv"])


def test_control_the_size_tests_pass_on_the_lab_with_the_hook(tmp_path):
    status, out, got, notes = run_size_tests(tmp_path, None)
    assert status == 0, out[-4000:]
    assert got == {t: "passed" for t in SIZE_TESTS}, out[-4000:]
    hooked = [n for n in notes if n["what"] == "hook"]
    assert any(_twin_process(n) for n in hooked), f"the hook never ran in a lab process: {notes}"
    assert not [n for n in notes if n["what"].startswith("mutated")], notes


@pytest.mark.parametrize("mutate", [SUITE, TWIN], ids=["suite-esp_math", "twin-sizes"])
def test_a_wrong_model_in_every_process_fails_the_size_tests(tmp_path, mutate):
    status, out, got, notes = run_size_tests(tmp_path, mutate)
    mutated = [n for n in notes if n["what"] == f"mutated {mutate}"]
    assert mutated, f"the hook never rewrote {mutate}: it checks nothing\n{notes}\n{out[-2000:]}"
    assert any(_twin_process(n) for n in notes if n["what"] == "hook"), f"the lab never ran the hook: {notes}"
    if mutate == TWIN:  # the lab's own model moved (in its supervisor or a component)
        assert any(_twin_process(n) for n in mutated), f"{TWIN} was not rewritten in the lab: {mutated}"
    else:  # the twin never imports the suite's arithmetic, even offered a changed one
        assert not any(_twin_process(n) for n in mutated), f"a lab process imported {SUITE}: {mutated}"
    assert status == 1, f"pytest exited {status}, expected 1 (tests failed):\n{out[-4000:]}"
    assert set(got) == set(SIZE_TESTS), out[-4000:]
    for test, outcome in got.items():
        assert outcome.startswith("failed: AssertionError"), (
            f"{test} must fail through its own assertion, found: {outcome}\n{out[-4000:]}")
    # the gate's figure differs: the limit the suite computed is not where the lab's gate is
    assert "expected the first to pass and the second to get a Packet Too Big" in got["test_forwarded_ipv6_packet_too_big"]
    # the own limit moves the other way in each: the suite's 12-byte header expects 4 bytes
    # less than the lab carries (one more is answered); the twin's gives 4 bytes less than
    # the suite expects (the exact limit is refused)
    own = got["test_own_largest_packet_passes_one_more_refused"]
    assert (OWN_FAILS_BY[mutate] in own), f"expected {OWN_FAILS_BY[mutate]!r} in: {own}"
