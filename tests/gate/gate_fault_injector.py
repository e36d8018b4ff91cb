"""A pytest plugin for the gate's end-to-end test only (loaded with ``-p``): switch a twin
fault on in the virtual lab the run just started, before any test runs.

``HIL_TEST_FAULT="HOST NAME [k=v ...]"`` (e.g. ``dut3300 drop_every n=5``). The run's lab
is started by plugin.session in ``pytest_configure``; its handle is there by sessionstart.
"""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    spec = os.environ.get("HIL_TEST_FAULT", "").split()
    if not spec or hasattr(session.config, "workerinput"):
        return
    from plugin.session import virtual_lab_of

    lab = virtual_lab_of(session.config)
    if lab is None:
        raise pytest.UsageError("HIL_TEST_FAULT needs the virtual lab")
    r = lab.twin("fault", *spec)
    if r.returncode != 0:
        raise pytest.UsageError(f"twin fault {' '.join(spec)} failed: {r.stderr.strip()}")
