"""b64decode(1) of FreeBSD: `-r` decodes raw base64 (no begin/end lines) to stdout.

The suite's csh-safe transport: `echo <b64> | b64decode -r | /bin/sh`.
"""
from __future__ import annotations

import base64
import binascii
import sys

from ipsec_hil_twin.fbsd import _common as c


def main(argv: list[str]) -> int:
    raw = pflag = False
    files: list[str] = []
    for a in argv:
        if a.startswith("-") and len(a) > 1:
            letters = c.option_letters("b64decode", a, "rpci", "usage: b64decode [-cimprs] [file ...]\n")
            if letters is None:
                return 1
            raw = raw or "r" in letters
            pflag = pflag or "p" in letters
        else:
            files.append(a)
    if not raw:
        c.err("b64decode", "only -r (raw) is emulated on this appliance")
        return 1
    chunks = []
    if files:
        for f in files:
            try:
                with open(f, "rb") as fh:
                    chunks.append(fh.read())
            except OSError as exc:
                sys.stderr.write(f"b64decode: {f}: {exc.strerror}\n")
                return 1
    else:
        chunks.append(sys.stdin.buffer.read())
    text = b"".join(b"".join(x.split()) for x in chunks)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        sys.stderr.write("b64decode: stdin: error decoding base64 input stream\n")
        return 1
    sys.stdout.buffer.write(data)
    return 0


if __name__ == "__main__":
    c.run_main(main)
