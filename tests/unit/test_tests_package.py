"""tests/ is one package: every helper and test module imports by its place (``tests.lab_factory``,
``tests.safety._lab``), never as a top-level name.

Why (issue 53): tests/ had no package root, so its folders were imported as ``parsers``,
``report``, ``engine``, ``decision``, ``acceptance`` and its helpers as ``lab_factory`` (33
times) -- names that shadow, or are shadowed by, any installed package of the same name
(tests/packaging/ once had to stay a non-package so as not to hide PyPI's ``packaging``), and
that differed by which file pytest happened to import first.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


def _python_files(root: Path):
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_folder_of_tests_is_a_package():
    folders = {p.parent for p in _python_files(TESTS)}
    missing = sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").exists())
    assert not missing, f"add an __init__.py (tests/ is one package): {missing}"


def own_top_level_names() -> set[str]:
    """Names a module of tests/ would have if imported top-level, which no installed module has."""
    names = {p.stem for p in _python_files(TESTS) if p.stem != "__init__"}
    names |= {p.name for p in TESTS.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    out = set()
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or (spec.origin and Path(spec.origin).resolve().is_relative_to(TESTS)):
            out.add(name)
    return out


def top_level_imports(path: Path, names: set[str], base: Path = REPO) -> list[str]:
    """``file:line: import`` of each absolute import in ``path`` whose first part is in ``names``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods = [node.module]
        else:
            continue
        found += [f"{path.relative_to(base)}:{node.lineno}: {m}" for m in mods if m.split(".")[0] in names]
    return found


def test_no_module_imports_a_test_helper_as_a_top_level_name():
    names = own_top_level_names()
    assert {"lab_factory", "file_order", "labfiles", "safety", "parsers"} <= names
    wrong = [hit for root in (TESTS, REPO / "tools", REPO / "tests_hil")
             for path in ([*_python_files(root)] if root.is_dir() else []) for hit in top_level_imports(path, names)]
    assert not wrong, "import these as tests.<folder>.<module>:\n" + "\n".join(wrong)


def test_loaded_test_modules_are_named_by_their_place():
    from tests import lab_factory  # noqa: F401  (a helper, so there is one to see)

    assert __name__ == "tests.unit.test_tests_package"
    bare = sorted(name for name, mod in list(sys.modules.items())
                  if (f := getattr(mod, "__file__", None)) and Path(f).resolve().is_relative_to(TESTS)
                  and not (name == "tests" or name.startswith("tests.")))
    assert not bare, f"modules of tests/ loaded under a top-level name: {bare}"


def test_the_scan_finds_a_top_level_import(tmp_path):
    (tmp_path / "t.py").write_text("import os\nfrom lab_factory import REPO\nfrom tests.lab_factory import REPO\n"
                                   "def f():\n    import safety._lab\n")
    assert top_level_imports(tmp_path / "t.py", {"lab_factory", "safety"}, tmp_path) == [
        "t.py:2: lab_factory", "t.py:5: safety._lab"]
