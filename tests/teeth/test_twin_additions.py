"""The two faults added to the twin for the matrix, proven on the engine alone (MiniLab:
hostA | gwA | gwB | hostB, two engines, SAs installed over engine.sock).

- ipv4_df_gate: a forwarded IPv4 packet of the exact ESP limit with DF passes while dfbit
  is 0; with the fault on it is refused (ICMP fragmentation needed, the gate's MTU); off
  again, it passes.
- leak_sa_on_delete: del_sa answers ok but the association stays (list_sas, sa_count);
  switching the fault off drops what was kept.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.lab_factory import minilab_fixture
from ipsec_hil.lab.expectations import esp_math

pytestmark = [pytest.mark.needs_root]


mini = minilab_fixture(name="mini", prefix="tt" + os.urandom(2).hex())


def _ping(lab, size: int):
    return lab.run("hA", ["ping", "-4", "-c", "1", "-W", "2", "-M", "do", "-s", str(size), "203.0.113.10"], timeout=30)


def test_ipv4_df_gate(mini):
    mini.call("gA", "reset")
    mini.call("gB", "reset")
    mini.tunnel("aes-gcm-16", "ipv4")
    exact = esp_math.ping_data_for_inner(esp_math.max_inner("aes-gcm-16", "ipv4", 1500), "ipv4")
    assert _ping(mini, exact).returncode == 0, "healthy: the exact-limit IPv4 ping with DF passes (dfbit 0)"
    mini.set_faults("gA", {"ipv4_df_gate": {}})
    try:
        r = _ping(mini, exact)
        limit = esp_math.forwarded_ipv6_limit(1500, "ipv4")
        assert r.returncode != 0, f"with ipv4_df_gate the {exact}-byte ping must be refused: {r.stdout}"
        assert f"mtu = {limit}" in r.stdout.replace("mtu=", "mtu = "), r.stdout
    finally:
        mini.set_faults("gA", {})
    mini.run("hA", ["ip", "route", "flush", "cache"])
    assert _ping(mini, exact).returncode == 0, "fault off: the ping passes again"


def test_leak_sa_on_delete(mini):
    mini.call("gA", "reset")
    mini.call("gB", "reset")
    sas = mini.tunnel("aes-gcm-16", "ipv4")
    out = sas["gA_out"]
    before = {s["spi"] for s in mini.call("gA", "list_sas")["sas"]}
    assert out["spi"] in before
    mini.set_faults("gA", {"leak_sa_on_delete": {}})
    try:
        assert mini.call("gA", "del_sa", spi=out["spi"], dst=out["dst"])["ok"] is True
        kept = {s["spi"] for s in mini.call("gA", "list_sas")["sas"]}
        assert out["spi"] in kept, "the fault keeps the deleted association"
        assert mini.call("gA", "counters")["driver"]["sa_count"] == len(before)
    finally:
        mini.set_faults("gA", {})
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if out["spi"] not in {s["spi"] for s in mini.call("gA", "list_sas")["sas"]}:
            break
        time.sleep(0.1)
    left = {s["spi"] for s in mini.call("gA", "list_sas")["sas"]}
    assert out["spi"] not in left, "fault off: the kept association is dropped"
    assert mini.call("gA", "counters")["driver"]["sa_count"] == len(before) - 1
    # healthy: del_sa deletes
    inn = sas["gA_in"]
    assert mini.call("gA", "del_sa", spi=inn["spi"], dst=inn["dst"])["ok"] is True
    assert inn["spi"] not in {s["spi"] for s in mini.call("gA", "list_sas")["sas"]}
