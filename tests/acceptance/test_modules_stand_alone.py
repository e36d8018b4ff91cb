"""tests_hil/ is shipped as the package ipsec_hil_acceptance and run by module name from an
installed suite: each test module must stand on the library alone. A module importing a
sibling (``from ._wire import ...``, ``from tests_hil.x import ...``) or a helper module
beside the tests would make the package's test modules depend on each other's layout,
and helpers there are library code a driver repository cannot import (issue 39)."""

from __future__ import annotations

import ast

from tests.lab_factory import ACCEPTANCE, REPO

PACKAGE = REPO / ACCEPTANCE
NAMES = {"tests_hil", "ipsec_hil_acceptance"}


def _imports(path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            out.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


def test_no_acceptance_module_imports_another():
    bad = {f"{p.name}: {m}" for p in sorted(PACKAGE.glob("*.py"))
           for m in _imports(p) if m.startswith(".") or m.split(".")[0] in NAMES}
    assert not bad, f"acceptance modules importing from the acceptance package (move it into ipsec_hil.lab): {sorted(bad)}"


def test_the_package_holds_test_modules_only():
    helpers = sorted(p.name for p in PACKAGE.glob("*.py")
                     if not p.name.startswith("test_") and p.name not in ("__init__.py", "conftest.py"))
    assert not helpers, f"helper modules in {ACCEPTANCE}/ (library code: move them into ipsec_hil.lab): {helpers}"
