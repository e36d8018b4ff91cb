"""Topology files: the good ones load, every bad one fails with its pinned FILE:LINE message."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipsec_hil.lab.errors import LabError, TopologyError
from ipsec_hil.lab.topology import TunnelConfig, load_topology, parse_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY, host_profile

HERE = Path(__file__).parent
BAD = HERE / "bad"
REPO = HERE.parents[1]

# file -> the substring its error must contain ("LINE: field.path: message").
EXPECTED = {
    "unknown_key": "8: hosts.gw1.colour: expected one of role, model, profile, mgmt, ports, os, noise, found unknown key 'colour'",
    "misspelt_key": "7: hosts.gw1.modle: expected one of role, model, profile, mgmt, ports, os, noise, found unknown key 'modle' (did you mean 'model'?)",
    "wrong_type_mtu": "9: hosts.gw1.ports.wan.mtu: expected an integer, found 'big'",
    "missing_role": "5: hosts.gw1.role: expected a value (required), found nothing",
    "link_unknown_host": "23: links[0].b: expected a host of this file (gw1, gw2, bench), found 'gw3'",
    "link_unknown_port": "24: links[1].b: expected a port of bench (a), found 'eth9'",
    "link_endpoint_syntax": "24: links[1].b: expected HOST.PORT (e.g. dut3300.lan), found 'bench'",
    "link_endpoint_twice": "25: links[2].b: expected each port on one link, found gw1.lan already on links[1]",
    "link_mtu_mismatch": "23: links[0].b: expected the same MTU at both ends of a wire (gw1.wan has 1500), found 9000 on gw2.wan",
    "tunnel_mtu_mismatch": "27: tunnels.t.remote.port: expected the MTU of gw1.wan (1500) on gw2.wan too (a tunnel has one path MTU), found 9000",
    "link_subnet_mismatch": "24: links[1].b: expected bench.a's ipv4 address in gw1.lan's network 198.51.100.0/26, found 198.51.100.200/26",
    "tunnel_unknown_port": "28: tunnels.t.remote.port: expected a port of gw2 (wan, lan), found 'wan9'",
    "tunnel_unknown_host": "27: tunnels.t.local.host: expected a host of this file (gw1, gw2, bench), found 'gw7'",
    "tunnel_same_host": "28: tunnels.t.remote.host: expected the other end on another host, found 'gw1' at both ends",
    "tunnel_end_on_bench": "28: tunnels.t.remote.host: expected an appliance, found the bench host 'bench'",
    "inner_v6_without_address": "30: tunnels.t.inner: expected an ipv6 address on gw2.lan for inner ipv6, found none",
    "outer_v4_without_address": "29: tunnels.t.outer: expected an ipv4 address on gw2.wan for outer ipv4, found none",
    "psk_inline": "32: tunnels.t.psk: expected {env: NAME} or {file: PATH}, found an inline key",
    "psk_inline_value": "32: tunnels.t.psk: expected {env: NAME} or {file: PATH}, found an inline key",
    "psk_env_not_a_name": "32: tunnels.t.psk.env: expected an environment variable name (letters, digits, _), found something else (not shown)",
    "psk_unterminated": "33: (top): expected valid YAML, found a syntax error: found unexpected end of stream (while scanning a quoted scalar started on line 32)",
    "psk_env_and_file": "32: tunnels.t.psk: expected exactly one of env or file, found both",
    "bad_cidr": "9: hosts.gw1.ports.wan.ipv4: expected an ipv4 address with prefix length (e.g. 192.0.2.1/24), found '192.0.2.300/26'",
    "cidr_without_prefix": "9: hosts.gw1.ports.wan.ipv4: expected an ipv4 address with prefix length (e.g. 192.0.2.1/24), found '192.0.2.1'",
    "ipv6_in_ipv4_field": "21: hosts.bench.ports.a.ipv4: expected an ipv4 address with prefix length (e.g. 192.0.2.1/24), found 'fd00:a::10/64'",
    "mtu_ipv6_too_small": "9: hosts.gw1.ports.wan.mtu: expected an MTU in 1280..9216 (the port has an IPv6 address), found 1000",
    "mtu_too_large": "21: hosts.bench.ports.a.mtu: expected an MTU in 576..9216, found 9217",
    "unknown_model": "7: hosts.gw1.model: expected one of xgs3300, xgs136, found 'xgs4500'",
    "appliance_without_model": "5: hosts.gw1.model: expected a model (xgs3300 or xgs136) for an appliance, found none",
    "bench_with_model": "19: hosts.bench.model: expected no model on the bench host, found 'xgs136'",
    "no_bench": "4: hosts: expected exactly one host with role: bench, found 0",
    "duplicate_address": "21: hosts.bench.ports.a.ipv4: expected a unique address, found 198.51.100.1 again (also hosts.gw1.ports.lan.ipv4)",
    "duplicate_key": "7: hosts.gw1.role: expected each key once, found 'role' again (first on line 6)",
    "children_zero": "32: tunnels.t.children.count: expected 1..1024 children, found 0",
    "children_too_many": "32: tunnels.t.children.count: expected 1..1024 children, found 1025",
    "children_by_udp": "32: tunnels.t.children.by: expected 'tcp_port', found 'udp_port'",
    "lifetimes_past_rekey": "33: tunnels.t.lifetimes: expected rand_time: 0 with rekey_time: 0 (5.9.8 would list a rekey in the past that never fires), found rand_time: 3",
    "lifetimes_remote_never_expires": "33: tunnels.t.lifetimes: expected remote_life_time 0 exactly when life_time is 0 (both ends expire or neither), found life_time 20, remote_life_time 0",
    "replay_window_not_bytes": "33: tunnels.t.replay_window: expected a multiple of 8 from 8 to 2040 packets (FreeBSD keeps the window in bytes: setkey -D's replay= is the window / 8, at most 255), found 100",
    "children_without_split": "32: tunnels.t.children: expected by: tcp_port and first_port for 6 children",
    "unknown_cipher": "31: tunnels.t.ciphers[0]: expected 'aes-gcm-16' or 'aes-cbc-hmac-sha256', found 'aes-ccm-16'",
    "unknown_family": "29: tunnels.t.outer[1]: expected 'ipv4' or 'ipv6', found 'ipx'",
    "yaml_syntax": "10: (top): expected valid YAML, found a syntax error: expected ',' or '}', but got '<scalar>' (while parsing a flow mapping started on line 9)",
    "profile_unknown_counter": "8: hosts.gw1.profile.counters.rx_nosa: expected what the xgs3300 profile knows, found: profile.counters.rx_nosa: unknown counter 'rx_nosa'",
    "hardware_lab_without_mgmt": "5: hosts.gw1.mgmt: expected mgmt.address (SSH) or mgmt.local: true for a hardware lab, found neither",
    "negative_rate": "23: links[0].rate_mbit: expected a value > 0",
    "not_a_mapping": "1: (top): expected a mapping with lab, hosts, links, tunnels, found a list",
    "empty": "1: (top): expected a topology (lab, hosts, links, tunnels), found an empty file",
    "labgrid_bad_coordinator": "5: lab.labgrid.coordinator: expected HOST:PORT of the labgrid coordinator (e.g. labgrid.example:20408), found 'lab.example'",
    "labgrid_bad_tag": "6: lab.labgrid.tags: expected tags as key: value in lower-case letters, digits and _ (a key starts with a letter), found Board: 'XGS'",
    "labgrid_place_and_tags": "4: lab.labgrid: expected exactly one of place or tags, found both",
    # issue 41: an appliance's run-to-run noise
    "noise_unknown_key": "14: hosts.gw2.noise.epochs: expected one of rate_sd, cpu_sd, epoch_s, seed, drift_sd, drift_s, outlier_share, outlier_rate, outlier_cpu, found unknown key 'epochs' (did you mean 'epoch_s'?)",
    "noise_negative_sd": "15: hosts.gw2.noise.rate_sd: expected a value >= 0",
    "noise_zero_epoch": "14: hosts.gw2.noise.epoch_s: expected a value > 0",
    "noise_on_bench": "20: hosts.bench.noise: expected no noise on the bench host (noise is an appliance's), found",
    "labgrid_with_mgmt_address": "11: hosts.gw1.mgmt.address: expected no mgmt.address or mgmt.local on an appliance of a lab with lab.labgrid (its place's NetworkService gives address and user), found '192.0.2.200'",
}


def test_every_bad_file_is_pinned():
    files = {p.stem for p in BAD.glob("*.yaml")}
    assert files == set(EXPECTED), f"unpinned: {files - set(EXPECTED)}, missing: {set(EXPECTED) - files}"
    assert len(files) >= 20


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_file_fails_with_its_message(name):
    path = BAD / f"{name}.yaml"
    with pytest.raises(TopologyError) as info:
        load_topology(path, models=REGISTRY)
    message = str(info.value)
    assert f"{path}:{EXPECTED[name]}" in message, message
    # every line of the message has the FILE:LINE: field: expected ..., found ... shape
    for line in message.splitlines():
        assert line.startswith(f"{path}:"), line
        assert ": expected " in line and ", found" in line, line
    assert "hunter2" not in message  # an inline key is never repeated


@pytest.mark.parametrize(
    "path", ["topologies/virtual.yaml", "topologies/real-lab.example.yaml", "tests/topology/minimal-good.yaml"]
)
def test_good_files_load(path):
    topo = load_topology(REPO / path, models=REGISTRY)
    assert topo.appliances()
    assert topo.bench.role == "bench"
    for tunnel in topo.tunnels.values():
        assert tunnel.configs()


def test_virtual_lab_shape():
    topo = load_topology(REPO / "topologies/virtual.yaml", models=REGISTRY)
    assert topo.lab.virtual
    assert [h.name for h in topo.appliances("xgs3300")] == ["dut3300", "peer3300"]
    assert [h.name for h in topo.appliances("xgs136")] == ["xgs136"]
    assert topo.bench.name == "bench"
    assert topo.port("xgs136", "port8").mtu == 9000
    assert topo.peer_of("xgs136", "port8") == ("peer3300", "port8")
    lab = topo.tunnel("lab")
    assert lab.remote.cipher == "kernel" and lab.identities is None
    assert len(lab.configs()) == 8
    assert TunnelConfig("ipv4", "ipv6", "aes-gcm-16", 1) in lab.configs()
    many = topo.tunnel("many")
    assert many.configs() == [TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 6)]
    assert many.children.ports() == [5201, 5202, 5203, 5204, 5205, 5206]
    assert many.identities is not None
    assert host_profile(topo.host("xgs136")).driver == "npuep"
    assert host_profile(topo.host("dut3300")).driver == "octep"


def test_derived_facts_are_the_models():
    """Path MTU, end ports, LAN networks and the bench's facing port come from Topology."""
    topo = load_topology(REPO / "topologies/virtual.yaml", models=REGISTRY)
    assert topo.path_mtu("npu") == topo.path_mtu(topo.tunnel("many")) == 9000
    assert topo.path_mtu("lab") == 1500
    npu = topo.tunnel("npu")
    # one path MTU, the same from either end (the loader refuses two)
    assert topo.outer_port(npu.local).mtu == topo.outer_port(npu.remote).mtu == topo.path_mtu("npu")
    assert topo.outer_port(npu.remote).ip("ipv6") == "2001:db8:2::2"
    assert topo.lan_port(npu.local).network("ipv4") == "203.0.113.0/26"
    assert topo.lan_port(npu.local).ip("ipv4") == "203.0.113.1"
    name, port = topo.bench_port_facing("xgs136", "f1")
    assert name == "c_f1" and port.ip("ipv4") == "203.0.113.10"
    assert topo.bench_port_facing("xgs136", "port8") is None  # wired to peer3300, not the bench
    assert topo.bench_port_facing("dut3300", "nope") is None
    assert npu.end("remote") is npu.remote
    with pytest.raises(LabError, match="end must be 'local' or 'remote'"):
        npu.end("left")


def test_lookups_name_what_exists():
    topo = load_topology(REPO / "topologies/virtual.yaml", models=REGISTRY)
    with pytest.raises(LabError, match="no host 'nope'.*dut3300"):
        topo.host("nope")
    with pytest.raises(LabError, match="no port 'eth0'.*lan"):
        topo.port("dut3300", "eth0")
    with pytest.raises(LabError, match="no tunnel 'x'"):
        topo.tunnel("x")


MINI = (HERE / "minimal-good.yaml").read_text()


def test_paths_resolve_relative_to_the_file(tmp_path):
    text = MINI.replace("  virtual: true", "  virtual: true\n  known_hosts: keys/known_hosts").replace(
        "psk: {env: HIL_PSK_T}", "psk: {file: secrets/t.psk}"
    )
    (tmp_path / "lab.yaml").write_text(text)
    topo = load_topology(tmp_path / "lab.yaml", models=REGISTRY)
    assert topo.lab.known_hosts == tmp_path / "keys/known_hosts"
    assert topo.tunnel("t").psk.file == tmp_path / "secrets/t.psk"
    assert topo.source == tmp_path / "lab.yaml"


def test_psk_read_from_env_and_file(tmp_path, monkeypatch):
    topo = parse_topology(MINI, models=REGISTRY)
    psk = topo.tunnel("t").psk
    monkeypatch.delenv("HIL_PSK_T", raising=False)
    with pytest.raises(LabError, match="environment variable HIL_PSK_T is not set"):
        psk.read()
    monkeypatch.setenv("HIL_PSK_T", "s3cr3t-value")
    assert psk.read() == "s3cr3t-value"
    assert "s3cr3t" not in repr(psk) and "s3cr3t" not in str(topo.to_dict())

    (tmp_path / "lab.yaml").write_text(MINI.replace("{env: HIL_PSK_T}", "{file: t.psk}"))
    fpsk = load_topology(tmp_path / "lab.yaml", models=REGISTRY).tunnel("t").psk
    with pytest.raises(LabError, match=r"cannot read .*t\.psk"):
        fpsk.read()
    (tmp_path / "t.psk").write_text("from-file\n")
    assert fpsk.read() == "from-file"
    (tmp_path / "t.psk").write_text("\n")
    with pytest.raises(LabError, match="is empty"):
        fpsk.read()


def _hardware_lab(tmp_path: Path) -> Path:
    text = (
        MINI.replace("  virtual: true", "  virtual: false\n  known_hosts: known_hosts")
        .replace("    model: xgs3300\n", "    model: xgs3300\n    mgmt: {address: 192.0.2.61, key_file: keys/id}\n")
        .replace("    model: xgs136\n", "    model: xgs136\n    mgmt: {address: 192.0.2.62, key_file: keys/id}\n")
        .replace("{env: HIL_PSK_T}", "{file: secrets/t.psk}")
    )
    (tmp_path / "lab.yaml").write_text(text)
    return tmp_path / "lab.yaml"


def test_hardware_lab_files_checked_only_when_asked(tmp_path):
    path = _hardware_lab(tmp_path)
    load_topology(path, models=REGISTRY)  # not checked: loads
    with pytest.raises(TopologyError) as info:
        load_topology(path, check_files=True, models=REGISTRY)
    msg = str(info.value)
    assert f"{path}:4: lab.known_hosts: expected a known_hosts file, found no file at {tmp_path}/known_hosts" in msg
    assert "hosts.gw1.mgmt.key_file: expected a private key file, found no file at" in msg
    assert "tunnels.t.psk.file: expected a readable file" in msg
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys/id").write_text("")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets/t.psk").write_text("k")
    load_topology(path, check_files=True, models=REGISTRY)


def test_virtual_lab_files_never_checked(tmp_path):
    (tmp_path / "lab.yaml").write_text(MINI.replace("  virtual: true", "  virtual: true\n  known_hosts: nowhere"))
    load_topology(tmp_path / "lab.yaml", check_files=True, models=REGISTRY)


def test_several_problems_are_all_reported_in_line_order():
    text = MINI.replace("model: xgs136", "model: xgs9").replace("colour", "x").replace(
        "    role: bench\n", "    role: bench\n    colour: red\n"
    )
    with pytest.raises(TopologyError) as info:
        parse_topology(text, "lab.yaml", models=REGISTRY)
    lines = str(info.value).splitlines()
    assert lines[0].startswith("lab.yaml:13: hosts.gw2.model: expected one of xgs3300, xgs136")
    assert lines[1].startswith("lab.yaml:19: hosts.bench.colour: expected one of")


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_topology(tmp_path / "absent.yaml", models=REGISTRY)


# ----------------------------------------------------------- the models come from the caller


class _Models:
    """A registry as the loader's callers pass one (ipsec_hil.lab.topology.registry):
    it knows only ``names`` and refuses any override named ``refused``."""

    def __init__(self, *names: str) -> None:
        self._names = names

    def names(self) -> tuple[str, ...]:
        return self._names

    def check_profile(self, model: str, overrides) -> None:
        if "refused" in overrides:
            raise ValueError(f"{model} takes no 'refused'")


def test_models_are_the_callers_not_the_suites():
    """The loader checks model names against the registry it is passed, and nothing else:
    one that knows only xgs3300 refuses the file's xgs136 at its line (and says what it
    knows); the suite's registry accepts the same text. So the twin's personalities, not
    the suite's hardware table, decide what the twin accepts."""
    assert "model: xgs136" in MINI
    with pytest.raises(TopologyError) as err:
        parse_topology(MINI, "mini.yaml", models=_Models("xgs3300"))
    line = next(i for i, t in enumerate(MINI.splitlines(), 1) if "model: xgs136" in t)
    assert f"mini.yaml:{line}: hosts.gw2.model: expected one of xgs3300, found 'xgs136'" in str(err.value)
    topo = parse_topology(MINI.replace("model: xgs136", "model: xgs9"), models=_Models("xgs3300", "xgs9"))
    assert [h.model for h in topo.appliances()] == ["xgs3300", "xgs9"]
    assert topo.appliances("xgs9")[0].name == "gw2"
    with pytest.raises(ValueError, match="unknown model 'xgs136'; expected one of xgs3300, xgs9"):
        topo.appliances("xgs136")  # the loaded file's registry, not the suite's


def test_profile_overrides_are_judged_by_the_callers_registry():
    text = MINI.replace("    model: xgs3300\n", "    model: xgs3300\n    profile: {refused: 1}\n", 1)
    with pytest.raises(TopologyError, match=r"lab.yaml:\d+: hosts.gw1.profile.refused: expected what the "
                                            r"xgs3300 profile knows, found: xgs3300 takes no 'refused'"):
        parse_topology(text, "lab.yaml", models=_Models("xgs3300", "xgs136"))


def test_the_twins_registry_is_its_personalities():
    """The twin passes ipsec_hil_twin.personality.MODELS: the models it emulates, and its
    own judgement of a host's profile overrides (a counter its personality lacks)."""
    from ipsec_hil_twin.personality import MODELS, PERSONALITIES

    assert tuple(MODELS.names()) == tuple(PERSONALITIES)
    text = MINI.replace("    model: xgs3300\n", "    model: xgs3300\n    profile: {counters: {nosuch: dev.x.0.y}}\n", 1)
    with pytest.raises(TopologyError, match=r"hosts.gw1.profile.counters.nosuch: .*has no counter 'nosuch'"):
        parse_topology(text, "lab.yaml", models=MODELS)
    assert parse_topology(MINI, models=MODELS).models == {"xgs3300", "xgs136"}


def test_a_loader_without_a_registry_says_so():
    with pytest.raises(TypeError, match="models: expected a registry with names"):
        parse_topology(MINI, models=("xgs3300", "xgs136"))


def test_schema_and_esp_math_name_the_same_families_and_ciphers():
    """The schema spells them itself (it must not import the suite's arithmetic); a cipher
    the arithmetic gains must be spelt in the schema too, and the reverse."""
    from ipsec_hil.lab.expectations import esp_math
    from ipsec_hil.lab.topology import CIPHERS, FAMILIES

    assert FAMILIES == esp_math.FAMILIES
    assert CIPHERS == esp_math.CIPHERS


def test_noise_is_off_unless_stated_and_on_with_the_pages_defaults():
    """Issue 41: absent = off (the default lab stays deterministic); `noise: {}` = on with
    the defaults the schema states (rate_sd and drift_sd from page 001, the rest assumptions; issue 54); any key
    overrides its default alone."""
    from ipsec_hil.lab.topology import NoiseModel

    assert all(h.noise is None for h in load_topology(REPO / "topologies/virtual.yaml", models=REGISTRY).hosts.values())
    text = MINI.replace("    model: xgs136\n", "    model: xgs136\n    noise: {}\n").replace(
        "    model: xgs3300\n", "    model: xgs3300\n    noise: {rate_sd: 0.05, epoch_s: 0.5, seed: 7}\n")
    topo = parse_topology(text, "noise.yaml", models=REGISTRY)
    slow = {"drift_sd": 0.0327, "drift_s": 3600.0, "outlier_share": 0.002, "outlier_rate": 0.8, "outlier_cpu": 1.25}
    assert topo.host("gw2").noise == NoiseModel(rate_sd=0.0208, cpu_sd=0.02, epoch_s=1.0, seed=0, **slow)
    assert topo.host("gw1").noise.model_dump() == {"rate_sd": 0.05, "cpu_sd": 0.02, "epoch_s": 0.5, "seed": 7, **slow}
    assert topo.host("bench").noise is None
