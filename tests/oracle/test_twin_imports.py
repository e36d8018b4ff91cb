"""The lab is an independent oracle: twin/ipsec_hil_twin/ imports nothing of plugin/ipsec_hil/ but the topology model.

Why a scan and not a convention: one `from ipsec_hil.lab.expectations import esp_math` in the twin makes
the lab compute FreeBSD's limits with the suite's own formula, and the size tests then
compare a formula with itself (issue 10).  The lab file's schema (ipsec_hil.lab.topology) is
the one contract the two share.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

TWIN = Path(__file__).resolve().parents[2] / "twin" / "ipsec_hil_twin"
ALLOWED = {"ipsec_hil.lab.topology"}


def plugin_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a plugin module in one file, however written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "ipsec_hil"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "ipsec_hil":
                # `from ipsec_hil.lab.expectations import esp_math` imports the module esp_math
                found += [(node.lineno, node.module if node.module in ALLOWED else f"{node.module}.{a.name}")
                          for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__", "find_spec"):
            for arg in node.args[:1]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split(".")[0] == "ipsec_hil":
                    found.append((node.lineno, arg.value))
    return found


def test_twin_imports_only_the_topology_model_from_plugin():
    files = sorted(TWIN.rglob("*.py"))
    assert len(files) > 30, f"expected the twin's sources under {TWIN}"
    bad = [f"{p.relative_to(TWIN.parent)}:{line}: imports {mod}"
           for p in files for line, mod in plugin_imports(p) if mod not in ALLOWED]
    assert not bad, "twin/ipsec_hil_twin/ must import nothing from plugin/ipsec_hil/ except ipsec_hil.lab.topology:\n" + "\n".join(bad)


@pytest.mark.parametrize("source,caught", [
    ("from ipsec_hil.lab.expectations import esp_math\n", "ipsec_hil.lab.expectations.esp_math"),
    ("import ipsec_hil.lab.expectations.hardware\n", "ipsec_hil.lab.expectations.hardware"),
    ("from ipsec_hil.lab.expectations.hardware import profile_for\n", "ipsec_hil.lab.expectations.hardware.profile_for"),
    ("import importlib\nimportlib.import_module('ipsec_hil.lab.expectations.expect')\n", "ipsec_hil.lab.expectations.expect"),
])
def test_the_scan_catches_each_spelling(tmp_path, source, caught):
    f = tmp_path / "m.py"
    f.write_text(source)
    assert [m for _, m in plugin_imports(f)] == [caught]


def test_the_scan_allows_the_topology_model(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from ipsec_hil.lab.topology import Topology, load_topology\n")
    assert [m for _, m in plugin_imports(f) if m not in ALLOWED] == []
