"""provision rendering: golden swanctl.conf per config, masking, strongSwan-grammar sanity."""

from __future__ import annotations

import base64
import re
import pickle
from pathlib import Path

import pytest

from ipsec_hil.lab.errors import ProvisionError
from ipsec_hil.lab.provision import (
    MASK,
    Secret,
    TunnelPlan,
    check_grammar,
    child_plans,
    conf_path,
    conn_name,
    render_masked,
    render_swanctl,
)
from ipsec_hil.lab.topology import TunnelConfig, load_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
PSK = "golden-psk-not-a-secret"

CASES = {
    "lab-v4v4-gcm-local": ("lab", TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 1), "local"),
    "lab-v6v6-gcm-remote": ("lab", TunnelConfig("ipv6", "ipv6", "aes-gcm-16", 1), "remote"),
    "lab-v4v6-cbc-local": ("lab", TunnelConfig("ipv4", "ipv6", "aes-cbc-hmac-sha256", 1), "local"),
    "many-v4v4-gcm-local": ("many", TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 6), "local"),
    "many-v4v4-gcm-remote": ("many", TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 6), "remote"),
    "npu-v6v4-cbc-local": ("npu", TunnelConfig("ipv6", "ipv4", "aes-cbc-hmac-sha256", 1), "local"),
    "esn136-v4v4-cbc-remote": ("esn136", TunnelConfig("ipv4", "ipv4", "aes-cbc-hmac-sha256", 1), "remote"),
}


@pytest.fixture(scope="module")
def topo():
    return load_topology(REPO / "topologies" / "virtual.yaml", models=REGISTRY)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(topo, case):
    tname, config, end = CASES[case]
    text = render_swanctl(TunnelPlan.from_topology(topo, tname), config, end, PSK)
    assert text == (GOLDEN / f"{case}.conf").read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_masked_has_no_secret_and_differs_only_there(topo, case):
    tname, config, end = CASES[case]
    plan = TunnelPlan.from_topology(topo, tname)
    real = render_swanctl(plan, config, end, PSK)
    masked = render_masked(plan, config, end, Secret(PSK))
    assert PSK not in masked and f"secret = {MASK}" in masked
    diff = [(a, b) for a, b in zip(real.splitlines(), masked.splitlines()) if a != b]
    assert diff == [(f'        secret = "{PSK}"', f"        secret = {MASK}")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_grammar_one_key_per_line_balanced(topo, case):
    tname, config, end = CASES[case]
    text = render_swanctl(TunnelPlan.from_topology(topo, tname), config, end, PSK)
    depth = 0
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        assert s.count("=") <= 1 or s.startswith("secret"), line
        depth += s.endswith("{") - (s == "}")
        assert depth >= 0
        assert s.endswith("{") or s == "}" or " = " in s, line
    assert depth == 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_twins_strongswan_grammar_reads_it(topo, case):
    """Cross-check with the independent swanctl.conf parser of the virtual lab (ipsec_hil_twin.ike.conf)."""
    from ipsec_hil_twin.ike import conf
    tname, config, end = CASES[case]
    plan = TunnelPlan.from_topology(topo, tname)
    cfg = conf.loads(render_swanctl(plan, config, end, PSK), file=f"{case}.conf")
    assert cfg.errors == []
    (conn,) = cfg.connections
    assert conn.name == conn_name(plan, config) and conn.version == 2
    assert list(conn.children) == [c.name for c in child_plans(plan, config)]
    me, peer = plan.end(end), plan.other(end)
    assert conn.local_addrs == [me.outer_addr(config.outer)] and conn.remote_addrs == [peer.outer_addr(config.outer)]
    (secret,) = cfg.secrets
    assert secret.secret == PSK.encode()
    for child in conn.children.values():
        assert child.mode.upper() == "TUNNEL" and child.start_action == "none"
        assert child.local_ts_text and child.local_ts_text[0].startswith(me.lan_net(config.inner))


def test_esn_and_window_reach_the_child_as_the_twin_reads_them(topo):
    """``esn: true`` -> ``-esn`` on the child's proposal only (the IKE proposal has no ESN);
    ``replay_window`` -> the child's window in packets, read back by the twin's parser."""
    from ipsec_hil_twin.ike import conf
    plan = TunnelPlan.from_topology(topo, "esn136")
    config = TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 1)
    text = render_swanctl(plan, config, "local", PSK)
    assert "esp_proposals = aes256gcm16-esn\n" in text and "proposals = aes256gcm16-prfsha256-x25519\n" in text
    (conn,) = conf.loads(text, file="esn136.conf").connections
    (child,) = conn.children.values()
    assert child.replay_window == 1024
    assert [c.esn for c in child.esp_proposals] == ["EXT_SEQ"]
    plain = render_swanctl(TunnelPlan.from_topology(topo, "npu"), config, "local", PSK)
    assert "-esn" not in plain and "replay_window" not in plain


def test_each_end_gets_its_own_life_time_as_the_twin_reads_it(topo):
    """``remote_life_time`` goes to the remote end's swanctl.conf only (the local end, the
    DUT, expires first: the path test_life_time_expiry accounts for)."""
    from ipsec_hil_twin.ike import conf
    plan = TunnelPlan.from_topology(topo, "expire3300")
    config = TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 1)
    lives = {}
    for end in ("local", "remote"):
        (conn,) = conf.loads(render_swanctl(plan, config, end, PSK), file=f"{end}.conf").connections
        (child,) = conn.children.values()
        lives[end] = (child.rekey_time, child.life_time, child.rand_time)
    assert lives == {"local": (0, 6, 0), "remote": (0, 9, 0)}, lives


def test_six_children_ports_and_sides(topo):
    plan = TunnelPlan.from_topology(topo, "many")
    kids = child_plans(plan, TunnelConfig("ipv4", "ipv4", "aes-gcm-16", 6))
    assert [k.port for k in kids] == [5201, 5202, 5203, 5204, 5205, 5206]
    assert kids[0].name == "hil-many-v4v4-gcm-p5201"
    assert plan.identities == ("xgs136-many.lab.example", "peer3300-many.lab.example")
    assert conf_path(plan) == "/usr/local/etc/swanctl/conf.d/hil-many.conf"


def test_psk_with_quotes_goes_base64(topo):
    plan = TunnelPlan.from_topology(topo, "lab")
    odd = 'a"b\\c d\u00e9'
    text = render_swanctl(plan, TunnelConfig("ipv4", "ipv4", "aes-gcm-16"), "local", Secret(odd))
    line = next(l for l in text.splitlines() if "secret =" in l)
    assert line.strip().startswith("secret = 0s")
    assert base64.b64decode(line.split("0s", 1)[1]).decode() == odd
    check_grammar(text)


def test_secret_never_shows_itself():
    s = Secret("hunter2")
    assert "hunter2" not in repr(s) + str(s) + f"{s}" + f"{s!r}" + repr([s]) + repr({"psk": s})
    assert s.reveal() == "hunter2" and s == Secret("hunter2\n")
    with pytest.raises(TypeError):
        pickle.dumps(s)
    with pytest.raises(ProvisionError, match="empty"):
        Secret("\n")


def test_bad_inputs_name_the_field(topo):
    plan = TunnelPlan.from_topology(topo, "lab")
    with pytest.raises(ProvisionError, match="config.cipher: expected one of"):
        render_swanctl(plan, TunnelConfig("ipv4", "ipv4", "chacha20"), "local", PSK)
    with pytest.raises(ProvisionError, match="end must be 'local' or 'remote'"):
        render_swanctl(plan, TunnelConfig("ipv4", "ipv4", "aes-gcm-16"), "left", PSK)
    with pytest.raises(ProvisionError, match="no tunnel 'nope'"):
        TunnelPlan.from_topology(topo, "nope")
    with pytest.raises(ProvisionError) as ei:
        render_swanctl(plan, TunnelConfig("ipv4", "ipv4", "chacha20"), "local", "s3cret-value")
    assert "s3cret-value" not in str(ei.value)


@pytest.mark.parametrize(
    "text,err",
    [
        ("connections {\n  a {\n    version = 2\n  }\n", "1 section(s) not closed"),
        ("connections {\n}\n}\n", ":3: unbalanced"),
        ("connections {\n  a { version = 2 }\n}\n", ":2: not one 'key = value' per line"),
        ("connections {\n  version = 2 local_addrs = 1.2.3.4\n}\n", ":2: not one 'key = value'"),
        ("version = 2\n", ":1: key outside any section"),
    ],
)
def test_grammar_check_catches(text, err):
    with pytest.raises(ProvisionError, match=re.escape(err)):
        check_grammar(text, "x.conf")
