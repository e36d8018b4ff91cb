"""Behaviour of the parser API that golden files cannot show (helpers, repr, imports)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from plugin.lab.errors import LabError
from plugin.lab.parsers import MODULES, ParseError, iperf3, kldstat, netstat_esp, setkey, swanctl_list_sas, sysctl

from .golden import GOLDEN

PARSERS_DIR = Path(__file__).resolve().parents[2] / "plugin" / "lab" / "parsers"


def test_every_module_exists_and_parse_is_callable() -> None:
    import importlib

    for name in MODULES:
        assert callable(importlib.import_module(f"plugin.lab.parsers.{name}").parse), name
    on_disk = {p.stem for p in PARSERS_DIR.glob("*.py") if not p.stem.startswith("_")}
    assert on_disk == set(MODULES), "MODULES and the modules on disk differ"


def test_parsers_import_neither_paramiko_nor_pytest() -> None:
    code = ("import sys, importlib\n"
            f"for m in {list(MODULES)!r}: importlib.import_module('plugin.lab.parsers.' + m)\n"
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
    cbc = setkey.parse((GOLDEN / "setkey" / "cbc-natt.txt").read_text()).entries[0]
    assert cbc.cipher == "aes-cbc-hmac-sha256" and len(bytes.fromhex(cbc.auth_key or "")) == 32


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
