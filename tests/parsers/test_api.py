"""Behaviour of the parser API that golden files cannot show (helpers, repr, imports)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.parsers import (
    MODULES, ParseError, iperf3, kldstat, netstat_esp, ping, setkey, setkey_spd, swanctl_list_sas, sysctl,
)
from ipsec_hil.lab.parsers import boottime, netstat_m, swanctl_list_sas_raw, vmstat_m, vmstat_z

from .golden import GOLDEN

PARSERS_DIR = Path(__file__).resolve().parents[2] / "plugin" / "ipsec_hil" / "lab" / "parsers"


def test_every_module_exists_and_parse_is_callable() -> None:
    import importlib

    for name in MODULES:
        assert callable(importlib.import_module(f"ipsec_hil.lab.parsers.{name}").parse), name
    on_disk = {p.stem for p in PARSERS_DIR.glob("*.py") if not p.stem.startswith("_")}
    assert on_disk == set(MODULES), "MODULES and the modules on disk differ"


def test_parsers_import_neither_paramiko_nor_pytest() -> None:
    code = ("import sys, importlib\n"
            f"for m in {list(MODULES)!r}: importlib.import_module('ipsec_hil.lab.parsers.' + m)\n"
            "bad = [m for m in ('paramiko', 'pytest', '_pytest') if m in sys.modules]\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_parse_error_names_command_line_and_quotes_it() -> None:
    with pytest.raises(ParseError) as info:
        kldstat.parse("Id Refs Address Size Name\n 1 2 nonsense\n")
    err = info.value
    assert isinstance(err, LabError)
    assert (err.command, err.line_no, err.line) == ("kldstat", 2, " 1 2 nonsense")
    assert str(err).startswith("kldstat: line 2: ") and "' 1 2 nonsense'" in str(err)


def test_esp_stats_as_dict_carries_canonical_and_freebsd_keys() -> None:
    stats = netstat_esp.parse((GOLDEN / "netstat_esp" / "fbsd14-json.txt").read_text())
    d = stats.as_dict()
    assert d["received_bytes"] == d["receieve-bytes"] == d["receive-bytes"] == 840
    assert d["dropped_bad_auth"] == d["dropped-bad-auth"] == 1
    assert d["histogram"] == {"aes-gcm-16": 20}


def test_not_loaded_is_not_zero() -> None:
    stats = netstat_esp.parse("")
    assert stats.loaded is False and stats.received_packets is None


def test_setkey_keys_never_in_repr() -> None:
    dump = setkey.parse((GOLDEN / "setkey" / "gcm-pair.txt").read_text())
    entry = dump.entries[0]
    assert entry.enc_key and entry.enc_key not in repr(dump) and entry.enc_key[:8] not in repr(entry)
    assert len(bytes.fromhex(entry.enc_key)) == 36  # AES-256 key + 4-byte salt (RFC 4106)
    assert entry.cipher == "aes-gcm-16"
    cbc = setkey.parse((GOLDEN / "setkey" / "rijndael-cbc-natt-before-14.txt").read_text()).entries[0]
    assert cbc.cipher == "aes-cbc-hmac-sha256" and len(bytes.fromhex(cbc.auth_key or "")) == 32


def test_setkey_aes_cbc_of_freebsd14_and_rijndael_cbc_name_the_same_cipher() -> None:
    fbsd14 = setkey.parse((GOLDEN / "setkey" / "fbsd14-aes-cbc-pair.txt").read_text()).entries
    older = setkey.parse((GOLDEN / "setkey" / "rijndael-cbc-natt-before-14.txt").read_text()).entries
    assert {e.enc_alg for e in fbsd14} == {"aes-cbc"} and older[0].enc_alg == "rijndael-cbc"
    assert {e.cipher for e in fbsd14 + older} == {"aes-cbc-hmac-sha256"}


def test_setkey_replay_is_bytes_and_the_window_is_eight_times_that() -> None:
    """strongSwan's 32-packet default: inbound `replay=4`, outbound `replay=0` (no window)."""
    inbound, outbound = setkey.parse((GOLDEN / "setkey" / "gcm-pair.txt").read_text()).entries
    assert (inbound.replay_bytes, inbound.replay_window_packets) == (4, 32)
    assert (outbound.replay_bytes, outbound.replay_window_packets) == (0, 0)
    wide = setkey.parse((GOLDEN / "setkey" / "main-ipsec-offload.txt").read_text()).entries[0]
    assert (wide.replay_bytes, wide.replay_window_packets) == (128, 1024)
    assert setkey.SadEntry(src="a", dst="b", satype="esp", mode="tunnel", spi=1, reqid=1, state="mature",
                           replay_bytes=8, seq=0, flags=0).replay_window_packets == 64


def test_setkey_offload_counters_present_or_none() -> None:
    inbound, outbound = setkey.parse((GOLDEN / "setkey" / "main-ipsec-offload.txt").read_text()).entries
    assert inbound.hw_offload_ifs == ("mce0",) and outbound.hw_offload_ifs == ("mce0", "mce1")
    assert (inbound.hw_offload_packets, inbound.hw_offload_bytes) == (9988, 15398464)
    assert (inbound.sw_offload_packets, inbound.sw_offload_bytes) == (12, 1536)
    assert outbound.hw_offload_use is None  # str_time's 20 blanks: never
    plain = setkey.parse((GOLDEN / "setkey" / "gcm-pair.txt").read_text()).entries[0]
    assert plain.hw_offload_ifs is None and plain.hw_offload_bytes is None and plain.sw_offload_packets is None


def test_setkey_spd_pairs_each_child_by_reqid() -> None:
    spd = setkey_spd.parse((GOLDEN / "setkey_spd" / "fbsd14-v4-six-tcp-children.txt").read_text())
    assert len(spd.policies) == 12 and len(spd.direction("in")) == len(spd.direction("out")) == 6
    for reqid, port in zip(range(1, 7), range(5201, 5207)):
        out, = [p for p in spd.by_reqid(reqid) if p.direction == "out"]
        in_, = [p for p in spd.by_reqid(reqid) if p.direction == "in"]
        assert (out.src_selector, out.dst_selector, out.upper) == ("10.77.0.0/24", "10.88.0.0/24", "tcp")
        assert (out.src_port, out.dst_port) == (None, port)
        assert (in_.src_port, in_.dst_port) == (port, None)
        assert (out.requests[0].tunnel_src, in_.requests[0].tunnel_src) == ("192.0.2.1", "192.0.2.2")
    assert setkey_spd.parse("No SPD entries.\n").policies == ()


def test_ping_keeps_the_resolved_name_and_the_pattern() -> None:
    named = ping.parse((GOLDEN / "ping" / "fbsd14-v4-hostname-handbook.txt").read_text())
    assert (named.host, named.target) == ("web.geo.FreeBSD.org", "147.28.184.45")
    v6 = ping.parse((GOLDEN / "ping" / "fbsd14-v6-canonname.txt").read_text())
    assert (v6.host, v6.target, v6.received) == ("mirror.sched.example.net", "2001:db8:3a00:42:3a::1", 4)
    assert ping.parse((GOLDEN / "ping" / "fbsd14-v4-pattern.txt").read_text()).pattern == "deadbeef"


def test_sysctl_helpers() -> None:
    values = sysctl.parse("a.b: 5\nc.d: x y\n")
    assert values.get_int("a.b") == 5 and values["c.d"] == "x y" and list(values) == ["a.b", "c.d"]
    with pytest.raises(TypeError):
        values.get_int("c.d")
    with pytest.raises(ValueError):
        sysctl.parse("1\n", mode="n")


def test_list_sas_child_lookup_and_iperf_ok() -> None:
    sas = swanctl_list_sas.parse((GOLDEN / "swanctl_list_sas" / "real-5.9.8.txt").read_text())
    (child,) = sas.child("net")
    assert (child.spi_in, child.bytes_out) == ("8a31efca", 44803683)
    refused = iperf3.parse((GOLDEN / "iperf3" / "connection-refused.txt").read_text())
    assert not refused.ok and refused.sent_bps is None


def test_health_parsers_text_and_json_agree_and_sum() -> None:
    """The two forms of each health command read the same numbers; the helpers add them up."""
    text = vmstat_z.parse((GOLDEN / "vmstat_z" / "fbsd14-text.txt").read_text())
    json_ = vmstat_z.parse((GOLDEN / "vmstat_z" / "fbsd14-json.txt").read_text())
    assert text.zones == json_.zones and (text.libxo_version, json_.libxo_version) == (None, "1")
    assert set(text.matching(("octep",))) == {"octep_sa_ctx", "octep_cmd"}
    doubled = vmstat_z.UmaZones(text.zones + text.zones[-3:-2]).by_name()["octep_sa_ctx"]
    assert (doubled.used, doubled.requests) == (8, 236)
    malloc = vmstat_m.parse((GOLDEN / "vmstat_m" / "fbsd14-text.txt").read_text())
    assert malloc.types == vmstat_m.parse((GOLDEN / "vmstat_m" / "fbsd14-json.txt").read_text()).types
    assert malloc.matching(("octep",))["octep"].memory_kib == 4098
    mbufs = netstat_m.parse((GOLDEN / "netstat_m" / "clusters-exhausted-with-sfbufs.txt").read_text())
    assert (mbufs.denied, mbufs.delayed, mbufs.nsfbufs) == (4228, 12, 6656)
    assert boottime.parse("{ sec = 5, usec = 7 } Thu Jan  1 00:00:05 1970\n").instant == (5, 7)


def test_list_sas_raw_timers_already_past_are_negative() -> None:
    """charon prints rekey-time as int64: right after an automatic rekey the DELETED child's
    is -1 (tests/twin_ike/list_sas_rekeyed_raw_sample.txt, a real 5.9.8 event line; the
    capture kept only the event, so the reply line that ends every --raw listing is added)."""
    event = (Path(__file__).resolve().parents[1] / "twin_ike" / "list_sas_rekeyed_raw_sample.txt").read_text()
    sas = swanctl_list_sas_raw.parse(event.rstrip("\n") + "\nlist-sas reply {}\n")
    old, new = sas.ike_sas[0].children
    assert (old.state, old.rekey_in, old.expires_in) == ("DELETED", -1, 33)
    assert (new.state, new.rekey_in) == ("INSTALLED", 5)


# ----------------------------------------------------------- the appliance answers in parser types

#: Appliance method -> the type its parser returns (what a test asserts on).
APPLIANCE_ANSWERS = {
    "ping": "ping.PingResult",
    "iperf3_client": "iperf3.IperfResult",
    "esp_stats": "netstat_esp.EspStats",
    "sysctl_get": "dict[str, sysctl.Value]",
    "sysctl_set": "tuple[sysctl.Value, sysctl.Value]",
    "swanctl_load": "swanctl_load.LoadResult",
    "swanctl_initiate": "swanctl_initiate.InitiateResult",
    "list_sas": "SaList",
    "setkey_sas": "setkey.SadDump",
    "setkey_policies": "setkey_spd.SpdDump",
    "route_get": "route_get.RouteGet | None",
    "interface": "ifconfig.Interface",
}


def test_appliance_answers_are_typed_by_their_parsers() -> None:
    """Each question's return type is its parser's, resolved from the module's own imports
    (a reader follows ``sysctl`` text to the value a test asserts on; no ``Any``)."""
    import typing

    from ipsec_hil.lab import appliance
    from ipsec_hil.lab.parsers import ifconfig, route_get, setkey_spd, swanctl_initiate, swanctl_load
    from ipsec_hil.lab.parsers._swan import SaList

    names = {"ping": ping, "iperf3": iperf3, "netstat_esp": netstat_esp, "sysctl": sysctl, "setkey": setkey,
             "setkey_spd": setkey_spd, "swanctl_load": swanctl_load, "swanctl_initiate": swanctl_initiate,
             "route_get": route_get, "ifconfig": ifconfig, "SaList": SaList}
    for method, expected in APPLIANCE_ANSWERS.items():
        got = typing.get_type_hints(getattr(appliance.Appliance, method))["return"]
        assert got == eval(expected, names), f"Appliance.{method} returns {got}, expected {expected}"
    assert typing.get_type_hints(appliance.ModuleInfo)["kldstat"] == kldstat.KldstatResult | None


def test_appliance_imports_its_parsers_by_name() -> None:
    """No parser looked up from a string inside the appliance's classes (``parser("sysctl")``
    hides from a reader and a type checker which module answers)."""
    import ast
    import inspect

    from ipsec_hil.lab import appliance

    tree = ast.parse(inspect.getsource(appliance))
    lookups = [f"line {n.lineno}: {ast.unparse(n)}" for cls in tree.body if isinstance(cls, ast.ClassDef)
               for n in ast.walk(cls) if isinstance(n, ast.Call)
               and getattr(n.func, "id", getattr(n.func, "attr", "")) in ("parser", "import_module")]
    assert not lookups, "parsers looked up by name in ipsec_hil/lab/appliance.py: " + "; ".join(lookups)
    answers = [n for cls in (appliance.Appliance, appliance.ShellCommands) for n, f in vars(cls).items()
               if callable(f) and not n.startswith("_") and "return" in getattr(f, "__annotations__", {})
               and f.__annotations__["return"] in ("Any", "Any | None")]
    assert not answers, f"Appliance methods typed Any: {answers}"
