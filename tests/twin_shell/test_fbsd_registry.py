"""ipsec_hil_twin.fbsd.COMMANDS is the one list of emulated commands: every module of the package is
a registered command or a declared helper, and the wrappers are exactly the registry's."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import ipsec_hil_twin.fbsd
from ipsec_hil_twin.fbsd import COMMANDS, HELPER_MODULES
from ipsec_hil_twin.fbsd.install import install_bin


def test_every_module_is_a_command_or_a_declared_helper():
    here = Path(ipsec_hil_twin.fbsd.__file__).parent
    modules = {p.stem for p in here.glob("*.py")} - {"__init__"}
    commands = {c.module.rsplit(".", 1)[1] for c in COMMANDS.values() if c.module.startswith("ipsec_hil_twin.fbsd.")}
    assert modules - commands - set(HELPER_MODULES) == set()
    assert set(HELPER_MODULES) <= modules and not commands & set(HELPER_MODULES)


def test_registered_modules_exist_and_wrappers_are_known():
    for name, cmd in COMMANDS.items():
        assert importlib.util.find_spec(cmd.module) is not None, name
        assert cmd.wrapper in ("stdlib", "full"), name


def test_install_writes_one_wrapper_per_command(tmp_path):
    written = install_bin(tmp_path)
    assert sorted(p.name for p in written) == sorted(COMMANDS)
    ping = (tmp_path / "bin" / "ping").read_text()
    assert ping.startswith("#!/usr/bin/perl\n") and "'-S', '-m', 'ipsec_hil_twin.fbsd.ping', @ARGV" in ping
    assert "'ipsec_hil_twin.ike.swanctl'" in (tmp_path / "bin" / "swanctl").read_text()
