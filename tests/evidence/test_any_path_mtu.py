"""The size tests pass, unchanged, on any path MTU from 1,280 to 9,000 and either outer family.

Why: a green ``pytest -m xgs136`` is evidence only if the suite's expectations hold on the
lab it is run on, not just on the default file's 1,500 / 9,000-byte paths. Each variant
here is ``topologies/virtual.yaml`` with one tunnel's wire set to another MTU (and the
bench's LAN towards it jumbo, so the forwarded gates are reachable: topologies/README.md),
then the size and PMTU slice of tests_hil runs on it in a pytest subprocess (its own
scratch rootdir, its own virtual lab). The twin decides every size from its own model of
FreeBSD (twin/ipsec_hil_twin/engine/sizes.py), so a formula of the suite that is wrong at some MTU fails
here. The IPv6-outer 1,400-byte variant puts the forwarded IPv6 gate at 1,263, below the
IPv6 minimum MTU: the test must find FreeBSD's Packet Too Big carrying 1,263 there.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.lab_factory import VIRTUAL_TOPOLOGY, subprocess_env, suite_run

pytestmark = [pytest.mark.needs_root]

#: The size/PMTU slice: the own largest packet, both forwarded gates, the largest ping.
SLICE = "test_sizes or test_five_pings_answered"
#: What must have run in every variant (one of each per configuration it selects).
MUST_RUN = ("test_own_largest_packet_passes_one_more_refused", "test_forwarded_ipv6_packet_too_big",
            "test_forwarded_ipv4_with_df_passes_while_dfbit_is_0", "test_five_pings_answered")


@dataclass(frozen=True)
class Variant:
    """One tunnel of virtual.yaml on a path of ``mtu`` bytes, one outer family, one cipher."""

    name: str
    tunnel: str
    mtu: int
    outer: str
    cipher: str
    #: the page line the run must show: (figure label, value) as the measurement page prints it
    gate_line: str

    def write(self, path: Path) -> Path:
        """virtual.yaml with only this tunnel, its wire at ``mtu``, its bench LAN at 9,000."""
        data = yaml.safe_load(VIRTUAL_TOPOLOGY.read_text())
        spec = data["tunnels"][self.tunnel]
        data["tunnels"] = {self.tunnel: {**spec, "outer": [self.outer], "inner": ["ipv4", "ipv6"],
                                         "ciphers": [self.cipher]}}
        hosts = data["hosts"]
        local, remote = spec["local"], spec["remote"]
        hosts[local["host"]]["ports"][local["port"]]["mtu"] = self.mtu
        hosts[remote["host"]]["ports"][remote["port"]]["mtu"] = self.mtu
        for link in data["links"]:  # the bench's wire to the local LAN: jumbo at both ends
            ends = {link["a"], link["b"]}
            if f"{local['host']}.{local['lan']}" in ends:
                for end in ends:
                    host, port = end.split(".", 1)
                    hosts[host]["ports"][port]["mtu"] = 9000
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path


VARIANTS = [
    # the IPv6 minimum MTU as the path: forwarded IPv6 gate 1,280 - 117 = 1,163
    Variant("mtu1280-v4outer", "npu", 1280, "ipv4", "aes-gcm-16", "forwarded IPv6 gate (path MTU 1280 - 117) 1,163 bytes"),
    # the case: IPv6 outer on 1,400 bytes, gate 1,263 -- below 1,280
    Variant("mtu1400-v6outer", "npu", 1400, "ipv6", "aes-cbc-hmac-sha256",
            "forwarded IPv6 gate (path MTU 1400 - 137) 1,263 bytes"),
    # a jumbo path on the XGS 3300's lab tunnel, IPv6 outer: gate 9,000 - 137 = 8,863
    Variant("mtu9000-v6outer", "lab", 9000, "ipv6", "aes-gcm-16", "forwarded IPv6 gate (path MTU 9000 - 137) 8,863 bytes"),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_size_slice_passes_on_path_mtu_variant(variant: Variant, tmp_path: Path):
    topo = variant.write(tmp_path / f"virtual-{variant.name}.yaml")
    junit = tmp_path / "junit.xml"
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("HIL_PSK")}
    res = suite_run(["tests_hil", "-k", SLICE, f"--topology={topo}", "-q", "-rfEs", "--tb=short",
                     "--junitxml", str(junit)], tmp_path / "checkout", env=env, timeout=900)
    tail = (res.stdout + res.stderr)[-6000:]
    assert res.returncode == 0, f"{variant.name}: the size slice failed (exit {res.returncode}):\n{tail}"
    cases = ET.parse(junit).getroot().findall(".//testcase")
    skipped = [c.get("name") for c in cases if c.find("skipped") is not None]
    assert not skipped, f"{variant.name}: skipped {skipped} -- every invariant must run"
    ran = {c.get("name", "").split("[", 1)[0] for c in cases}
    missing = [t for t in MUST_RUN if t not in ran]
    assert not missing, f"{variant.name}: did not run {missing} (ran {sorted(ran)})"
    page = (tmp_path / "checkout" / "reports" / "measurement-page.md").read_text()
    assert variant.gate_line in page, f"{variant.name}: the page does not show {variant.gate_line!r}"
