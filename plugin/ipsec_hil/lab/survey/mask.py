"""Key material out of ``setkey -D`` before anything is saved.

Why here and not in the parser: the survey saves the raw output of every command it
reads, and a bundle is meant to be attached to issues and turned into golden files;
``setkey -D`` prints each SA's encryption and authentication keys in hex
(lib/libipsec/pfkey_dump.c: ``E: alg  hex...`` and continuation lines). Each hex digit of
those lines becomes ``0``: the layout, line count and key lengths stay, so the masked text
still parses (its golden expectation is the parse of the masked text), while no digit of
a key survives. A zero key is never a real one, so a masked dump is recognisable.
"""

from __future__ import annotations

import re

# the key line and its continuation lines as ipsec_hil.lab.parsers.setkey reads them
_KEY = re.compile(r"(?P<head>\t[EA]: [a-z0-9-]+  ?)(?P<hex>[0-9a-f]+(?: [0-9a-f]+)*)(?P<tail>\s*)")
_CONT = re.compile(r"(?P<head>\t? +)(?P<hex>[0-9a-f]{2,8}(?: [0-9a-f]{2,8})*)(?P<tail>\s*)")
_HEXDIGIT = re.compile(r"[0-9a-fA-F]")


def _zero(m: re.Match[str]) -> str:
    return m["head"] + _HEXDIGIT.sub("0", m["hex"]) + m["tail"]


def mask_setkey(text: str) -> str:
    """``setkey -D`` output with every key digit replaced by ``0`` (all else verbatim).

    A continuation line is masked only after a key line (or another continuation line),
    as setkey prints them; any other line is kept as it is."""
    out: list[str] = []
    in_key = False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        end = line[len(body):]
        m = _KEY.fullmatch(body)
        if m:
            out.append(_zero(m) + end)
            in_key = True
            continue
        if in_key and (m := _CONT.fullmatch(body)):
            out.append(_zero(m) + end)
            continue
        in_key = False
        out.append(line)
    return "".join(out)
