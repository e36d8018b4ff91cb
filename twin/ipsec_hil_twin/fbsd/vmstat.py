"""vmstat(8) `-z` (UMA zones) and `-m` (malloc types) of FreeBSD 14, text and `--libxo json`.

The numbers come from ipsec_hil_twin.fbsd._kmem (they move with the engine's traffic and
associations).  Formats from usr.bin/vmstat/vmstat.c: domemstat_zone() prints the
header with FAIL and SLEEP run together (`%8s%4s`), an empty line, then
`name:` padded to 20 and `%6ju, %6ju,%8ju,%8ju,%8ju,%4ju,%4ju,%4ju`; domemstat_malloc()
prints `%13s %5ju %5juK %8ju  sizes`.  libxo version "1" in both JSON forms.
"""
from __future__ import annotations

import json
import sys

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd import _kmem
from ipsec_hil_twin.fbsd.netstat import parse_libxo

PROG = "vmstat"
USAGE = ("usage: vmstat [-afHhimoPsz] [-M core [-N system]] [-c count] [-n devs]\n"
         "              [-p type,if,pass] [-w wait] [disks] [wait [count]]\n")
ZONE_HEADER = "ITEM                   SIZE  LIMIT     USED     FREE      REQ     FAILSLEEP XDOMAIN\n\n"
MALLOC_HEADER = "         Type InUse MemUse Requests  Size(s)\n"


def main(argv: list[str]) -> int:
    args, style = parse_libxo(argv)
    which = ""
    for a in args:
        letters = c.option_letters(PROG, a, "zm", USAGE) if a.startswith("-") else None
        if letters is None:
            if not a.startswith("-"):
                c.err(PROG, "only -z and -m are emulated on this appliance")
            return 1
        which += letters
    if which not in ("z", "m"):
        c.err(PROG, "only one of -z and -m is emulated on this appliance")
        return 1
    styles = (style or "").split(",")
    mem = _kmem.kernel_memory(c.host_dir())
    if which == "z":
        doc = {"__version": "1", "memory-zone-statistics": {"zone": [
            {**z._asdict(), "fail": 0, "sleep": 0, "xdomain": 0} for z in mem.zones]}}
        text = ZONE_HEADER + "".join(
            f"{z.name + ':':<20s} {z.size:6d}, {z.limit:6d},{z.used:8d},{z.free:8d},{z.requests:8d},"
            f"{0:4d},{0:4d},{0:4d}\n" for z in mem.zones)
    else:
        doc = {"__version": "1", "malloc-statistics": {"memory": [
            {"type": m.type, "in-use": m.in_use, "memory-use": m.kib, "requests": m.requests,
             "size": list(m.sizes)} for m in mem.malloc]}}
        text = MALLOC_HEADER + "".join(
            f"{m.type:>13s} {m.in_use:5d} {m.kib:5d}K {m.requests:8d}  {','.join(map(str, m.sizes))}\n"
            for m in mem.malloc)
    if "json" in styles:
        sys.stdout.write((json.dumps(doc, indent=2) if "pretty" in styles else json.dumps(doc)) + "\n")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    c.run_main(main)
