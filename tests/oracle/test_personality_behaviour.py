"""The engine takes what it emulates from host.json, which the lab writes from the twin's
personality: the driver named there, and whether it offloads IPv6-outer associations."""
from __future__ import annotations

import json

import pytest

from ipsec_hil_twin.engine.control import EngineState
from ipsec_hil_twin.engine.counters import CounterBlock
from ipsec_hil_twin.engine.hostcfg import load_host


def _host(tmp_path, **extra):
    host = {"name": "gA", "model": "xgs136", "ports": [
        {"name": "wan", "ifname": "wan", "addresses": ["192.0.2.1/24", "2001:db8::1/64"], "mtu": 1500}], **extra}
    (tmp_path / "host.json").write_text(json.dumps(host))
    return load_host(tmp_path / "host.json")


def _sa(outer: str) -> dict:
    src, dst = ("192.0.2.1", "192.0.2.2") if outer == "ipv4" else ("2001:db8::1", "2001:db8::2")
    return {"spi": 0x1234 if outer == "ipv4" else 0x5678, "direction": "out", "src": src, "dst": dst,
            "cipher": "aes-gcm-16", "enc_key": "00" * 36, "local_ts": ["10.0.0.0/24"], "remote_ts": ["10.1.0.0/24"]}


def test_driver_from_the_model_when_host_json_names_none(tmp_path):
    assert _host(tmp_path).driver == "npuep"


def test_an_unknown_driver_is_refused_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"host\.json: driver: driver 'qatep': the twin emulates octep, npuep"):
        _host(tmp_path, driver="qatep")


@pytest.mark.parametrize("accepts,expected", [(True, {"ipv4": True, "ipv6": True}),
                                              (False, {"ipv4": True, "ipv6": False})])
def test_ipv6_outer_offload_follows_the_personality(tmp_path, accepts, expected):
    host = _host(tmp_path, accepts_ipv6_sa=accepts)
    counters = CounterBlock(tmp_path / "engine.counters", create=True)
    try:
        state = EngineState(tmp_path, host, counters, routes=None)
        got = {outer: state.op_add_sa({"sa": _sa(outer)})["offloaded"] for outer in ("ipv4", "ipv6")}
        assert got == expected
        assert counters["sa_inet6"] == int(expected["ipv6"])
    finally:
        counters.close()
