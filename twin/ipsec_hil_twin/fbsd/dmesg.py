"""dmesg(8): the kernel message buffer, i.e. the appliance's /var/log/dmesg.txt.

kldload appends driver attach lines and link errors there (issue 7 checks that no
`symbol ... undefined` line appears when the driver loads); fault
`dmesg_error_under_traffic` adds the driver's errors when the buffer is read (ipsec_hil_twin.fbsd._kmem).
"""
from __future__ import annotations

import sys

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd import _kmem


def main(argv: list[str]) -> int:
    for a in argv:
        if a.startswith("-") and a not in ("-a",):
            sys.stderr.write(f"dmesg: illegal option -- {a[1:2]}\nusage: dmesg [-ac] [-M core [-N system]]\n")
            return 1
    hd = c.host_dir()
    _kmem.log_traffic_faults(hd)
    p = hd.rootpath("/var/log/dmesg.txt")
    try:
        sys.stdout.write(p.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        pass
    return 0


if __name__ == "__main__":
    c.run_main(main)
