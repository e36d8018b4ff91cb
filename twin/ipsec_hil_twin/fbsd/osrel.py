"""Which OPNsense / FreeBSD an emulated appliance runs, and what differs between them.

Why a table: the first day on real hardware meets whatever release the appliance has
(issue 43). The seed pages ran OPNsense 24.7 on FreeBSD 14.1; OPNsense 25.7 and 26.1 are
built on FreeBSD 14.3; the 26.7 line on FreeBSD 15.1, whose kernel has the inline IPsec
offload framework (option IPSEC_OFFLOAD, sys/netipsec/ipsec_offload.c). The lab file
says which one an appliance runs (a host's `os:` block, ipsec_hil.lab.topology; host.json
`os`), and every command that prints something release-specific asks `of_host` here:

- sysctl kern.osrelease / kern.version / kern.osreldate, uname, freebsd-version and
  opnsense-version print the release's strings;
- on a kernel with IPSEC_OFFLOAD, `setkey -D` prints the offload lines of
  lib/libipsec/pfkey_dump.c (`hw offl if:`, `sw offl ...`, `hw offl ...`) and the
  sysctl node net.inet.ipsec.offload (its leaf `verbose`) exists;
- FreeBSD 15's merged ping prints IPv6 runs without the KAME names (`PING(...)`,
  `ping statistics`, `stddev`); 14's ping6 keeps `PING6(`, `ping6 statistics`, `std-dev`.

The strings (patch level, build id, OPNsense point release) are examples of each line's
shape, not a claim about one image: the suite reads them, it does not compare them to a
list. Stdlib only, plain classes: every emulated command imports this.
"""
from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Release:
    """One OPNsense release and the FreeBSD it is built on."""

    __slots__ = ("freebsd", "opnsense", "osrelease", "opnsense_version", "build", "osreldate",
                 "ipsec_offload", "kame_ping6")

    def __init__(self, freebsd: str, opnsense: str, osrelease: str, opnsense_version: str, build: str,
                 osreldate: int, ipsec_offload: bool, kame_ping6: bool) -> None:
        self.freebsd = freebsd              # "14.1"
        self.opnsense = opnsense            # "24.7" (the ABI, opnsense-version -a)
        self.osrelease = osrelease          # kern.osrelease, uname -r, freebsd-version -k
        self.opnsense_version = opnsense_version  # opnsense-version -v
        self.build = build                  # OPNsense's kernel build id in kern.version
        self.osreldate = osreldate          # __FreeBSD_version (kern.osreldate, uname -K/-U)
        self.ipsec_offload = ipsec_offload  # kernel option IPSEC_OFFLOAD (FreeBSD 15)
        self.kame_ping6 = kame_ping6        # ping6 prints PING6( / ping6 statistics / std-dev

    @property
    def kern_version(self) -> str:
        """kern.version: `FreeBSD <osrelease> <build> SMP` and a newline (as sysctl prints it)."""
        return f"FreeBSD {self.osrelease} {self.build} SMP\n"


RELEASES: dict[str, Release] = {
    "14.1": Release("14.1", "24.7", "14.1-RELEASE-p6", "24.7.12", "stable/24.7-n267958-1f6e2a5b8ab",
                    1401000, ipsec_offload=False, kame_ping6=True),
    "14.3": Release("14.3", "26.1", "14.3-RELEASE-p7", "26.1.2", "stable/26.1-n271842-0c5d2e9a41f",
                    1403000, ipsec_offload=False, kame_ping6=True),
    "15.1": Release("15.1", "26.7", "15.1-RELEASE-p1", "26.7.1", "stable/26.7-n280417-b7e13c05d2a",
                    1501000, ipsec_offload=True, kame_ping6=False),
}
"""FreeBSD version -> the release; ipsec_hil.lab.topology.parts.OS_RELEASES pairs the same
OPNsense and FreeBSD versions for the lab file (tests/twin_shell check both agree)."""

DEFAULT = "14.1"
"""The seed pages' release (OPNsense 24.7 on FreeBSD 14.1): an appliance without `os`."""


def of_host(info: dict[str, Any]) -> Release:
    """The release host.json names (`os: {freebsd: ...}`), the default without one.

    An unknown version is a broken host.json (the topology loader refuses it first):
    ValueError naming the field and the known versions."""
    spec = info.get("os") or {}
    if not isinstance(spec, dict):
        raise ValueError(f"host.json os: expected an object, found {spec!r}")
    version = str(spec.get("freebsd") or DEFAULT)
    try:
        return RELEASES[version]
    except KeyError:
        raise ValueError(f"host.json os.freebsd: expected one of {', '.join(RELEASES)}, found {version!r}") from None
