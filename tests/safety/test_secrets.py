"""No pre-shared key and no ESP key in anything a run leaves behind.

One real acceptance subset runs as a child pytest against its own virtual lab, with a known
PSK, DEBUG logging to the terminal and a log file, Allure results, a JUnit file and the
measurement page (in a scratch rootdir: no other run's reports mix in); a fault (count_extra on the DUT) makes the conservation test fail, so the
assertion-message path is covered too. Inside the run, the child plugin _keygrab reads both
ends' ESP keys (setkey -D through the suite's Appliance) into a 0600 file outside those
artifacts. The selection covers every path that holds the keys (PATHS: the tamper,
replay, every-size and ESN injections too), and each must have run. Then every artifact is searched for the PSK and each key in every form a leak
would take: raw, hex (either case, setkey's 8-digit groups), base64 and strongSwan's ``0s``.
"""

from __future__ import annotations

import base64
import os
import secrets
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.lab_factory import subprocess_env, suite_run

pytestmark = pytest.mark.needs_root

REPO = Path(__file__).resolve().parents[2]

#: Every path that holds the keys (issue 42): bring-up, the wire's tamper injection, the
#: replay window's injection, every inner size sealed by the suite, and both ESN directions
#: (the outbound one starts an association near 2^32 through the lab's engine).
PATHS = ("bringup", "wire", "conservation", "tampered", "test_replay_window", "test_every_size", "test_esn_")
SELECTION = ("(lab-v4in4-gcm and (bringup or wire or conservation or tampered or test_replay_window"
             " or test_every_size)) or (esn3300-v4in4-gcm and test_esn_)")


def forms(secret_hex: str | None = None, text: str | None = None) -> set[bytes]:
    """Every spelling of a secret a log or report could contain."""
    raw = bytes.fromhex(secret_hex) if secret_hex is not None else text.encode()
    out = {raw.hex().encode(), raw.hex().upper().encode(), base64.b64encode(raw),
           base64.b64encode(raw).rstrip(b"=")}
    if text is not None:
        out.add(raw)
    h = raw.hex()
    out.add(" ".join(h[i:i + 8] for i in range(0, len(h), 8)).encode())
    # long keys: also any 16-byte window of the hex, so a wrapped or truncated dump is caught
    out |= {h[i:i + 32].encode() for i in range(0, max(1, len(h) - 31), 8)}
    return {f for f in out if len(f) >= 16}


def test_no_secret_in_any_artifact(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (the child run starts a virtual lab)")
    psk = "hil-safety-" + secrets.token_urlsafe(18)
    keys_file = tmp_path / "keys.txt"  # not an artifact: the child writes the keys here
    art = tmp_path / "artifacts"
    allure, junit, logfile = art / "allure", art / "junit.xml", art / "run.log"
    art.mkdir()
    env = subprocess_env(HIL_PSK_VIRTUAL=psk, HIL_SAFETY_KEYS=str(keys_file),
                         HIL_SAFETY_FAULT="dut3300 count_extra",
                         PYTHONPATH=str(REPO))
    rootdir = tmp_path / "checkout"  # the run's reports/ are its own, not other runs'
    r = suite_run(
        ["tests_hil", "-p", "tests.safety._keygrab", "-m", "xgs3300",
         "-k", SELECTION, "--traffic-seconds", "0.2",
         "--alluredir", str(allure), "--junitxml", str(junit), "-o", "log_cli=true",
         "--log-level", "DEBUG", "--log-file", str(logfile), "--log-file-level", "DEBUG"],
        rootdir, env=env, text=False,
    )
    (art / "stdout.txt").write_bytes(r.stdout)
    (art / "stderr.txt").write_bytes(r.stderr)
    out = r.stdout.decode(errors="replace")
    # the run really ran: tests passed, the faulted one failed, keys were captured
    assert r.returncode == 1, out[-3000:]
    assert " passed" in out and "FAILED" in out and "conservation" in out, out[-3000:]
    ran = {f'{case.get("classname", "")}::{case.get("name", "")}' for case in ET.parse(junit).iter("testcase") if not any(
        k.tag == "skipped" for k in case)}
    missing = [p for p in PATHS if not any(p in name for name in ran)]
    assert not missing, f"these key paths did not run in the child: {missing} (ran: {sorted(ran)})"
    keys = sorted(set(keys_file.read_text().split()))
    n_keys = len(keys)  # GCM: one key per direction, the same on both ends
    assert n_keys >= 2, f"only {n_keys} ESP key(s) captured from the appliances"  # never the keys
    artifacts = [p for p in art.rglob("*") if p.is_file()]
    artifacts += [p for p in (rootdir / "reports").rglob("*") if p.is_file()]
    assert any(p.name.endswith("-result.json") for p in artifacts) and junit.exists() and logfile.stat().st_size
    needles = {f: "the PSK" for f in forms(text=psk)}
    for i, k in enumerate(keys):
        needles.update({f: f"ESP key #{i}" for f in forms(secret_hex=k)})
    leaks = []
    for p in artifacts:
        data = p.read_bytes()
        for needle, what in needles.items():
            if needle in data:
                leaks.append(f"{what} in {p}")  # never the secret itself
    assert leaks == [], "\n".join(sorted(set(leaks)))
