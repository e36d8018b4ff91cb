"""The driver under test: put a built module on an appliance, load it, prove it loaded, and
put the previous one back.

Why each step (issue 7): a gate run must measure *the build it was given* and say so.
- upload over SFTP, atomically (``write_file_atomic``: the module file is never half
  written, even if the run dies mid-transfer);
- ``md5 -q`` on the appliance against the local file's md5 (a truncated or stale copy
  is caught before it is loaded);
- ``kldunload`` the running module, ``kldload`` the new file, then ``kldstat`` must list
  it and the kernel log's new lines (``dmesg``) must hold no ``link_elf`` /
  ``symbol ... undefined`` / ``unresolved symbol`` line (a module built against another
  kernel fails to link: kldload says only "Please check dmesg(8)", dmesg says which
  symbol);
- the previous file is backed up with :mod:`ipsec_hil.lab.files` (copy + journal entry on
  the appliance itself), so :meth:`DriverDeployment.restore` -- or, after a crash, the next
  run's :func:`recover_driver` -- puts it back byte-identical and loads it again.

Library code: no pytest. The caller holds the appliance lock around ``deploy``/``restore``.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ipsec_hil.lab import files
from ipsec_hil.lab.command import KLDLOAD, KLDUNLOAD
from ipsec_hil.lab.errors import LabError, ProvisionError, TransportError
from ipsec_hil.lab.parsers import dmesg as _dmesg, kldstat as _kldstat, md5 as _md5
from ipsec_hil.lab.sharing.lock import ApplianceLock, LockHeld

log = logging.getLogger(__name__)

#: kernel log lines that mean the module did not link
LINK_ERROR_RE = re.compile(r"link_elf|unresolved symbol|symbol \S+ undefined", re.IGNORECASE)

MODULE_MODE = 0o555  # FreeBSD installs modules r-xr-xr-x

#: The driver's backup lives in a journal of its own. Why not files.DEFAULT_JOURNAL_DIR:
#: the suite's ``lab`` fixture recovers that journal whenever it gets the appliance lock
#: (it takes unlocked entries for a dead run's), and the driver's backup must outlive the
#: lock for the whole run -- there it would be "recovered" mid-run, under the tests' feet.
#: This journal is recovered by :func:`recover_driver`: at the start of every run that
#: touches the appliance, with or without ``--driver`` (ipsec_hil.lab.dead_runs), and by
#: a deployment before its own backup.
DRIVER_JOURNAL_DIR = "/var/db/ipsec-hil/driver-journal"
#: The lease of a deployment, held from before its backup until its journal entry is gone
#: (restored, or kept by ``--keep-driver``). Why a lease of its own: the driver's backup
#: outlives the appliance's lease (``run.lock`` is held only while a tunnel is up), so a
#: journal entry alone cannot tell a dead run's build under test from a live run's; this
#: lease can -- renewed while its run lives, taken over once it is dead (its pid gone on
#: this machine, its lease expired on any) -- so the next run recovers a dead run's driver
#: and never a live one's.
DRIVER_LOCK_PATH = "/var/db/ipsec-hil/driver.lock"


class DriverError(LabError):
    """The driver under test could not be deployed (or the previous one not restored)."""


@dataclass(frozen=True)
class ModuleBuild:
    """A module file's identity: md5 and size (what the page and the gate compare)."""

    md5: str | None
    size: int | None
    loaded: bool | None = None

    def text(self) -> str:
        if self.md5 is None:
            return "absent"
        state = "" if self.loaded is None else (", loaded" if self.loaded else ", not loaded")
        return f"md5 {self.md5}, {self.size:,} bytes{state}"


@dataclass
class DeployResult:
    """What ``deploy()`` did, for the report header, the page and Allure's environment."""

    appliance: str
    model: str
    module_file: str
    local_path: str
    deployed: ModuleBuild
    previous: ModuleBuild
    kernel_log: list[str] = field(default_factory=list)  # dmesg lines the load added
    steps: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.appliance} ({self.model}): {self.module_file} <- {self.local_path} "
                f"[{self.deployed.text()}]; previous [{self.previous.text()}]")


def local_build(path: str | Path) -> tuple[bytes, ModuleBuild]:
    """Bytes, md5 and size of a local module file (``DriverError`` if it cannot be read)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise DriverError(f"driver under test {p}: no such file") from None
    except OSError as exc:
        raise DriverError(f"driver under test {p}: cannot read: {exc.strerror}") from None
    if not data:
        raise DriverError(f"driver under test {p}: file is empty")
    return data, ModuleBuild(hashlib.md5(data).hexdigest(), len(data))


def _q(s: str) -> str:
    return shlex.quote(s)


def _module_name(module_file: str) -> str:
    base = module_file.rsplit("/", 1)[-1]
    return base[:-3] if base.endswith(".ko") else base


class DriverDeployment:
    """``DriverDeployment(appliance, local_path).deploy()`` then ``.restore()``.

    ``appliance`` is a :class:`ipsec_hil.lab.appliance.Appliance` (its ``host``, ``profile``
    -- ``module_file`` names where the driver lives -- and ``module_info()`` are used).
    ``deploy()`` restores the previous module itself if any step after the upload fails,
    then raises ``DriverError``; ``restore()`` is idempotent.
    """

    def __init__(self, appliance: Any, local_path: str | Path, *, run_id: str = "manual",
                 journal_dir: str = DRIVER_JOURNAL_DIR, timeout: float = 120, holder: str = "",
                 lease_wait: float = 600, lock_path: str = DRIVER_LOCK_PATH) -> None:
        self.appliance = appliance
        self.host = appliance.host
        self.local_path = Path(local_path)
        self.module_file = str(appliance.profile.module_file)
        self.module = _module_name(self.module_file)
        self.run_id = run_id
        self.journal_dir = journal_dir
        self.timeout = timeout
        self.backup: files.Backup | None = None
        self.previous: ModuleBuild | None = None
        self.result: DeployResult | None = None
        self.steps: list[str] = []
        self.holder = holder or f"{files.whoami()}: driver under test ({self.local_path.name})"
        self.lease_wait = lease_wait
        self.lock_path = lock_path
        #: the deployment's lease (:data:`DRIVER_LOCK_PATH`), held from deploy() until the
        #: previous module is back (or kept)
        self.lease: Any = None
        #: what a dead run's deployment had left in the journal, recovered by deploy() first
        self.recovered: list[str] = []
        #: that dead run as its lease recorded it (None: its lease had been released)
        self.recovered_from: Any = None

    # ------------------------------------------------------------------ remote helpers

    def _run(self, script: str, what: str = ""):
        """One sh script on the appliance (``what`` names the step for readers of the code)."""
        return self.host.run(script, timeout=self.timeout)

    def _where(self) -> str:
        return f"{self.appliance.name}: {self.module_file}"

    def _state(self) -> ModuleBuild:
        info = self.appliance.module_info()
        return ModuleBuild(info.md5, info.size, info.loaded)

    def remote_md5(self) -> str | None:
        """``md5 -q FILE`` on the appliance (None if the file does not exist)."""
        cmd = _md5.COMMAND("-q", self.module_file)
        r = self._run(f"[ -f {_q(self.module_file)} ] || exit 3\n{cmd}\n", "md5")
        if r.status == 3:
            return None
        r.check(cmd)
        digest = r.stdout.strip()
        if not re.fullmatch(r"[0-9a-f]{32}", digest):
            raise DriverError(f"{self._where()}: md5 -q printed {digest[:80]!r}, expected 32 hex digits")
        return digest

    def dmesg_lines(self) -> list[str]:
        r = self._run(f"{_dmesg.COMMAND}\n", "dmesg").check(_dmesg.COMMAND)
        return r.stdout.splitlines()

    def loaded(self) -> bool:
        """``kldstat -q -n MODULE``: exit 0 when loaded."""
        r = self._run(f"{_kldstat.COMMAND('-q', '-n', self.module)}\n", "kldstat")
        return r.status == 0

    def unload(self) -> None:
        """``kldunload MODULE``; a module that is not loaded ("can't find file") is fine."""
        r = self._run(f"{KLDUNLOAD(self.module)}\n", "kldunload")
        if r.status == 0:
            self.steps.append(f"kldunload {self.module}")
            return
        if "can't find file" in r.stderr:
            return
        raise DriverError(f"{self._where()}: kldunload {self.module} failed (status {r.status}): "
                          f"{r.stderr.strip()[-300:]}")

    def load(self) -> list[str]:
        """kldload the module file; returns the kernel log lines the load added.

        Raises ``DriverError`` when kldload fails or the new kernel log lines hold a link
        error. (Callers then read ``module_info()``: kldstat must list it with the md5.)
        """
        before = self.dmesg_lines()
        r = self._run(f"{KLDLOAD(self.module_file)}\n", "kldload")
        after = self.dmesg_lines()
        new = _new_lines(before, after)
        bad = [l for l in new if LINK_ERROR_RE.search(l)]
        if r.status != 0:
            raise DriverError(f"{self._where()}: kldload failed (status {r.status}): {r.stderr.strip()[-300:]}"
                              + (f"; dmesg: {' | '.join(bad or new[-3:])}" if (bad or new) else ""))
        if bad:
            raise DriverError(f"{self._where()}: loaded, but the kernel log reports a link error: "
                              + " | ".join(bad))
        self.steps.append(f"kldload {self.module_file}")
        return new

    # ------------------------------------------------------------------ the lease

    def take_lease(self) -> None:
        """The deployment's lease (waiting up to ``lease_wait`` s for a live holder: two
        runs never swap one appliance's driver at once). ``deploy()`` takes it when the
        caller has not; a caller that also takes the appliance's lease takes this one first
        (waiting for another run's build under test while holding the appliance would keep
        that run from it). Idempotent."""
        if self.lease is not None:
            return
        lease = ApplianceLock(self.host, self.holder, path=self.lock_path, run_id=self.run_id,
                              wait=self.lease_wait, poll=2)
        try:
            lease.acquire()
        except LockHeld as exc:
            raise DriverError(f"{self.appliance.name}: its driver is another run's build under test: {exc}") from None
        self.lease = lease

    def _recover_dead(self) -> None:
        """Holding the lease, whatever the driver journal holds is a dead run's (its run died
        after this run's start, or nobody recovered it): put back before our own backup."""
        if files.journal_files(self.host, self.journal_dir, self.timeout):
            self.recovered_from = self.lease.took_over if self.lease is not None else None
            self.recovered = recover_driver(self.appliance, self.journal_dir, self.timeout)
            log.warning("%s: a dead run's driver recovered before deploying: %s", self.appliance.name,
                        "; ".join(self.recovered))

    def _release_lease(self) -> None:
        """Give the lease back (nothing is sent to a host this run lost: ApplianceLock.release)."""
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.release()

    def abandon(self) -> None:
        """Stop holding the lease without restoring: given back (nothing is sent to an
        appliance this run lost to another: its new holder's recovery restores the previous
        module from the journal)."""
        self._release_lease()

    # ------------------------------------------------------------------ deploy and restore

    def deploy(self) -> DeployResult:
        """Upload, verify md5, unload the running module, load the new one, check it."""
        data, want = local_build(self.local_path)
        self.take_lease()
        try:
            self._recover_dead()
            self.previous = self._state()
            self.backup = files.backup(self.host, self.module_file, self.journal_dir, self.run_id, self.timeout)
        except BaseException:
            self._release_lease()
            raise
        self.steps.append(f"backed up {self.backup.describe()}")
        try:
            now, kernel_log = self._install(self.local_path, data, want)
        except BaseException as exc:
            log.error("%s: deploying %s failed (%s); restoring the previous module", self.appliance.name,
                      self.local_path, exc)
            try:
                self.restore()
            except LabError as rexc:
                raise DriverError(f"{exc}; AND restoring the previous module failed: {rexc}") from exc
            raise
        self.result = DeployResult(self.appliance.name, str(getattr(self.appliance.profile, "model", "?")),
                                   self.module_file, str(self.local_path), now, self.previous,
                                   kernel_log, list(self.steps))
        log.info("driver under test: %s", self.result.summary())
        return self.result

    def _install(self, path: Path, data: bytes, want: ModuleBuild) -> tuple[ModuleBuild, list[str]]:
        """Upload ``data`` over the module file, check its md5, unload, load, check kldstat."""
        try:
            self.host.write_file_atomic(self.module_file, data, mode=MODULE_MODE)
        except (TransportError, OSError) as exc:
            raise DriverError(f"{self._where()}: upload failed: {exc}") from exc
        self.steps.append(f"uploaded {len(data):,} bytes")
        got = self.remote_md5()
        if got != want.md5:
            raise DriverError(f"{self._where()}: md5 on the appliance is {got}, the local file "
                              f"{path} has {want.md5}: the upload is not the build under test")
        self.steps.append(f"{_md5.COMMAND('-q')} matches {want.md5}")
        self.unload()
        kernel_log = self.load()
        now = self._state()
        if now.md5 != want.md5 or not now.loaded:
            raise DriverError(f"{self._where()}: after loading, module_info says [{now.text()}], "
                              f"expected md5 {want.md5}, loaded")
        return now, kernel_log

    def switch_to(self, local_path: str | Path) -> ModuleBuild:
        """Load another build in place of the running one, within a deployment.

        Why: the merge decision (issue 14) measures parent and candidate in alternating
        trials, so the run swaps builds many times; each swap is checked like a deploy
        (md5, kldstat, kernel log) but takes no new backup -- the one ``deploy()`` took
        still holds the appliance's original module, and ``restore()`` puts that back.
        Raises ``DriverError`` (the caller decides whether the run can go on).
        """
        if self.backup is None:
            raise DriverError(f"{self._where()}: switch_to({local_path}) before deploy(): nothing to restore "
                              "the original module from")
        data, want = local_build(local_path)
        now, _ = self._install(Path(local_path), data, want)
        log.info("%s: switched to %s (%s)", self.appliance.name, local_path, now.text())
        return now

    def restore(self) -> ModuleBuild | None:
        """Put the previous module file back (byte-identical, sha256-checked) and reload it
        if it was loaded; forget the journal entry. No-op if nothing was backed up.

        Finishes through an interrupt or a lost connection: every step is idempotent
        (unload of a module not loaded, restore of a file that has its sha256 already, load
        only if not loaded, discard of a gone entry), so the whole restore is done once
        more and the interrupt re-raised after. Else a Ctrl-C between the unload and the
        load left the appliance without a driver until the next ``--driver`` run (found by
        tests/safety/test_every_step.py: Ctrl-C at each of the restore's remote steps)."""
        if self.backup is None:
            self._release_lease()
            return None
        try:
            return self._restore(self.backup)
        except (DriverError, ProvisionError):  # a real failure, not an interrupt: said as it is
            raise
        except BaseException:
            if self.backup is not None:
                self._restore(self.backup)
            raise
        finally:
            # given back however the restore ended: a backup left in the journal is then the
            # next run's to recover (this process may live on: a lease it kept renewing would
            # keep every other run from it)
            self._release_lease()

    def _restore(self, b: files.Backup) -> ModuleBuild:
        self.unload()
        files.restore(self.host, b, self.timeout)
        self.steps.append(f"restored {b.path}")
        if self.previous is not None and self.previous.loaded and not self.loaded():
            self.load()
        files.discard(self.host, b, self.timeout)
        self.backup = None
        now = self._state()
        if self.previous is not None and (now.md5, now.loaded) != (self.previous.md5, self.previous.loaded):
            raise DriverError(f"{self._where()}: after restoring, module_info says [{now.text()}], "
                              f"expected [{self.previous.text()}]")
        log.info("%s: previous driver back: %s", self.appliance.name, now.text())
        return now


    def keep(self) -> str | None:
        """``--keep-driver``: leave the build under test loaded. The previous file is kept
        beside it as ``<module>.previous`` (so it can still be put back by hand) and the
        journal entry is dropped (else the next run's recovery would undo the choice).
        Returns the kept file's path, or None if nothing was backed up."""
        if self.backup is None:
            self._release_lease()
            return None
        b = self.backup
        kept = self.module_file + ".previous"
        if b.existed:
            self._run(f"cp -p {_q(b.backup_path)} {_q(kept)}\n", "keep").check(f"keep previous module as {kept}")
        files.discard(self.host, b, self.timeout)
        self.backup = None
        self._release_lease()
        log.warning("%s: --keep-driver: %s stays loaded; previous module kept as %s", self.appliance.name,
                    self.local_path, kept if b.existed else "(none existed)")
        return kept if b.existed else None


def _new_lines(before: list[str], after: list[str]) -> list[str]:
    """Lines of ``after`` past ``before`` (the kernel buffer may have wrapped: then all)."""
    if len(after) >= len(before) and after[: len(before)] == before:
        return after[len(before):]
    # wrapped or cleared: find the longest suffix of before that starts after
    for k in range(min(len(before), len(after)), 0, -1):
        if after[:k] == before[-k:]:
            return after[k:]
    return after


def recover_driver(appliance: Any, journal_dir: str = DRIVER_JOURNAL_DIR, timeout: float = 120) -> list[str]:
    """After a crashed run: restore every journalled file (``files.recover``) and, if the
    driver's module file was among them, reload it so the kernel runs the restored build.
    Call it under the appliance lock. Returns one line per restored change."""
    module_file = str(appliance.profile.module_file)
    restored = files.recover(appliance.host, journal_dir, timeout)
    if any(line.startswith(module_file + " (") for line in restored):
        dep = DriverDeployment(appliance, "-", journal_dir=journal_dir, timeout=timeout)
        dep.unload()
        dep.load()
        restored.append(f"{module_file}: reloaded the restored module")
    return restored
