"""ipsec_hil_twin.machinery.runtime: the shared layout (no root needed)."""
from __future__ import annotations

import json
import os

import pytest

from ipsec_hil_twin.machinery import runtime as rt


def test_prefix_shape_and_uniqueness():
    seen = {rt.new_prefix() for _ in range(200)}
    assert all(rt.PREFIX_RE.match(p) for p in seen)
    assert len(seen) > 150  # 65,536 possibilities: collisions rare
    for bad in ("tw12345", "TW1234", "tw12g4", "", "x-1234"):
        with pytest.raises(rt.RuntimeLayoutError, match="tw"):
            rt.check_prefix(bad)


def test_names_fit_ifnamsiz():
    p = "twffff"
    assert rt.netns_name(p, "dut3300") == "twffff-dut3300"
    assert rt.veth_name(p, 99, "b") == "twffff99b"
    with pytest.raises(rt.RuntimeLayoutError):
        rt.veth_name(p, 1, "c")
    with pytest.raises(rt.RuntimeLayoutError, match="longer than 15"):
        rt.veth_name(p, 10**8, "a")


def test_layout_paths(tmp_path):
    run = rt.RunDir(tmp_path)
    hd = run.host_dir("dut3300")
    assert hd.path == tmp_path / "hosts" / "dut3300"
    assert run.lab_json.name == "lab.json" and run.resolved_yaml.name == "lab.resolved.yaml"
    assert run.known_hosts.name == "known_hosts" and run.client_key.name == "id_ed25519"
    assert (hd.host_json.name, hd.engine_sock.name, hd.ike_sock.name, hd.faults_json.name,
            hd.sysctl_json.name, hd.state_json.name) == (
        "host.json", "engine.sock", "ike.sock", "faults.json", "sysctl.json", "state.json")
    assert hd.rootpath("/usr/local/etc/swanctl/swanctl.conf") == \
        hd.root / "usr/local/etc/swanctl/swanctl.conf"
    assert rt.RunDir.for_prefix("tw0001").path == rt.DEFAULT_BASE / "tw0001"
    with pytest.raises(rt.RuntimeLayoutError):
        run.host_dir("../x")


def test_host_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv(rt.HOST_DIR_ENV, str(tmp_path))
    assert rt.HostDir.from_env().path == tmp_path
    monkeypatch.delenv(rt.HOST_DIR_ENV)
    with pytest.raises(rt.RuntimeLayoutError, match="TWIN_HOST_DIR"):
        rt.HostDir.from_env()


def test_json_atomic_roundtrip_and_errors(tmp_path):
    f = tmp_path / "sub" / "x.json"
    rt.write_json_atomic(f, {"a": [1, 2]}, mode=0o600)
    assert rt.read_json(f) == {"a": [1, 2]}
    assert oct(os.stat(f).st_mode & 0o777) == "0o600"
    assert [p.name for p in f.parent.iterdir()] == ["x.json"]  # no temp file left
    assert rt.read_json(tmp_path / "missing.json", default={}) == {}
    with pytest.raises(FileNotFoundError):
        rt.read_json(tmp_path / "missing.json")
    f.write_text('{"a": ')
    with pytest.raises(ValueError, match=r"x\.json:1: invalid JSON"):
        rt.read_json(f)
