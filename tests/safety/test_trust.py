"""Trust: host keys are pinned, and lab-file values reach the appliance only as data.

- An unknown, changed or unpinned host key stops the connection before any command is
  sent, with a message naming the known_hosts file; the code has no trust-on-first-use path.
- Hostile values (quotes, ``;``, backticks, ``$()``, newlines, globs) go through the real
  command path -- SshHost to the virtual lab's SSH server, whose login shell is the real
  tcsh, then /bin/sh -- and arrive as data: a canary file the value would create if it
  were executed never appears, and no shell reports a syntax error. Where the topology or
  the renderer refuses a value, the refusal names it.
"""

from __future__ import annotations

import inspect
import os
import re
import secrets
import subprocess
from pathlib import Path

import paramiko
import pytest
import yaml

from ipsec_hil.fixtures import build_appliances
from ipsec_hil.lab.errors import HostKeyError, LabError, ProvisionError, TopologyError
from ipsec_hil.lab.provision import Secret, TunnelPlan, TunnelProvisioner, render_swanctl
from ipsec_hil.lab.remote import SshHost, argv
from ipsec_hil.lab.topology import TunnelConfig, load_topology, parse_topology
from ipsec_hil.lab.expectations.hardware import REGISTRY
from tests.safety._lab import restored_differences, snapshot

pytestmark = pytest.mark.needs_root

REPO = Path(__file__).resolve().parents[2]
SHELL_ERRORS = re.compile(r"syntax error|Unmatched|Illegal variable name|Missing name for redirect|"
                          r"unexpected (EOF|end of file)|Bad substitution|Variable name must", re.I)


@pytest.fixture(scope="module")
def apps(vlab):
    apps, hosts = build_appliances(vlab.topo)
    yield apps
    for h in hosts.values():
        h.close()


@pytest.fixture
def canary(vlab):
    """A path in /tmp (shared by the twin's appliances and this machine) no test may create."""
    p = Path(f"/tmp/{vlab.prefix}-canary-{secrets.token_hex(3)}")
    yield p
    existed = p.exists()
    p.unlink(missing_ok=True)
    assert not existed, f"{p} was created: a value was executed as a command"


def _dut_ssh(vlab, known_hosts) -> SshHost:
    m = vlab.topo.hosts["dut3300"].mgmt
    return SshHost("dut3300", m.address, m.port, m.user, m.key_file, known_hosts, connect_timeout=5)


# ------------------------------------------------------------------ host keys


def test_unknown_host_key_stops_before_any_command(vlab, tmp_path, canary):
    kh = tmp_path / "known_hosts"
    kh.write_text("")  # exists, pins nothing
    host = _dut_ssh(vlab, kh)
    with pytest.raises(HostKeyError) as ei:
        host.run(argv("touch", str(canary)))
    msg = str(ei.value)
    assert str(kh) in msg and "no command was sent" in msg and "ssh-keyscan" in msg, msg
    assert not canary.exists()
    host.close()


def test_changed_host_key_stops_before_any_command(vlab, tmp_path, canary):
    m = vlab.topo.hosts["dut3300"].mgmt
    other = paramiko.Ed25519Key.from_private_key_file(str(vlab.run_dir / "hosts" / "peer3300" / "ssh_host_ed25519_key"))
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[{m.address}]:{m.port} {other.get_name()} {other.get_base64()}\n")
    host = _dut_ssh(vlab, kh)
    with pytest.raises(HostKeyError) as ei:
        host.run(argv("touch", str(canary)))
    msg = str(ei.value)
    assert "CHANGED" in msg and str(kh) in msg and "no command was sent" in msg, msg
    assert not canary.exists()


def test_missing_known_hosts_file_is_named(vlab, tmp_path, canary):
    kh = tmp_path / "nowhere" / "known_hosts"
    host = _dut_ssh(vlab, kh)
    with pytest.raises(HostKeyError) as ei:
        host.run(argv("touch", str(canary)))
    assert str(kh) in str(ei.value)


def test_pinned_key_works_and_only_the_lab_file_is_used(vlab, canary):
    """The control: with the lab's known_hosts the same command runs (so the refusals above
    are about the key). The system's known_hosts is never loaded."""
    host = _dut_ssh(vlab, vlab.topo.lab.known_hosts)
    assert host.run(argv("printf", "%s", "ok")).stdout == "ok"
    client = host._client
    assert client is not None and client.get_host_keys().keys()  # the lab file's entries
    assert not client._system_host_keys.keys()  # load_system_host_keys never called
    host.close()


def test_no_trust_on_first_use_anywhere():
    """No AutoAddPolicy/WarningPolicy outside tests, and no SshHost option to accept keys."""
    hits = []
    for top in ("plugin", "twin", "tools", "tests_hil", "conftest.py"):
        p = REPO / top
        files = [p] if p.is_file() else sorted(p.rglob("*.py"))
        for f in files:
            text = f.read_text(errors="replace")
            for pat in ("AutoAddPolicy", "WarningPolicy", "MissingHostKeyPolicy()"):
                if pat in text:
                    hits.append(f"{f.relative_to(REPO)}: {pat}")
    assert hits == [], hits
    params = set(inspect.signature(SshHost.__init__).parameters)
    assert not {p for p in params if re.search(r"trust|policy|accept|insecure|tofu|strict", p)}, params


# ------------------------------------------------------------------ hostile values

HOSTILE = [
    "x'y", 'x"y', "x;touch {c}", "x`touch {c}`", "x$(touch {c})", "x\ntouch {c}", "x|touch {c}",
    "x&&touch {c}", "x >{c}", "$HOME", "!!", "x\\y", "-x", "x y", "*", "{{a,b}}", "~root", "%1",
]


def _values(canary: Path) -> list[str]:
    return [v.format(c=canary) for v in HOSTILE]


def test_hostile_values_are_data_through_the_transport(apps, canary):
    """printf '%s' VALUE through SshHost -> tcsh -> sh gives back VALUE byte for byte."""
    host = apps["dut3300"].host
    for v in _values(canary):
        r = host.run(argv("printf", "%s", v))
        assert (r.status, r.stdout) == (0, v), (v, r.stderr)
    # and as stdin data, all at once
    blob = "\0".join(_values(canary))
    assert host.run("cat", stdin=blob.encode()).stdout == blob


def test_hostile_values_are_data_through_appliance_methods(apps, canary):
    """Every Appliance method that takes a name or address: the value fails as an unknown
    name, never as shell syntax, and executes nothing."""
    dut = apps["dut3300"]
    calls = {
        "interface": lambda v: dut.interface(v),
        "ifconfig": lambda v: dut.ifconfig(v, "up"),
        "ifconfig-arg": lambda v: dut.ifconfig("wan10g", "inet6", v, "alias"),
        "route_add": lambda v: dut.route_add(v, interface="wan10g", family="ipv6"),
        "route_add-gw": lambda v: dut.route_add("fd00:99::/64", gateway=v, family="ipv6"),
        "route_delete": lambda v: dut.route_delete(v, family="ipv4"),
        "route_get": lambda v: dut.route_get(v, family="ipv4"),
        "sysctl_get": lambda v: dut.sysctl_get(v),
        "swanctl_initiate": lambda v: dut.swanctl_initiate(v, ike=v, timeout=1),
        "swanctl_terminate": lambda v: dut.swanctl_terminate(ike=v, timeout=1),
        "ping": lambda v: dut.ping(v, size=8, count=1, timeout=1),
    }
    before = dut.interface("wan10g")
    problems = []
    core = [v for v in _values(canary) if any(c in v for c in "'\";`$\n")]  # the shell-syntax ones
    for name, call in calls.items():
        for v in core:
            try:
                res = call(v)
                text = repr(res)
            except (LabError, ValueError) as e:  # refused: fine, if it is not the shell that refused
                text = str(e)
            if SHELL_ERRORS.search(text):
                problems.append(f"{name}({v!r}): {text[:200]}")
    assert problems == [], "\n".join(problems)
    assert dut.interface("wan10g") == before


def _hostile_topology(vlab, tmp_path, *, identities=None, ifname=None) -> object:
    data = yaml.safe_load(vlab.resolved.read_text())
    if identities is not None:
        data["tunnels"]["lab"]["identities"] = identities
    if ifname is not None:
        data["hosts"]["dut3300"]["ports"]["wan10g"]["ifname"] = ifname
    p = tmp_path / "hostile.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_topology(p, models=REGISTRY)


def test_identity_with_quote_or_newline_is_refused_by_name(vlab, tmp_path):
    for bad in ('peer"; touch /tmp/x #', "peer\ntouch /tmp/x"):
        topo = _hostile_topology(vlab, tmp_path, identities={"local": "dut.example", "remote": bad})
        plan = TunnelPlan.from_topology(topo, "lab")
        with pytest.raises(ProvisionError) as ei:
            render_swanctl(plan, TunnelConfig("ipv4", "ipv4", "aes-gcm-16"), "local", Secret("k" * 16))
        assert repr(bad) in str(ei.value) and "cannot be written into swanctl.conf" in str(ei.value)


def test_port_names_with_shell_characters_are_refused_by_the_topology(vlab):
    text = vlab.resolved.read_text().replace("wan10g:", "'wan;touch /tmp/x':", 1)
    with pytest.raises(TopologyError) as ei:
        parse_topology(text, "hostile.yaml", models=REGISTRY)
    assert "hostile.yaml:" in str(ei.value) and "wan;touch /tmp/x" in str(ei.value)


def test_hostile_identities_provisioned_as_data(vlab, apps, tmp_path, canary):
    """`;`, backticks and $() in identities: written into swanctl.conf quoted, loaded, and
    nothing executed on either end; everything restored afterwards."""
    ident = {"local": f"dut;`touch {canary}`", "remote": f"peer$(touch {canary})"}
    topo = _hostile_topology(vlab, tmp_path, identities=ident)
    before = snapshot(vlab, apps)
    prov = TunnelProvisioner(apps, TunnelPlan.from_topology(topo, "lab"), TunnelConfig("ipv4", "ipv4", "aes-gcm-16"),
                             secrets.token_hex(16), run_id="safety-hostile", initiate_timeout=5)
    try:
        prov.up()
        conf = (vlab.root("dut3300") / "usr/local/etc/swanctl/conf.d/hil-lab.conf").read_text()
        assert f'id = "{ident["local"]}"' in conf and f'id = "{ident["remote"]}"' in conf
        sas = apps["peer3300"].list_sas()
        assert [i.name for i in sas.ike_sas] == ["hil-lab-v4v4-gcm"]
    finally:
        prov.down()
    assert not canary.exists()
    assert restored_differences(vlab, apps, before) == []


def test_hostile_ifname_provisioned_as_data(vlab, apps, tmp_path, canary):
    """A topology ``ifname`` with shell syntax reaches ifconfig/route as one argument: the
    interface is simply unknown, the bring-up fails naming it, nothing runs, all restored."""
    bad = f"wan0;touch {canary}`touch {canary}`"
    topo = _hostile_topology(vlab, tmp_path, ifname=bad)
    before = snapshot(vlab, apps)
    prov = TunnelProvisioner(apps, TunnelPlan.from_topology(topo, "lab"), TunnelConfig("ipv4", "ipv6", "aes-gcm-16"),
                             secrets.token_hex(16), run_id="safety-hostile", initiate_timeout=5)
    with pytest.raises(LabError) as ei:
        prov.up()
    assert bad in str(ei.value) and not SHELL_ERRORS.search(str(ei.value)), str(ei.value)
    assert not canary.exists()
    assert restored_differences(vlab, apps, before) == []
