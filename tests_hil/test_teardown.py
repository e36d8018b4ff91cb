"""Teardown leaves nothing: associations gone on both engines, swanctl.conf byte-identical,
no temporary route on the bench.

The 001 page's first attempt replaced both ends' address lines with two bytes each ("the
copies kept before anything were put back"): a gate that cannot put a lab back is not run
twice. This test takes its tunnel down itself (so it runs last) and checks the result.
"""

from __future__ import annotations

import pytest

from ipsec_hil.lab.errors import ProvisionError
from ipsec_hil.lab.files import remote_sha256

pytestmark = [pytest.mark.page("001"), pytest.mark.runs_last]


@pytest.mark.tunnels(outer="ipv4", inner="ipv4", cipher="aes-gcm-16")
def test_teardown_restores_everything(tunnel, record):
    apps = {a.name: a for a in (tunnel.local, tunnel.remote)}
    spis = {name: tunnel.spis(app) for name, app in apps.items()}
    assert all(spis.values()), f"the tunnel has no SAs before teardown: {spis}"
    saved = tunnel.backups()
    assert saved, "the tunnel's transaction saved no file"
    try:
        done, incomplete = tunnel.close(), None
    except ProvisionError as exc:  # the teardown's own checks (no SA, no SPD entry left) found something
        done, incomplete = [], str(exc)
    assert incomplete is None, incomplete
    record.figure("teardown steps", len(done))
    for name, b in saved:
        now = remote_sha256(apps[name].host, b.path)
        if b.existed:
            assert now == b.sha256, f"{name}: {b.path} differs from before the run (sha256 {now} != {b.sha256})"
        else:
            assert now is None, f"{name}: {b.path} did not exist before the run and is still there"
    for name, app in apps.items():
        left = {e.spi for e in app.setkey_sas().entries} & spis[name]
        assert not left, f"{name}: associations of {tunnel.conn} still installed: {sorted(hex(s) for s in left)}"
        if tunnel.offloaded("local" if name == tunnel.local.name else "remote"):
            count = app.snapshot().counters["sa_count"]
            assert count == 0, f"{name}: the engine still holds {count} associations after teardown"
    bench = tunnel.bench
    if bench is not None:
        found = bench.probe("route", action="get", dst=tunnel.inner_address("remote"))
        assert found.get("gateway") != tunnel.inner_address("local"), (
            f"the bench still routes {tunnel.inner_address('remote')} through {tunnel.local.name}")

