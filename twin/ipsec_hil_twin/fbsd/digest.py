"""md5(1) / sha256(1) of FreeBSD 14 (sbin/md5): `ALGO (file) = hex`, -q, -r, -s, stdin."""
from __future__ import annotations

import hashlib
import sys

LABEL = {"md5": "MD5", "sha256": "SHA256"}


def run(prog: str, argv: list[str]) -> int:
    quiet = reverse = False
    strings: list[str] = []
    files: list[str] = []
    args = list(argv)
    while args and args[0].startswith("-") and len(args[0]) > 1:
        a = args.pop(0)
        if a == "--":
            break
        j = 1
        while j < len(a):
            ch = a[j]
            if ch == "q":
                quiet = True
            elif ch == "r":
                reverse = True
            elif ch == "s":
                val = a[j + 1:] or (args.pop(0) if args else None)
                if val is None:
                    sys.stderr.write(f"{prog}: option requires an argument -- s\n")
                    return 1
                strings.append(val)
                break
            elif ch in "pt":
                pass
            else:
                sys.stderr.write(f"{prog}: illegal option -- {ch}\n"
                                 f"usage: {prog} [-pqrtx] [-c string] [-s string] [files ...]\n")
                return 1
            j += 1
    files = args
    label = LABEL[prog]
    rc = 0
    out = sys.stdout
    for s in strings:
        h = hashlib.new(prog, s.encode()).hexdigest()
        out.write(f"{h}\n" if quiet else (f'{h} "{s}"\n' if reverse else f'{label} ("{s}") = {h}\n'))
    for f in files:
        try:
            with open(f, "rb") as fh:
                hobj = hashlib.new(prog)
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    hobj.update(chunk)
        except OSError as exc:
            sys.stderr.write(f"{prog}: {f}: {exc.strerror}\n")
            rc = 1
            continue
        h = hobj.hexdigest()
        out.write(f"{h}\n" if quiet else (f"{h} {f}\n" if reverse else f"{label} ({f}) = {h}\n"))
    if not files and not strings:
        h = hashlib.new(prog, sys.stdin.buffer.read()).hexdigest()
        out.write(f"{h}\n")
    return rc
