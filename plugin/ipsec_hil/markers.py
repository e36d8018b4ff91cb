"""The suite's markers: registered from the model registry, and checked in ``-m``.

Why a check of ``-m``: pytest's ``strict_markers`` rejects an unknown marker on a test,
not in a selection. ``pytest -m xgs999`` deselects every test and, through a wrapper that
forgives "no tests", a gate run passed having measured nothing. A marker expression that
names a marker nobody registered is a usage error that lists the known ones.
"""

from __future__ import annotations

import re

import pytest

from ipsec_hil.lab.expectations.hardware import REGISTRY

#: Markers that are not appliance models (those come from ipsec_hil.lab.expectations.hardware's registry).
STATIC_MARKERS = (
    "outer_v6: the tunnel's outer header is IPv6",
    "inner_v6: IPv6 packets inside the tunnel",
    "gcm: AES-GCM-16-256 (aes-gcm-16)",
    "cbc: AES-CBC-256 with HMAC-SHA-256-128 (aes-cbc-hmac-sha256)",
    "forwarded: traffic forwarded through the appliance (from the bench), not its own",
    "six_children: a connection with six children, one per TCP port",
    "throughput: a throughput measurement (slow; floors, not exact values)",
    "page(name): the measurement page (seed) a test reproduces, e.g. page('000')",
    "tunnels(model, remote_cipher, outer, inner, cipher, children, tunnel, encap): which of the "
    "topology's tunnel configurations a test using the `tunnel` fixture runs on",
    "runs_last: run after every other test (it takes a tunnel down)",
)

# pytest's grammar for -m (src/_pytest/mark/expression.py): ident is (\w|:|+|-|.|[|]|\|/)+,
# an ident may carry (keyword=constant, ...); and/or/not and parentheses combine them.
_STRING = re.compile(r"\"[^\"]*\"|'[^']*'")
_KWARGS = re.compile(r"\(\s*[A-Za-z_]\w*\s*=[^()]*\)")
_IDENT = re.compile(r"(?:\w|:|\+|-|\.|\[|\]|\\|/)+")
_KEYWORDS = {"and", "or", "not"}


def register(config: pytest.Config) -> None:
    """Register every model's marker (the registry's) and the suite's other markers."""
    for line in (*REGISTRY.marker_lines(), *STATIC_MARKERS):
        config.addinivalue_line("markers", line)


def registered(config: pytest.Config) -> list[str]:
    """Names of every marker registered now (pytest's own, plugins', the ini's)."""
    names = []
    for line in config.getini("markers"):
        name = re.split(r"[:(]", line, maxsplit=1)[0].strip()
        if name:
            names.append(name)
    return names


def names_in_expression(expr: str) -> list[str]:
    """The marker names a ``-m`` expression tests (keywords, arguments and strings left out)."""
    bare = _KWARGS.sub(" ", _STRING.sub(" ", expr))
    return [n for n in _IDENT.findall(bare) if n not in _KEYWORDS]


def check_expression(config: pytest.Config) -> None:
    """UsageError (exit 4) when ``-m`` names an unregistered marker; the known ones listed."""
    expr = getattr(config.option, "markexpr", "") or ""
    if not expr:
        return
    known = registered(config)
    unknown = [n for n in names_in_expression(expr) if n not in known]
    if unknown:
        raise pytest.UsageError(
            f"-m {expr!r}: no marker named {', '.join(repr(n) for n in dict.fromkeys(unknown))}; "
            f"known markers: {', '.join(sorted(set(known)))}")
