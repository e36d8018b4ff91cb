"""ipsec_hil.lab.driver against the virtual lab: the twin's kldload "becomes" the file it loads.

One lab (engine + sshd only) for the module. Each test deploys a fake module (random bytes
with a readable tag) to dut3300 and checks what issue 7 asks: md5 verified on the
appliance, kldstat lists it, a module whose bytes carry the twin's unresolved-symbol marker
is refused (kldload's ENOEXEC text, dmesg's link_elf line) and the previous module is back
byte-identical, loaded, afterwards.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ipsec_hil.lab import files
from ipsec_hil.lab.appliance import Appliance
from ipsec_hil.lab.driver import DRIVER_JOURNAL_DIR, DriverDeployment, DriverError, recover_driver
from tests.lab_factory import TestLab, lab_fixture

pytestmark = pytest.mark.needs_root


lab = lab_fixture(components=("engine", "sshd"))


def _root_file(lab: TestLab, host: str, path: str) -> Path:
    return lab.root(host) / path.lstrip("/")


def _dut_module(lab: TestLab) -> tuple[Appliance, Path, bytes]:
    """The DUT, its driver module's file in the lab and that file's bytes before the test."""
    dut = lab.apps["dut3300"]
    mod_path = _root_file(lab, "dut3300", dut.profile.module_file)
    return dut, mod_path, mod_path.read_bytes()


def _fake_module(tmp_path: Path, tag: str, extra: bytes = b"") -> Path:
    p = tmp_path / f"{tag}.ko"
    p.write_bytes(b"\x7fELF fake module " + tag.encode() + b"\n" + extra + os.urandom(4096))
    return p



def test_deploy_loads_the_build_and_restore_puts_the_old_one_back(lab, tmp_path):
    dut, mod_path, original = _dut_module(lab)
    before = dut.module_info()
    assert before.loaded and before.md5 == hashlib.md5(original).hexdigest()
    fake = _fake_module(tmp_path, "build-under-test")
    dep = DriverDeployment(dut, fake, run_id="gate-test")
    res = dep.deploy()
    want = hashlib.md5(fake.read_bytes()).hexdigest()
    assert res.deployed.md5 == want and res.deployed.size == fake.stat().st_size and res.deployed.loaded
    assert res.previous.md5 == before.md5
    info = dut.module_info()
    assert info.loaded and info.md5 == want
    assert any("build md5 " + want[:8] in line for line in res.kernel_log), res.kernel_log
    # the journal holds the previous file until restore
    assert [b.path for b in files.pending(dut.host, DRIVER_JOURNAL_DIR)] == [dut.profile.module_file]
    assert not [b for b in files.pending(dut.host) if b.path == dut.profile.module_file]  # not the lab's journal
    dep.restore()
    assert mod_path.read_bytes() == original
    after = dut.module_info()
    assert after.loaded and after.md5 == before.md5 and after.size == before.size
    assert files.pending(dut.host, DRIVER_JOURNAL_DIR) == []
    dep.restore()  # idempotent


def test_unresolved_symbol_is_refused_and_the_old_module_stays(lab, tmp_path):
    dut, mod_path, original = _dut_module(lab)
    fake = _fake_module(tmp_path, "wrong-kernel", b"twin-unresolved-symbol=crypto_dispatch_async\n")
    dep = DriverDeployment(dut, fake, run_id="gate-test")
    with pytest.raises(DriverError) as ei:
        dep.deploy()
    msg = str(ei.value)
    assert "kldload failed" in msg and "Please check dmesg(8)" in msg
    assert "link_elf_obj: symbol crypto_dispatch_async undefined" in msg
    assert mod_path.read_bytes() == original
    info = dut.module_info()
    assert info.loaded and info.md5 == hashlib.md5(original).hexdigest()
    assert files.pending(dut.host, DRIVER_JOURNAL_DIR) == []


class _CorruptingHost:
    """The appliance's real SSH host, except uploads lose their last byte (a truncated copy)."""

    def __init__(self, host):
        self._h = host

    def write_file_atomic(self, path, data, mode=0o644):
        return self._h.write_file_atomic(path, data[:-1], mode)

    def __getattr__(self, name):
        return getattr(self._h, name)


def test_md5_mismatch_is_detected_before_loading(lab, tmp_path):
    dut, mod_path, original = _dut_module(lab)
    bad = Appliance(dut.name, _CorruptingHost(dut.host), dut.profile)
    fake = _fake_module(tmp_path, "truncated")
    dep = DriverDeployment(bad, fake, run_id="gate-test")
    with pytest.raises(DriverError, match=r"md5 on the appliance is [0-9a-f]{32}, the local file .* has [0-9a-f]{32}"):
        dep.deploy()
    assert not any("kldload" in s for s in dep.steps[:-1] if "restored" not in s)
    assert mod_path.read_bytes() == original
    assert dut.module_info().loaded


def test_a_crashed_run_is_recovered_and_reloaded(lab, tmp_path):
    dut, mod_path, original = _dut_module(lab)
    fake = _fake_module(tmp_path, "crashed-run")
    dep = DriverDeployment(dut, fake, run_id="gate-test-crash")
    dep.deploy()
    # the run "dies" here: no restore(); the next run recovers from the appliance's journal.
    # (Its lease, which a dead run's next run takes over -- tests/gate/test_dead_driver_run.py
    # -- is given up here: this process lives on, and a lease it kept renewing would hold the
    # appliance's driver for good.)
    dep.abandon()
    assert dut.module_info().md5 == hashlib.md5(fake.read_bytes()).hexdigest()
    done = recover_driver(dut)
    assert any(line.endswith("reloaded the restored module") for line in done)
    assert mod_path.read_bytes() == original
    info = dut.module_info()
    assert info.loaded and info.md5 == hashlib.md5(original).hexdigest()


def test_missing_local_file_is_a_clear_error(lab, tmp_path):
    dut = lab.apps["dut3300"]
    with pytest.raises(DriverError, match=r"no such file"):
        DriverDeployment(dut, tmp_path / "nope.ko").deploy()
    assert files.pending(dut.host, DRIVER_JOURNAL_DIR) == []


def test_keep_leaves_the_build_loaded_and_the_previous_file_beside_it(lab, tmp_path):
    dut, mod_path, original = _dut_module(lab)
    fake = _fake_module(tmp_path, "kept-build")
    dep = DriverDeployment(dut, fake, run_id="gate-test-keep")
    dep.deploy()
    kept = dep.keep()
    assert kept == dut.profile.module_file + ".previous"
    assert _root_file(lab, "dut3300", kept).read_bytes() == original
    assert files.pending(dut.host, DRIVER_JOURNAL_DIR) == []  # the next run must not undo the choice
    assert dut.module_info().md5 == hashlib.md5(fake.read_bytes()).hexdigest()
    # put the original back for the other tests, as an operator would: deploy the kept file
    back = tmp_path / "previous.ko"
    back.write_bytes(original)
    again = DriverDeployment(dut, back, run_id="gate-test-keep")
    again.deploy()  # its journal entry: the fake
    again.abandon()  # its lease (its journal entry is dropped below)
    dut.host.remove(kept)
    for b in files.pending(dut.host, DRIVER_JOURNAL_DIR):
        files.discard(dut.host, b)
    assert mod_path.read_bytes() == original and dut.module_info().loaded
