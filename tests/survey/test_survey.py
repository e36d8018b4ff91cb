"""The survey of a lab (issue 43) on the virtual lab: bundle, masked keys, table, profile
proposal, golden round trip, and the lease.

One lab for the file, with the lab tunnel up (TunnelProvisioner, as the suite brings it
up) while the bundle is taken, so ``setkey -D`` holds real keys to mask and the ESP-gate
pings have an SA to go through. The survey itself brings nothing up and changes nothing.

The lab is topologies/virtual-releases.yaml: its appliances run each FreeBSD the suite
meets (the DUT 15.1 with the IPsec offload framework, the peer 14.3, the XGS 136 14.1), so
one survey reads every release's formats and the table says which release each runs.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ipsec_hil.lab.expectations import esp_math
from ipsec_hil.lab.expectations.profiles_file import load_profiles_file
from ipsec_hil.lab.parsers import setkey as setkey_parser
from ipsec_hil.lab.provision import Secret, TunnelPlan, TunnelProvisioner
from ipsec_hil.lab.remote import host_from_mgmt
from ipsec_hil.lab.sharing.lock import ApplianceLock
from ipsec_hil.lab.survey import golden, render, survey
from ipsec_hil.lab.survey.mask import mask_setkey
from ipsec_hil.lab.survey.reads import appliance_reads, bench_reads
from ipsec_hil.lab.expectations.hardware import host_profile
from ipsec_hil.lab.topology import TunnelConfig
from tests.lab_factory import REPO, lab_fixture, subprocess_env
from tests.parsers.golden import GOLDEN, load_case, normalise
from tests.safety.test_secrets import forms

pytestmark = pytest.mark.needs_root

RELEASES_LAB = REPO / "topologies" / "virtual-releases.yaml"
lab = lab_fixture(topology=RELEASES_LAB)

#: what the twin does not answer as FreeBSD/OPNsense would: the only reads allowed to fail
#: on a healthy virtual lab (none since the twin prints every release's versions and
#: netstat -s -p ip/ip6)
TWIN_GAPS: set[str] = set()
#: FreeBSD / OPNsense of each appliance of RELEASES_LAB (its `os:` blocks), and which run
#: the offload framework's kernel
RELEASE_OF = {"dut3300": ("15.1", "26.7"), "peer3300": ("14.3", "26.1"), "xgs136": ("14.1", "24.7")}


def appliance_state(lab) -> dict[str, bytes]:
    """What a configuration change would touch on the emulated appliances: their file
    systems (swanctl.conf, modules, loader.conf), written sysctls, module state, faults and
    the engine's SA journal -- not the logs, and not the lease file (taken and released)."""
    out = {}
    for host in ("dut3300", "peer3300", "xgs136"):
        hd = lab.run_dir / "hosts" / host
        files = [hd / n for n in ("state.json", "sysctl.json", "faults.json", "engine.sas.jsonl")]
        files += [p for p in (hd / "root").rglob("*") if p.is_file() and "ipsec-hil/run.lock" not in str(p)]
        out.update({str(p.relative_to(lab.run_dir)): p.read_bytes() for p in files if p.exists()})
    return out


@dataclass(frozen=True)
class Surveyed:
    """The bundle, the run of the command, what it changed; the ESP keys the appliances held
    (kept out of repr: a failing assertion must not print them)."""

    out: Path
    run: subprocess.CompletedProcess
    changed: list[str]
    keys: set[str] = field(repr=False)


@pytest.fixture(scope="module")
def surveyed(lab, tmp_path_factory):
    """The lab tunnel up (AES-GCM, IPv4 in IPv4), its keys read through the suite's
    Appliance, then ``python -m ipsec_hil.lab.survey`` as a user runs it; the appliances'
    state before and after it."""
    out = tmp_path_factory.mktemp("survey") / "bundle"
    plan = TunnelPlan.from_topology(lab.topo, "lab")
    prov = TunnelProvisioner(lab.apps, plan, TunnelConfig("ipv4", "ipv4", "aes-gcm-16"),
                             Secret(secrets.token_hex(16)), run_id="survey-test")
    with prov as bu:
        assert bu.all_up
        keys = {e.enc_key for h in ("dut3300", "peer3300") for e in lab.apps[h].setkey_sas().entries}
        before = appliance_state(lab)
        r = subprocess.run([sys.executable, "-m", "ipsec_hil.lab.survey", str(lab.resolved), "--out", str(out)],
                           capture_output=True, text=True, timeout=120, env=subprocess_env(), cwd=REPO)
        after = appliance_state(lab)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return Surveyed(out, r, changed, keys)


def test_survey_changes_nothing_on_the_appliances(surveyed):
    assert surveyed.changed == [], f"the survey changed {surveyed.changed}"


def test_bundle_has_every_read_masked_and_parsed(lab, surveyed):
    out, keys, r = surveyed.out, surveyed.keys, surveyed.run
    manifest = json.loads((out / "survey.json").read_text())
    assert set(manifest["hosts"]) == set(lab.topo.hosts), r.stdout + r.stderr
    for host, h in lab.topo.hosts.items():
        expected = appliance_reads(lab.topo, host) if h.is_appliance else bench_reads()
        got = {x["name"]: x for x in manifest["hosts"][host]["reads"]}
        assert {e.name for e in expected} <= set(got), f"{host}: reads missing from the bundle"
        for name, x in got.items():
            for suffix in (".txt", ".stderr", ".status"):
                assert (out / host / (name + suffix)).exists(), f"{host}/{name}{suffix}"
            if x["state"] == "parsed":
                assert json.loads((out / host / f"{name}.parsed.json").read_text()) is not None
            elif x["state"] == "not parsed":
                assert (out / host / f"{name}.error").read_text().strip()
            else:  # raw or failed: no parser, or no answer
                assert x["parser"] is None or x["state"] == "failed"
        failed = {n for n, x in got.items() if x["state"] not in ("parsed", "raw")}
        assert failed <= TWIN_GAPS, f"{host}: reads the twin should answer did not parse: {failed - TWIN_GAPS}"
    # keys: read independently through the suite, present in the run, absent from every file
    assert len(keys) >= 2 and all(keys)
    sad = setkey_parser.parse((out / "dut3300" / "setkey-D.txt").read_text())
    assert sad.entries and all(e.enc_key and set(e.enc_key) == {"0"} for e in sad.entries)  # masked, still parses
    needles = {f for k in keys for f in forms(secret_hex=k)}
    leaks = [str(p) for p in out.rglob("*") if p.is_file() for n in needles if n in p.read_bytes()]
    assert leaks == [], f"ESP key material in {sorted(set(leaks))}"


def test_table_says_what_parsed_the_counters_the_offload_and_the_gates(lab, surveyed):
    out, r = surveyed.out, surveyed.run
    manifest = json.loads((out / "survey.json").read_text())
    failed = [x for h in manifest["hosts"].values() for x in h["reads"] if x["state"] not in ("parsed", "raw")]
    assert r.returncode == (4 if failed else 0) == manifest["exit_status"], r.stdout + r.stderr
    table = r.stdout
    for host in ("dut3300", "peer3300", "xgs136"):
        assert manifest["hosts"][host]["counters"]["missing"] == {}
        assert manifest["hosts"][host]["counters"]["unknown"] == {}
        rows = [l for l in table.splitlines() if l.startswith(host + " ")]
        assert any("counters (" in l and "profile matched" in l for l in rows), rows
        freebsd, opnsense = RELEASE_OF[host]
        release = manifest["hosts"][host]["release"]
        assert release.startswith(f"FreeBSD {freebsd}-RELEASE") and f"OPNsense {opnsense}." in release, release
        assert any(" release " in l and " read " in l and release in l for l in rows), rows
        framework = "present" if freebsd == "15.1" else "absent"
        assert any("ipsec offload framework" in l and f" {framework} " in l for l in rows), (host, rows)
        for x in manifest["hosts"][host]["reads"]:
            assert any(l.split()[1] == x["name"] and x["state"].upper() in l.upper() for l in rows), x["name"]
    for x in failed:
        assert f"status {x['status']}" in table  # a failed read names its status and stderr
    assert not (out / "proposed-profiles.yaml").exists()
    # the own-largest ping of the tunnel that is up (ESP arithmetic) passes, one byte more is refused
    data = esp_math.ping_data_for_inner(esp_math.max_inner("aes-gcm-16", "ipv4", 1500), "ipv4")
    ok = json.loads((out / "dut3300" / f"ping-198.51.100.65-{data}.parsed.json").read_text())
    big = json.loads((out / "dut3300" / f"ping-198.51.100.65-{data + 1}.parsed.json").read_text())
    assert data == 1418 and ok["received"] > 0 and big["received"] == 0 and big["emsgsize_count"] == 3
    iperf = [" ".join(l.split()) for l in table.splitlines() if l.startswith("bench ") and "iperf3-version" in l]
    assert iperf and iperf[0].startswith("bench iperf3-version RAW 'iperf 3.")  # a raw read shows its first line


def test_renamed_driver_counter_is_missing_unknown_and_proposed(lab, tmp_path):
    r = lab.twin("fault", "dut3300", "counter_renamed", "counter=tx_encrypt", "to=tx_encrypted")
    assert r.returncode == 0, r.stderr
    try:
        result = survey(lab.topo, tmp_path / "b")
    finally:
        lab.twin("fault", "dut3300", "counter_renamed", "--off")
    (dut,) = [h for h in result.hosts if h.host == "dut3300"]
    assert dut.diff.missing == {"tx_encrypt": "dev.octep.0.ipsec.tx_encrypt"}
    assert list(dut.diff.unknown) == ["dev.octep.0.ipsec.tx_encrypted"]
    assert [(p.logical, p.oid) for p in dut.diff.proposals] == [("tx_encrypt", "dev.octep.0.ipsec.tx_encrypted")]
    assert all(h.diff.matched for h in result.hosts if h.diff is not None and h.host != "dut3300")
    assert result.exit_status & 8
    table = render(result)
    rows = [" ".join(l.split()) for l in table.splitlines() if l.startswith("dut3300 ")]
    assert "dut3300 counters (xgs3300, octep) MISSING tx_encrypt: dev.octep.0.ipsec.tx_encrypt" in rows
    value = dut.diff.unknown["dev.octep.0.ipsec.tx_encrypted"]  # the engine's count, under its new name
    assert f"dut3300 counters (xgs3300, octep) UNKNOWN dev.octep.0.ipsec.tx_encrypted = {value} (no profile names it)" in rows
    assert ("dut3300 counters (xgs3300, octep) PROPOSED tx_encrypt: dev.octep.0.ipsec.tx_encrypt -> "
            "dev.octep.0.ipsec.tx_encrypted (name similarity 0.91)") in rows
    (model,) = load_profiles_file(result.proposed_profiles)
    assert model.model == "xgs3300_surveyed" and model.counters["tx_encrypt"] == "dev.octep.0.ipsec.tx_encrypted"
    assert {n: o for n, o in model.counters.items() if n != "tx_encrypt"} == \
        {n: o for n, o in host_profile(lab.topo.hosts["dut3300"]).counters.items() if n != "tx_encrypt"}
    assert model.roles == host_profile(lab.topo.hosts["dut3300"]).roles


def test_bundle_round_trips_into_golden_files(surveyed, tmp_path):
    out = surveyed.out
    written, skipped = golden.convert(out, tmp_path)
    manifest = json.loads((out / "survey.json").read_text())
    parsed = [x for h in manifest["hosts"].values() for x in h["reads"] if x["state"] in ("parsed", "not parsed")]
    assert len(written) == len(parsed) > 40 and skipped
    for txt in written:
        case = load_case(txt)
        assert case.command == txt.parent.name and (case.expected is not None or case.error)
        if case.error:
            with pytest.raises(Exception) as ei:
                case.call()
            assert case.error in str(ei.value)
        else:
            assert normalise(case.call()) == case.expected, txt
    with pytest.raises(FileExistsError):  # never overwrites a case
        golden.convert(out, tmp_path)


def test_masked_setkey_keeps_its_shape_and_loses_its_keys():
    """On the repository's golden setkey dumps (GCM and CBC+HMAC, continuation lines)."""
    cases = [load_case(p) for p in sorted((GOLDEN / "setkey").glob("*.txt"))]
    with_keys = [c for c in cases if c.expected and any(e.get("enc_key") for e in c.expected["entries"])]
    assert with_keys
    for c in with_keys:
        masked = setkey_parser.parse(mask_setkey(c.stdout))
        want = [{**e, "enc_key": e["enc_key"] and "0" * len(e["enc_key"]),
                 "auth_key": e["auth_key"] and "0" * len(e["auth_key"])} for e in c.expected["entries"]]
        assert normalise(masked)["entries"] == want, c.name
        assert len(mask_setkey(c.stdout).splitlines()) == len(c.stdout.splitlines())


def test_a_held_lease_is_not_surveyed_and_ours_is_released(lab, tmp_path):
    topo = lab.topo
    other = host_from_mgmt("xgs136", topo.hosts["xgs136"].mgmt, topo.lab.known_hosts)
    try:
        with ApplianceLock(other, "someone else: pytest -m xgs136", run_id="other-run"):
            result = survey(topo, tmp_path / "b")
        (x,) = [h for h in result.hosts if h.host == "xgs136"]
        assert "LockHeld" in x.error and "someone else" in x.error and not x.outcomes
        assert result.exit_status == 3 and "NOT SURVEYED" in render(result)
        assert not (tmp_path / "b" / "xgs136").exists()  # nothing read under someone else's lease
        for name in ("dut3300", "peer3300", "xgs136"):  # the survey's own leases are gone
            h = other if name == "xgs136" else lab.apps[name].host
            assert ApplianceLock(h, "check").status().holder is None, name
    finally:
        other.close()


class _Answers:
    """A host that answers each command with a fixed output (no lab: the parser's side)."""

    name = "fake"

    def __init__(self, answers: dict[str, tuple[str, str, int]]) -> None:
        self.answers = answers

    def run(self, script: str, timeout: float | None = None):
        from ipsec_hil.lab.remote.shell import RunResult

        out, err, status = self.answers[script]
        return RunResult(out, err, status, 0.0, self.name)


def test_an_output_the_parser_refuses_is_saved_with_its_first_unread_line(tmp_path):
    from ipsec_hil.lab.survey.reads import Read
    from ipsec_hil.lab.survey.run import HostSurvey, SurveyResult, run_read

    good = (GOLDEN / "setkey" / "gcm-pair.txt").read_text()
    lines = good.splitlines(keepends=True)
    assert lines[4].startswith("\tseq=")  # line 5: the first SA's state line, after the key's two lines
    garbled = "".join(lines[:4] + ["\tseq=0x00000000 replay=4 flags=0x00000000 state=fresh\n"] + lines[5:])
    read = Read("setkey-D", "setkey -D", "setkey", mask=True)
    o = run_read(_Answers({"setkey -D": (garbled, "", 0)}), "h1", read, tmp_path)
    assert o.state == "not parsed" and o.first_line.startswith("line 5: ") and "state=fresh" in o.first_line
    error = (tmp_path / "setkey-D.error").read_text()
    assert "setkey -D: line 5:" in error and "line 5: \tseq=0x00000000" in error
    assert not (tmp_path / "setkey-D.parsed.json").exists()
    saved = (tmp_path / "setkey-D.txt").read_text().splitlines()
    assert saved[2] == "\tE: aes-gcm-16  " + " ".join(["00000000"] * 8) and saved[3] == " 00000000"  # masked too
    result = SurveyResult(tmp_path, (HostSurvey("h1", "appliance", (o,)),))
    row = [" ".join(l.split()) for l in render(result).splitlines() if l.startswith("h1 ")]
    assert row[0] == "h1 setkey-D NOT PARSED setkey -D: line 5: \\tseq=0x00000000 replay=4 flags=0x00000000 state=fresh", row
    assert result.exit_status == 4


def test_bad_arguments_name_the_file_and_field(tmp_path, capsys):
    from ipsec_hil.lab.survey.__main__ import main

    assert main([str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "b")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    bad = tmp_path / "profiles.yaml"
    bad.write_text("models:\n  xgs9:\n    driver: Bad-Name\n    module_file: /boot/modules/x.ko\n"
                   "    counters: [a]\n    roles: {encrypted: [a], decrypted: [a]}\n")
    assert main([str(REPO / "topologies" / "virtual.yaml"), "--out", str(tmp_path / "b"), "--hil-profiles", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "profiles.yaml: models.xgs9.driver:" in err
    assert not (tmp_path / "b").exists()  # nothing surveyed
    assert golden.main([str(tmp_path / "no-bundle"), str(tmp_path / "g")]) == 1
    assert "no-bundle/survey.json: cannot read the survey manifest" in capsys.readouterr().err


def test_offload_framework_present_from_setkey_or_sysctl(tmp_path):
    """FreeBSD 15's framework, as the parsers read it (the twin's 15.1 is issue 43's other half)."""
    from ipsec_hil.lab.survey.reads import Read
    from ipsec_hil.lab.survey.run import offload_framework, run_read

    offl = (GOLDEN / "setkey" / "main-ipsec-offload.txt").read_text()
    plain = (GOLDEN / "setkey" / "gcm-pair.txt").read_text()
    unknown = ("", "sysctl: unknown oid 'net.inet.ipsec.offload'\n", 1)
    leaves = ("net.inet.ipsec.offload.verbose: 0\n", "", 0)
    sk = Read("setkey-D", "setkey -D", "setkey", mask=True)
    sc = Read("sysctl-ipsec-offload", "sysctl net.inet.ipsec.offload", "sysctl", unknown_oids=True)

    def seen(setkey_out: str, sysctl_out: tuple[str, str, int]) -> str:
        host = _Answers({"setkey -D": (setkey_out, "", 0), "sysctl net.inet.ipsec.offload": sysctl_out})
        return offload_framework({r.name: run_read(host, "h", r, tmp_path) for r in (sk, sc)})

    assert seen(offl, unknown) == "present ('hw offl' lines in setkey -D)"
    assert seen(plain, leaves) == "present (sysctl net.inet.ipsec.offload.*: 1 leaves)"
    assert seen(plain, unknown).startswith("absent (")
