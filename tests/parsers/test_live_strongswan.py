"""The swanctl parsers against a live strongSwan 5.9.8 pair (real component, no mocks).

tests/golden/_capture/strongswan-pair.sh runs two charon-systemd daemons in private
network + mount namespaces joined by a veth, ESP in user space (kernel-libipsec), and
captures swanctl/ping outputs; here every capture must parse into the outcome the script
provoked, and the SPIs must agree across commands. ~15 s; root and strongSwan needed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ipsec_hil.lab.parsers import ping, swanctl_initiate, swanctl_list_sas, swanctl_list_sas_raw, swanctl_load
from ipsec_hil.lab.parsers.swanctl_initiate import Outcome

SCRIPT = Path(__file__).resolve().parents[1] / "golden" / "_capture" / "strongswan-pair.sh"
NEEDS = [b for b in ("charon-systemd", "swanctl", "unshare", "ip") if shutil.which(b, path="/usr/sbin:/usr/bin:/sbin:/bin") is None]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network and mount namespaces"),
    pytest.mark.skipif(bool(NEEDS), reason=f"not installed: {NEEDS}"),
    pytest.mark.skipif(not Path("/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so").exists(),
                       reason="strongSwan kernel-libipsec plugin missing (libcharon-extra-plugins)"),
]


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("h3c")
    run = subprocess.run(["sh", str(SCRIPT)], env={**os.environ, "CAPTURE_DIR": str(root)},
                         capture_output=True, text=True, timeout=200)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return root / "a" / "out"


def _streams(out: Path, name: str) -> tuple[str, str, int]:
    return ((out / f"{name}.txt").read_text(), (out / f"{name}.stderr").read_text(),
            int((out / f"{name}.status").read_text()))


def test_live_outcomes(captured: Path) -> None:
    ok = swanctl_initiate.parse(*_streams(captured, "init-ok"))
    assert ok.outcome is Outcome.ESTABLISHED and ok.child == "net"
    expected = {"init-badts": Outcome.TS_UNACCEPTABLE, "init-badprop": Outcome.NO_PROPOSAL_CHOSEN,
                "init-nosuch": Outcome.CONFIG_NOT_FOUND, "init-lost": Outcome.TIMEOUT,
                "init-lost-timeout": Outcome.TIMEOUT}
    got = {name: swanctl_initiate.parse(*_streams(captured, name)).outcome for name in expected}
    assert got == expected
    load = swanctl_load.parse(*_streams(captured, "load"))
    assert load.ok and load.connections == ("lab", "nopeer")


def test_live_listing_agrees_with_initiate_and_traffic(captured: Path) -> None:
    ok = swanctl_initiate.parse(*_streams(captured, "init-ok"))
    pings = ping.parse(*_streams(captured, "ping"))
    assert pings.received == pings.transmitted == 5
    text = swanctl_list_sas.parse((captured / "list.txt").read_text())
    raw = swanctl_list_sas_raw.parse((captured / "list-raw.txt").read_text())
    for listing in (text, raw):
        (child,) = listing.child("net")
        assert (child.spi_in, child.spi_out) == (ok.spi_in, ok.spi_out)
        assert child.packets_out == child.packets_in == 5  # the five echo requests / replies
        assert child.bytes_out == 5 * 84  # 84-byte inner IPv4 echo packets
