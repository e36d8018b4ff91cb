"""`freebsd-version -kru` -> FreeBsdVersions; a kern.osrelease line -> FreeBsdRelease;
`opnsense-version` -> OpnsenseVersion: which release an appliance runs (issue 43).

Why: formats differ between the releases the XGS appliances will run -- FreeBSD 15 adds
the IPSEC_OFFLOAD framework (setkey -D's `hw offl` lines, sysctl net.inet.ipsec.offload)
and renames ping6's texts -- so the suite reads the running release instead of assuming
the seed pages' 14.1.

Sources: bin/freebsd-version/freebsd-version.sh.in prints one line per flag in the order
-k (installed kernel), -r (running kernel, `sysctl -n kern.osrelease`), -u (userland);
a release string is `MAJOR.MINOR-BRANCH[-pN]` (sys/conf/newvers.sh: BRANCH is RELEASE,
STABLE, CURRENT, BETA1, RC2, PRERELEASE, ALPHA1, ...; `-pN` a patch level).
opnsense/core src/sbin/opnsense-version prints `NAME VERSION (ARCH/FLAVOUR)` without flags;
VERSION is `YY.M[.P][_R]` (24.7.12, 26.1.2_3) and its ABI the first two parts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ._base import fail
from ._lines import content_lines
from ipsec_hil.lab.command import Command

COMMAND = Command("freebsd-version", "-kru")
_RELEASE = re.compile(r"(?P<major>[0-9]{1,3})\.(?P<minor>[0-9]{1,2})-(?P<branch>[A-Z]+[0-9]*)(?:-p(?P<patch>[0-9]+))?")
_OPNSENSE = re.compile(r"(?P<name>\S+) (?P<version>(?P<abi>[0-9]{2}\.[0-9]{1,2})(?:\.[0-9]+)?(?:_[0-9]+)?)"
                       r" \((?P<arch>[a-z0-9_]+)/(?P<flavour>[A-Za-z0-9]+)\)")

IPSEC_OFFLOAD_SINCE = 15
"""FreeBSD major release whose GENERIC kernels carry option IPSEC_OFFLOAD (15.0)."""


@dataclass(frozen=True)
class FreeBsdRelease:
    text: str  # as printed: 14.1-RELEASE-p6
    major: int
    minor: int
    branch: str  # RELEASE, STABLE, CURRENT, BETA2, ...
    patch: Optional[int] = None  # the -pN level, None without one

    @property
    def version(self) -> str:
        """`MAJOR.MINOR` (what a lab file's `os: {freebsd: ...}` names)."""
        return f"{self.major}.{self.minor}"

    @property
    def has_ipsec_offload(self) -> bool:
        """Does this release's kernel have the inline IPsec offload framework (15.0 on)?"""
        return self.major >= IPSEC_OFFLOAD_SINCE


@dataclass(frozen=True)
class FreeBsdVersions:
    kernel: FreeBsdRelease  # -k: the installed kernel (/boot/kernel/kernel)
    running: FreeBsdRelease  # -r: the running kernel (kern.osrelease)
    userland: FreeBsdRelease  # -u

    @property
    def reboot_pending(self) -> bool:
        """An update installed a kernel the appliance has not booted yet."""
        return self.kernel.text != self.running.text


@dataclass(frozen=True)
class OpnsenseVersion:
    name: str  # OPNsense
    version: str  # 24.7.12
    abi: str  # 24.7: the series (opnsense-version -a)
    arch: str  # amd64
    flavour: str  # OpenSSL | LibreSSL


def _release(no: int, line: str, command: str = COMMAND) -> FreeBsdRelease:
    m = _RELEASE.fullmatch(line.strip())
    if m is None:
        fail(command, no, line, "expected a FreeBSD release 'MAJOR.MINOR-BRANCH[-pN]' (e.g. 14.1-RELEASE-p6)")
    return FreeBsdRelease(text=line.strip(), major=int(m["major"]), minor=int(m["minor"]), branch=m["branch"],
                          patch=None if m["patch"] is None else int(m["patch"]))


def parse_osrelease(text: str) -> FreeBsdRelease:
    """One release line: `sysctl -n kern.osrelease`, `uname -r` or `freebsd-version -r`."""
    rows = list(content_lines(text))
    if len(rows) != 1:
        fail("sysctl -n kern.osrelease", rows[1][0] if rows[1:] else 0, rows[1][1] if rows[1:] else text,
             f"expected one release line, found {len(rows)}")
    return _release(*rows[0], command="sysctl -n kern.osrelease")


def parse(text: str) -> FreeBsdVersions:
    """`freebsd-version -kru`: exactly three release lines, kernel, running, userland."""
    rows = list(content_lines(text))
    if not rows:
        fail(COMMAND, 0, text, "empty output (freebsd-version prints one line per flag)")
    if len(rows) != 3:
        fail(COMMAND, *rows[min(len(rows), 3) - 1], f"expected 3 lines (-k, -r, -u), found {len(rows)}")
    kernel, running, userland = (_release(no, line) for no, line in rows)
    return FreeBsdVersions(kernel=kernel, running=running, userland=userland)


def parse_opnsense_version(text: str) -> OpnsenseVersion:
    """`opnsense-version` without flags: `OPNsense 24.7.12 (amd64/OpenSSL)`."""
    command = "opnsense-version"
    rows = list(content_lines(text))
    if len(rows) != 1:
        fail(command, rows[1][0] if rows[1:] else 0, rows[1][1] if rows[1:] else text,
             f"expected one line 'NAME VERSION (ARCH/FLAVOUR)', found {len(rows)}")
    no, line = rows[0]
    m = _OPNSENSE.fullmatch(line.strip())
    if m is None:
        fail(command, no, line, "expected 'NAME VERSION (ARCH/FLAVOUR)' (e.g. OPNsense 24.7.12 (amd64/OpenSSL))")
    return OpnsenseVersion(name=m["name"], version=m["version"], abi=m["abi"], arch=m["arch"], flavour=m["flavour"])
