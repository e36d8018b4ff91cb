"""The lab is an independent oracle: twin/ imports nothing of plugin/ but the topology model.

Why a scan and not a convention: one `from plugin.lab import esp_math` in the twin makes
the lab compute FreeBSD's limits with the suite's own formula, and the size tests then
compare a formula with itself (issue 10).  The lab file's schema (plugin.lab.topology) is
the one contract the two share.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

TWIN = Path(__file__).resolve().parents[2] / "twin"
ALLOWED = {"plugin.lab.topology"}


def plugin_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a plugin module in one file, however written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "plugin"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "plugin":
                # `from plugin.lab import esp_math` imports plugin.lab.esp_math
                found += [(node.lineno, node.module if node.module in ALLOWED else f"{node.module}.{a.name}")
                          for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__", "find_spec"):
            for arg in node.args[:1]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("plugin"):
                    found.append((node.lineno, arg.value))
    return found


def test_twin_imports_only_the_topology_model_from_plugin():
    files = sorted(TWIN.rglob("*.py"))
    assert len(files) > 30, f"expected the twin's sources under {TWIN}"
    bad = [f"{p.relative_to(TWIN.parent)}:{line}: imports {mod}"
           for p in files for line, mod in plugin_imports(p) if mod not in ALLOWED]
    assert not bad, "twin/ must import nothing from plugin/ except plugin.lab.topology:\n" + "\n".join(bad)


@pytest.mark.parametrize("source,caught", [
    ("from plugin.lab import esp_math\n", "plugin.lab.esp_math"),
    ("import plugin.lab.hardware\n", "plugin.lab.hardware"),
    ("from plugin.lab.hardware import profile_for\n", "plugin.lab.hardware.profile_for"),
    ("import importlib\nimportlib.import_module('plugin.lab.expect')\n", "plugin.lab.expect"),
])
def test_the_scan_catches_each_spelling(tmp_path, source, caught):
    f = tmp_path / "m.py"
    f.write_text(source)
    assert [m for _, m in plugin_imports(f)] == [caught]


def test_the_scan_allows_the_topology_model(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from plugin.lab.topology import Topology, load_topology\n")
    assert [m for _, m in plugin_imports(f) if m not in ALLOWED] == []
