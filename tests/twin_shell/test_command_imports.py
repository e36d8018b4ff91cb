"""The emulated FreeBSD commands stay cheap to start (issue 15).

Why: every SSH command the suite sends to the virtual lab runs one or more of these
modules in a fresh interpreter (a snapshot runs sysctl and netstat), so their import
time is paid thousands of times per run. Measured on the 2-core CI machine, a profile of
the own tests (perf, issue 15) put short-lived Python processes at about 42 % of the busy
CPU; `typing`, `dataclasses` (it imports `inspect`), `secrets` and `tempfile` were a third
to a half of each command's ~65-95 ms. These modules are fine elsewhere in the twin; here
a command that pulls one in again fails this test, naming the chain to cut. A `stdlib`
command is imported under ``python -S`` as its wrapper runs it, so one that needs a site
package fails here too (the import itself fails).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ipsec_hil_twin import SOURCE_ROOT
from ipsec_hil_twin.fbsd import COMMANDS

REPO = SOURCE_ROOT
"""What the wrappers put on PYTHONPATH (twin/ since the packages moved: ipsec_hil_twin.fbsd.install)."""

#: modules no emulated command may import at start-up (what they cost each command, measured)
HEAVY = {
    "typing": "~8 ms (collections.abc, contextlib, re, types, warnings)",
    "dataclasses": "~10 ms (inspect, ast, dis, tokenize)",
    "inspect": "~9 ms",
    "secrets": "~8 ms (hashlib, hmac, random, base64)",
    "tempfile": "~5 ms (random, shutil)",
}

PROBE = """
import importlib, json, sys
before = set(sys.modules)
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _imported(module: str, *, site: bool) -> set[str]:
    """What importing ``module`` loads, in the interpreter its wrapper starts."""
    argv = [sys.executable] + ([] if site else ["-S"]) + ["-c", PROBE, module]
    env = dict(os.environ, PYTHONPATH=str(REPO), TWIN_HOST_DIR="/nonexistent")
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{module}: import failed:\n{r.stderr[-2000:]}"
    return set(json.loads(r.stdout))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_imports_nothing_heavy(name):
    cmd = COMMANDS[name]
    loaded = _imported(cmd.module, site=cmd.wrapper == "full")
    heavy = {m: HEAVY[m] for m in sorted(loaded & set(HEAVY))}
    assert not heavy, (f"{name} ({cmd.module}) imports at start-up, paid on every SSH command: "
                       + "; ".join(f"{m} {why}" for m, why in heavy.items())
                       + " -- import it inside the function that needs it (python -X importtime "
                       f"-S -m {cmd.module} shows the chain)")

