"""uname(1), freebsd-version(1) and opnsense-version(8) of the appliance's release.

Why one module: the three print the same facts (ipsec_hil_twin.fbsd.osrel: the release the
lab file chose for this appliance) and sysctl's kern.osrelease / kern.version are the same
strings, so a survey or a human on the console sees one consistent appliance.

- uname: usr.bin/uname/uname.c -- flags -a (= -mnrsv), -b -i -K -m -n -o -p -r -s -U -v,
  printed in the fixed order sysname nodename release version machine processor ident
  osreldate(-K) userland(-U) build id(-b), space separated; none given means -s.
  `version` is kern.version with its last newline dropped and the other newlines and
  tabs turned into spaces (native_version).
- freebsd-version: bin/freebsd-version/freebsd-version.sh.in (stable/14) -- -k installed
  kernel, -r running kernel (kern.osrelease), -u userland, one per line in that order;
  none given means -u; anything else (an operand too) prints its usage and exits 1.
- opnsense-version: opnsense/core src/sbin/opnsense-version -- each flag adds one field in
  the order given (-A arch, -a ABI, -e email, -f flavour, -H hash, -N name, -n id,
  -v version, -w website); none given prints `NAME VERSION (ARCH/FLAVOUR)`; the flavour
  is the first word of `openssl version`; an unknown flag prints `Usage: man
  opnsense-version` and exits 1.
"""
from __future__ import annotations

import sys

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd import osrel

MACHINE = "amd64"
HOSTNAME_DOMAIN = "localdomain"  # OPNsense's default domain (system.inc)


def _build_id(build: str) -> str:
    """kern.build_id: the kernel's ELF build id (sha1 hex); here derived from the build name,
    so one release always shows the same id."""
    import hashlib

    return hashlib.sha1(build.encode()).hexdigest()


def _release():
    hd = c.host_dir()
    info = c.host_info(hd)
    return info, osrel.of_host(info)


def uname(argv: list[str]) -> int:
    flags = ""
    for a in argv:
        if not a.startswith("-") or a == "-":
            sys.stderr.write("usage: uname [-abiKmnoprsUv]\n")
            return 1
        for ch in a[1:]:
            if ch not in "abiKmnoprsUv":
                sys.stderr.write(f"uname: illegal option -- {ch}\nusage: uname [-abiKmnoprsUv]\n")
                return 1
            flags += ch
    if "a" in flags:
        flags += "mnrsv"
    if "o" in flags:
        flags += "s"
    if not flags:
        flags = "s"
    info, rel = _release()
    host = f"{info.get('name') or 'OPNsense'}.{HOSTNAME_DOMAIN}"
    # native_version: the last newline ends the string, the others and tabs become spaces
    version = rel.kern_version[:-1] if rel.kern_version.endswith("\n") else rel.kern_version
    version = version.replace("\n", " ").replace("\t", " ")
    fields = [("s", "FreeBSD"), ("n", host), ("r", rel.osrelease), ("v", version),
              ("m", MACHINE), ("p", MACHINE), ("i", "SMP"), ("K", str(rel.osreldate)),
              ("U", str(rel.osreldate)), ("b", _build_id(rel.build))]
    print(" ".join(value for flag, value in fields if flag in flags))
    return 0


def freebsd_version(argv: list[str]) -> int:
    usage = "usage: freebsd-version [-kru]\n"  # stable/14's script (no -j there)
    want = set()
    for a in argv:
        if not a.startswith("-") or a == "-" or any(ch not in "kru" for ch in a[1:]):
            sys.stderr.write(usage)
            return 1
        want.update(a[1:])
    _, rel = _release()
    for flag in "kru" if want else "u":
        if flag in want or not want:
            print(rel.osrelease)
    return 0


def opnsense_version(argv: list[str]) -> int:
    _, rel = _release()
    product = {"A": MACHINE, "a": rel.opnsense, "e": "project@opnsense.org", "f": "OpenSSL",
               "H": rel.build.rsplit("-", 1)[-1][:9], "N": "OPNsense", "n": "opnsense",
               "v": rel.opnsense_version, "w": "https://opnsense.org/"}
    out: list[str] = []
    for a in argv:
        if not a.startswith("-") or a == "-":
            break  # getopts stops at the first operand; the script ignores operands
        for ch in a[1:]:
            if ch not in product:
                sys.stderr.write("Usage: man opnsense-version\n")
                return 1
            out.append(product[ch])
    if not out:
        out = [f"OPNsense {rel.opnsense_version} ({MACHINE}/OpenSSL)"]
    print(" ".join(out))
    return 0
