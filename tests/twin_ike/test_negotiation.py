"""Two daemons in two namespaces negotiate from swanctl.conf with strongSwan's outcomes.

The engines here are RecordingEngineDouble (a test double of engine.sock that records
add_sa); test_real_engine.py repeats bring-up against the real engine (ipsec_hil_twin.engine).  Outputs are parsed by
the suite's own parsers (ipsec_hil.lab.parsers.swanctl_initiate / swanctl_list_sas).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import time
from pathlib import Path

import pytest

from ipsec_hil.lab.parsers import swanctl_initiate, swanctl_list_sas
from ipsec_hil_twin.ike.pairlab import A4, A6, B4, B6, IkePair, conf

pytestmark = pytest.mark.needs_root

LAN_A4, LAN_B4 = "198.51.100.0/26", "203.0.113.0/26"
LAN_A6, LAN_B6 = "fd00:a::/64", "fd00:b::/64"


@pytest.fixture(scope="module")
def module_pair(tmp_path_factory):
    """One pair of namespaces and daemons per module (fast); each test starts from a reset."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    prefix = "ti" + secrets.token_hex(2)
    p = IkePair(prefix, tmp_path_factory.mktemp("ikepair")).build()
    try:
        p.start_engines_double()
        yield p
    finally:
        p.close()
        left = [l for l in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if l.startswith(prefix)]
        assert not left, f"namespaces left behind: {left}"


@pytest.fixture
def pair(module_pair):
    p = module_pair
    for h in "ab":
        (p.dirs[h] / "faults.json").write_text("{}")
        if h not in p.procs or p.procs[h].poll() is not None:
            p.start_daemon(h)
        else:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(p.dirs[h] / "ike.sock"))
                s.sendall(b'{"op": "reset"}\n')
                assert b'"ok": true' in s.makefile("rb").readline()
        (p.dirs[h] / "root/usr/local/etc/swanctl/swanctl.conf").unlink(missing_ok=True)
    for e in p.engines.values():
        with e.lock:
            e.sas.clear()
            e.calls.clear()
    return p


def load(pair: IkePair, h: str, text: str) -> None:
    pair.write_conf(h, text)
    r = pair.swanctl(h, "--load-all", "--noprompt")
    assert r.returncode == 0, r.stderr
    assert "successfully loaded" in r.stdout


def initiate(pair: IkePair, h: str, child: str, *extra: str) -> swanctl_initiate.InitiateResult:
    r = pair.swanctl(h, "--initiate", "--child", child, *extra)
    return swanctl_initiate.parse(r.stdout, r.stderr, r.returncode)


def rekey_settled(pair: IkePair, per_host: int, timeout: float = 15) -> None:
    """Wait until a queued rekey is over: each engine holds `per_host` associations and
    no child is listed in a rekeying state (swanctl --rekey returns before the rekey
    runs, and the old inbound association lingers for delete_rekeyed_delay)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = [len(pair.engines[h].snapshot()) for h in "ab"]
        states = {c.state for h in "ab" for ike in swanctl_list_sas.parse(pair.swanctl(h, "--list-sas").stdout).ike_sas
                  for c in ike.children}
        if counts == [per_host, per_host] and states <= {"INSTALLED"}:
            return
        time.sleep(0.05)
    raise AssertionError(f"rekey not settled in {timeout}s: engines {counts}, child states {states}")


def lab_pair(pair: IkePair, outer: str = "ipv4", inner: str = "ipv4", esp: str = "aes256gcm16",
             psk_b: str = "0sc2VjcmV0LWxhYi1rZXk=", prop_b: str = "aes256gcm16-prfsha256-x25519",
             esp_b: str | None = None) -> None:
    a, b = (A4, B4) if outer == "ipv4" else (A6, B6)
    la, lb = (LAN_A4, LAN_B4) if inner == "ipv4" else (LAN_A6, LAN_B6)
    load(pair, "a", conf("lab", a, b, {"net": (la, lb)}, esp=esp))
    load(pair, "b", conf("lab", b, a, {"net": (lb, la)}, esp=esp_b or esp, psk=psk_b, proposals=prop_b))


@pytest.mark.parametrize("outer,inner", [("ipv4", "ipv4"), ("ipv4", "ipv6"), ("ipv6", "ipv4"), ("ipv6", "ipv6")])
def test_both_ends_hold_the_same_fresh_keys(pair, outer, inner):
    lab_pair(pair, outer, inner)
    res = initiate(pair, "a", "net")
    assert res.ok, res
    sas_a, sas_b = pair.engines["a"].snapshot(), pair.engines["b"].snapshot()
    assert len(sas_a) == 2 and len(sas_b) == 2
    in_a = next(s for s in sas_a if s["direction"] == "in")
    out_a = next(s for s in sas_a if s["direction"] == "out")
    in_b = next(s for s in sas_b if s["direction"] == "in")
    out_b = next(s for s in sas_b if s["direction"] == "out")
    # each end's inbound SPI is the one it announced; the peer sends with it
    assert f"{in_a['spi']:08x}" == res.spi_in and f"{out_a['spi']:08x}" == res.spi_out
    for out, inn in ((out_a, in_b), (out_b, in_a)):
        assert out["spi"] == inn["spi"] and out["enc_key"] == inn["enc_key"]
        assert (out["src"], out["dst"]) == (inn["src"], inn["dst"])
        assert out["local_ts"] == inn["remote_ts"] and out["remote_ts"] == inn["local_ts"]
    assert in_a["enc_key"] != out_a["enc_key"]
    assert len(bytes.fromhex(in_a["enc_key"])) == 36 and in_a["cipher"] == "aes-gcm-16"
    assert in_a["src"] == (B4 if outer == "ipv4" else B6)
    assert in_a["local_ts"] == [LAN_A4 if inner == "ipv4" else LAN_A6]
    # fresh: a second tunnel gets other keys
    r = pair.swanctl("a", "--terminate", "--ike", "lab")
    assert r.returncode == 0 and r.stdout.endswith("terminate completed successfully\n"), r.stderr
    assert pair.engines["a"].snapshot() == [] and pair.engines["b"].snapshot() == []
    assert initiate(pair, "a", "net").ok
    assert next(s for s in pair.engines["a"].snapshot() if s["direction"] == "in")["enc_key"] != in_a["enc_key"]


def test_cbc_keys_and_auth_keys(pair):
    lab_pair(pair, esp="aes256-sha256")
    res = initiate(pair, "a", "net")
    assert res.ok and res.proposal == "ESP:AES_CBC_256/HMAC_SHA2_256_128/NO_EXT_SEQ"
    (out_a,) = [s for s in pair.engines["a"].snapshot() if s["direction"] == "out"]
    (in_b,) = [s for s in pair.engines["b"].snapshot() if s["direction"] == "in"]
    assert out_a["cipher"] == "aes-cbc-hmac-sha256" and len(bytes.fromhex(out_a["auth_key"])) == 32
    assert (out_a["enc_key"], out_a["auth_key"]) == (in_b["enc_key"], in_b["auth_key"])


def six_children(pair: IkePair, own_ids: bool) -> None:
    """The 002 page: the lab connection, then one with six children by TCP port."""
    ids_a = ("many-a@lab", "many-b@lab") if own_ids else (None, None)
    ids_b = ("many-b@lab", "many-a@lab") if own_ids else (None, None)
    ports = range(5201, 5207)
    a = conf("lab", A4, B4, {"net": ("10.1.0.0/24", "10.2.0.0/24")}) + conf(
        "many", A4, B4, {f"many-p{p}": (f"{LAN_A4}[tcp]", f"{LAN_B4}[tcp/{p}]") for p in ports},
        local_id=ids_a[0], remote_id=ids_a[1])
    b = conf("lab", B4, A4, {"net": ("10.2.0.0/24", "10.1.0.0/24")}) + conf(
        "many", B4, A4, {f"many-p{p}": (f"{LAN_B4}[tcp/{p}]", f"{LAN_A4}[tcp]") for p in ports},
        local_id=ids_b[0], remote_id=ids_b[1])
    load(pair, "a", a)
    load(pair, "b", b)


@pytest.mark.parametrize("lab_up_first", [True, False])
def test_002_first_try_children_with_the_lab_identities_are_refused(pair, lab_up_first):
    six_children(pair, own_ids=False)
    if lab_up_first:
        assert initiate(pair, "a", "net").ok
    outcomes = [initiate(pair, "a", f"many-p{p}") for p in range(5201, 5207)]
    assert [o.outcome.value for o in outcomes] == ["TS_UNACCEPTABLE"] * 6
    if lab_up_first:  # strongSwan reuses the lab IKE_SA: CREATE_CHILD_SA carries the refusal
        assert all(any("CREATE_CHILD_SA" in l.message for l in o.log) for o in outcomes)
    n_lab = 2 if lab_up_first else 0
    assert len(pair.engines["a"].snapshot()) == n_lab and len(pair.engines["b"].snapshot()) == n_lab


def test_002_with_identities_of_their_own_six_of_six(pair):
    six_children(pair, own_ids=True)
    assert initiate(pair, "a", "net").ok
    outcomes = [initiate(pair, "a", f"many-p{p}") for p in range(5201, 5207)]
    assert [o.outcome.value for o in outcomes] == ["ESTABLISHED"] * 6
    for h in "ab":
        many = [s for s in pair.engines[h].snapshot() if s["conn"] == "many"]
        assert len(many) == 12
        assert len({s["spi"] for s in many}) == 12
    # the responder narrowed each child to its own port
    b_sel = sorted(s["local_ts"][0] for s in pair.engines["b"].snapshot()
                   if s["conn"] == "many" and s["direction"] == "in")
    assert b_sel == [f"{LAN_B4}[tcp/{p}]" for p in range(5201, 5207)]
    listing = swanctl_list_sas.parse(pair.swanctl("a", "--list-sas").stdout)
    assert sorted(ike.name for ike in listing.ike_sas) == ["lab", "many"]
    many = next(ike for ike in listing.ike_sas if ike.name == "many")
    assert many.local_id == "many-a@lab" and many.remote_id == "many-b@lab" and len(many.children) == 6


def test_no_proposal_chosen_ike_and_esp(pair):
    lab_pair(pair, prop_b="aes256-sha256-modp2048")
    res = initiate(pair, "a", "net")
    assert res.outcome.value == "NO_PROPOSAL_CHOSEN" and res.status == 1
    assert "[ENC] parsed IKE_SA_INIT response 0 [ N(NO_PROP) ]" in [f"[{l.group}] {l.message}" for l in res.log]
    lab_pair(pair, esp="aes256gcm16", esp_b="aes256-sha256")
    res = initiate(pair, "a", "net")
    assert res.outcome.value == "NO_PROPOSAL_CHOSEN"
    assert any(l.message == "failed to establish CHILD_SA, keeping IKE_SA" for l in res.log)
    assert pair.engines["a"].snapshot() == [] and pair.engines["b"].snapshot() == []


def test_wrong_psk_authentication_failed(pair):
    lab_pair(pair, psk_b="0x00112233")
    res = initiate(pair, "a", "net")
    assert res.outcome.value == "AUTHENTICATION_FAILED" and res.status == 1
    assert "MAC mismatched" in (pair.dirs["b"] / "ike.log").read_text()
    assert "c2VjcmV0" not in (pair.dirs["b"] / "ike.log").read_text()
    assert pair.engines["a"].snapshot() == [] and pair.swanctl("a", "--list-sas").stdout == ""


def test_unreachable_peer_times_out_fast(pair):
    lab_pair(pair)
    (pair.dirs["b"] / "faults.json").write_text(json.dumps({"peer_unreachable": {}}))
    t = time.monotonic()
    res = initiate(pair, "a", "net")
    elapsed = time.monotonic() - t
    assert res.outcome.value == "TIMEOUT" and res.retransmits == 5
    assert elapsed < 6, elapsed
    (pair.dirs["b"] / "faults.json").write_text("{}")
    assert initiate(pair, "a", "net").ok


def test_child_never_up_fault_and_initiate_timeout(pair):
    six_children(pair, own_ids=True)
    (pair.dirs["b"] / "faults.json").write_text(json.dumps({"child_never_up": {"child": "many-p5203"}}))
    ok = [initiate(pair, "a", f"many-p{p}").outcome.value for p in (5201, 5202, 5203, 5204)]
    assert ok == ["ESTABLISHED", "ESTABLISHED", "TIMEOUT", "ESTABLISHED"]
    res = initiate(pair, "a", "many-p5203", "--timeout", "0.3")
    assert res.outcome.value == "TIMEOUT" and res.timeout_ms == 300
    assert not any(s["child"] == "many-p5203" for h in "ab" for s in pair.engines[h].snapshot())


def test_list_sas_spis_and_rekey_replaces_sas(pair):
    lab_pair(pair)
    res = initiate(pair, "a", "net")
    la = swanctl_list_sas.parse(pair.swanctl("a", "--list-sas").stdout)
    lb = swanctl_list_sas.parse(pair.swanctl("b", "--list-sas").stdout)
    (ike_a,), (ike_b,) = la.ike_sas, lb.ike_sas
    assert ike_a.initiator and not ike_b.initiator and ike_a.initiator_spi == ike_b.initiator_spi
    (ca,), (cb,) = ike_a.children, ike_b.children
    assert (ca.spi_in, ca.spi_out) == (res.spi_in, res.spi_out) == (cb.spi_out, cb.spi_in)
    assert ca.proposal == "AES_GCM_16-256" and ca.local_ts == (LAN_A4,) and cb.local_ts == (LAN_B4,)
    old = {s["spi"] for h in "ab" for s in pair.engines[h].snapshot()}
    r = pair.swanctl("a", "--rekey", "--child", "net")
    assert r.returncode == 0 and r.stdout.endswith("rekey completed successfully\n"), r.stderr
    rekey_settled(pair, 2)
    new_a, new_b = pair.engines["a"].snapshot(), pair.engines["b"].snapshot()
    assert len(new_a) == 2 and len(new_b) == 2
    assert not ({s["spi"] for s in new_a + new_b} & old)
    (ca2,) = swanctl_list_sas.parse(pair.swanctl("a", "--list-sas").stdout).ike_sas[0].children
    assert ca2.spi_in == f"{next(s for s in new_a if s['direction'] == 'in')['spi']:08x}"
    # the install order kept traffic flowing: new SAs were added before old ones were deleted
    calls = [c for c in pair.engines["a"].calls if c["op"] in ("add_sa", "del_sa")]
    first_del = next(i for i, c in enumerate(calls) if c["op"] == "del_sa")
    assert [c["op"] for c in calls[:first_del]] == ["add_sa"] * 4
    raw = pair.swanctl("a", "--list-sas", "--raw").stdout.splitlines()
    assert re.match(r"list-sa event \{lab \{uniqueid=[0-9]+ version=2 state=ESTABLISHED local-host=192\.0\.2\.1 ",
                    raw[0]), raw[0]
    assert f"spi-in={ca2.spi_in}" in raw[0] and raw[-1] == "list-sas reply {}"


def test_terminate_child_and_unknown_config(pair):
    lab_pair(pair)
    assert initiate(pair, "a", "net").ok
    r = pair.swanctl("b", "--terminate", "--child", "net")
    assert r.returncode == 0, r.stderr
    assert pair.engines["a"].snapshot() == [] and pair.engines["b"].snapshot() == []
    r = pair.swanctl("b", "--terminate", "--child", "net")
    assert r.returncode == 1 and r.stderr == "terminate failed: no matching SAs to terminate found\n"
    res = initiate(pair, "a", "nope")
    assert res.outcome.value == "CONFIG_NOT_FOUND" and res.error == "CHILD_SA config 'nope' not found"


def test_load_all_outputs(pair):
    path = "/usr/local/etc/swanctl/swanctl.conf"
    r = pair.swanctl("a", "--load-all", "--noprompt")  # no file at all: as 5.9.8, measured
    assert r.returncode == 0 and r.stderr.splitlines() == [
        f"no files found matching '{path}'", f"failed to open config file '{path}'"]
    assert r.stdout.splitlines() == ["no authorities found, 0 unloaded", "no pools found, 0 unloaded",
                                     "no connections found, 0 unloaded"]
    pair.write_conf("a", "connections {\n  a {\n    version = 2\n    foo bar\n  }\n}\n")
    r = pair.swanctl("a", "--load-all", "--noprompt")
    path = "/usr/local/etc/swanctl/swanctl.conf"
    assert r.returncode == 0  # as 5.9.8: an invalid file loads nothing and exits 0
    assert r.stderr.splitlines()[:2] == [
        f"{path}:4: syntax error, unexpected NAME, expecting : or '{{' or '='",
        f"invalid config file '{path}'"]
    assert r.stdout.splitlines()[-1] == "no connections found, 0 unloaded"
    good = conf("lab", A4, B4, {"net": ("10.1.0.0/24", "10.2.0.0/24")})
    pair.write_conf("a", good
                    + "connections {\n  bad {\n    children {\n      c {\n        esp_proposals = bogus\n"
                      "      }\n    }\n  }\n}\n")
    r = pair.swanctl("a", "--load-all", "--noprompt")
    assert r.returncode == 22
    assert "loading connection 'bad' failed: invalid value for: esp_proposals, config discarded" in r.stderr
    line = good.count("\n") + 5
    assert f"{path}:{line}: invalid value for: esp_proposals (connection 'bad')" in r.stderr.splitlines()
    assert r.stderr.splitlines()[-1] == "loaded 1 of 2 connections, 1 failed to load, 0 unloaded"
    assert r.stdout.splitlines() == ["loaded ike secret 'ike-lab'", "no authorities found, 0 unloaded",
                                     "no pools found, 0 unloaded", "loaded connection 'lab'"]
    conns = pair.swanctl("a", "--list-conns").stdout
    assert conns.startswith("lab: IKEv2, no reauthentication, rekeying every 14400s\n  local:  192.0.2.1\n")
    pair.write_conf("a", "connections {\n}\n")
    r = pair.swanctl("a", "--load-all")
    assert r.stdout.splitlines()[-1] == "no connections found, 1 unloaded"


def test_daemon_down_is_charon_down(pair):
    pair.stop_daemon("a")
    r = pair.swanctl("a", "--initiate", "--child", "net")
    assert r.returncode in (2, 111)
    assert r.stderr.splitlines()[1].startswith("Error: connecting to 'default' URI failed: ")


def test_boot_loads_swanctl_conf_and_honours_start_action(pair):
    """A reboot: the daemon restarts, SAs are gone, swanctl.conf is loaded and started."""
    a = conf("lab", A4, B4, {"net": ("10.1.0.0/24", "10.2.0.0/24")}, start_action="start")
    load(pair, "b", conf("lab", B4, A4, {"net": ("10.2.0.0/24", "10.1.0.0/24")}))
    pair.write_conf("a", a)
    pair.stop_daemon("a")
    pair.start_daemon("a")
    deadline = time.time() + 15
    while time.time() < deadline and (len(pair.engines["a"].snapshot()) < 2 or len(pair.engines["b"].snapshot()) < 2):
        time.sleep(0.05)
    assert len(pair.engines["a"].snapshot()) == 2 and len(pair.engines["b"].snapshot()) == 2
    (ike,) = swanctl_list_sas.parse(pair.swanctl("a", "--list-sas").stdout).ike_sas
    assert ike.name == "lab" and ike.children[0].state == "INSTALLED"


def test_responder_reuses_the_ike_sa_for_a_child_of_its_own(pair):
    """Either end may add children to an established IKE_SA (CREATE_CHILD_SA from the responder)."""
    load(pair, "a", conf("lab", A4, B4, {"net": (LAN_A4, LAN_B4), "net6": (LAN_A6, LAN_B6)}))
    load(pair, "b", conf("lab", B4, A4, {"net": (LAN_B4, LAN_A4), "net6": (LAN_B6, LAN_A6)}))
    assert initiate(pair, "a", "net").ok
    res = initiate(pair, "b", "net6")
    assert res.ok, res
    assert not any("initiating IKE_SA" in l.message for l in res.log)
    assert any(l.message.startswith("parsed CREATE_CHILD_SA response") for l in res.log)
    (ike_a,) = swanctl_list_sas.parse(pair.swanctl("a", "--list-sas").stdout).ike_sas
    assert sorted(c.name for c in ike_a.children) == ["net", "net6"]
    assert ike_a.children[1].local_ts == (LAN_A6,)
    r = pair.swanctl("a", "--rekey", "--child", "net6")
    assert r.stdout == "rekey completed successfully\n", r.stdout + r.stderr
    rekey_settled(pair, 4)
    assert len(pair.engines["a"].snapshot()) == 4 and len(pair.engines["b"].snapshot()) == 4


def test_list_conns_matches_strongswan_5_9_8(pair):
    """list_conns_sample.txt is real 5.9.8 output (Debian charon) for list_conns_sample.conf."""
    here = Path(__file__).parent
    load(pair, "a", (here / "list_conns_sample.conf").read_text())
    assert pair.swanctl("a", "--list-conns").stdout == (here / "list_conns_sample.txt").read_text()


def test_peer_reboot_stale_ike_sa_is_replaced(pair):
    """After the peer restarts: its own initiate replaces our stale IKE_SA (INITIAL_CONTACT);
    our initiate over the stale IKE_SA times out and deletes it (as strongSwan), the next works."""
    lab_pair(pair)
    assert initiate(pair, "a", "net").ok
    b_conf = pair.dirs["b"] / "root/usr/local/etc/swanctl/swanctl.conf"
    pair.stop_daemon("b")
    pair.engines["b"].sas.clear()
    pair.start_daemon("b")  # boot: loads swanctl.conf (start_action none)
    assert b_conf.exists()
    res = initiate(pair, "b", "net")
    assert res.ok, res
    assert len(pair.engines["a"].snapshot()) == 2  # the stale pair is gone
    (ike_a,) = swanctl_list_sas.parse(pair.swanctl("a", "--list-sas").stdout).ike_sas
    assert not ike_a.initiator
    pair.stop_daemon("b")
    pair.engines["b"].sas.clear()
    pair.start_daemon("b")
    res = initiate(pair, "a", "net")
    assert res.outcome.value == "TIMEOUT"
    assert pair.engines["a"].snapshot() == [] and pair.swanctl("a", "--list-sas").stdout == ""
    assert initiate(pair, "a", "net").ok
    assert len(pair.engines["a"].snapshot()) == 2 and len(pair.engines["b"].snapshot()) == 2


def test_initiate_ike_only_then_children_reuse_it(pair):
    lab_pair(pair)
    r = pair.swanctl("a", "--initiate", "--ike", "lab")
    assert r.returncode == 0 and r.stdout.endswith("initiate completed successfully\n"), r.stdout + r.stderr
    assert "[ENC] parsed IKE_AUTH response 1 [ IDr AUTH N(MOBIKE_SUP) N(ADD_4_ADDR) ]" in r.stdout
    (ike,) = swanctl_list_sas.parse(pair.swanctl("a", "--list-sas").stdout).ike_sas
    assert ike.children == () and pair.engines["a"].snapshot() == []
    res = initiate(pair, "a", "net")
    assert res.ok and any(l.message.startswith("parsed CREATE_CHILD_SA") for l in res.log)
    r = pair.swanctl("a", "--initiate", "--ike", "nope")
    assert r.returncode == 1 and r.stderr == "initiate failed: IKE_SA config 'nope' not found\n"
