"""pytest plugin for test_secrets' child run (``-p tests.safety._keygrab``): collects the run's
ESP keys and switches a fault on, from inside the run, exactly as a user could.

- After every test that used ``tunnel`` (before its teardown), both ends' ``setkey -D`` is
  read through the suite's own Appliance and every key is appended, hex, to the 0600 file
  ``$HIL_SAFETY_KEYS`` -- outside every artifact the parent then searches.
- ``$HIL_SAFETY_FAULT="HOST NAME"`` turns that twin fault on at session start (through the
  plugin's VirtualLab handle), so a test fails and the assertion-message path is covered.
"""

from __future__ import annotations

import os

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    fault = os.environ.get("HIL_SAFETY_FAULT")
    if not fault:
        return
    from ipsec_hil.context import run_context

    lab = run_context(session.config).lab
    if lab is None:
        raise pytest.UsageError("HIL_SAFETY_FAULT needs a virtual lab")
    host, name = fault.split()
    r = lab.twin("fault", host, name)
    if r.returncode != 0:
        raise pytest.UsageError(f"twin fault {fault}: {r.stderr.strip()}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    path = os.environ.get("HIL_SAFETY_KEYS")
    tunnel = getattr(item, "funcargs", {}).get("tunnel")
    if not path or tunnel is None:
        return
    keys = []
    for app in (tunnel.local, tunnel.remote):
        for e in app.setkey_sas().entries:
            keys += [k for k in (e.enc_key, e.auth_key) if k]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write("".join(k + "\n" for k in keys))
