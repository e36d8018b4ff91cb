"""pyproject.toml lists every package explicitly: the list must be the tree's packages.

Why: three source roots map to three import packages (``package-dir``), and setuptools
ships exactly the ``packages`` listed. A sub-package added to the tree but not to the list
works in a checkout (the editable install maps the whole root) and is missing from the
wheel -- the installed suite fails with an ImportError on a driver team's machine. A
listed package removed from the tree fails the build. Either way this says which.

tests/packaging/ is ``tests.packaging`` (tests/ is one package, issue 53): as a top-level
``packaging`` it would shadow PyPI's (pytest, setuptools) in every own test.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def listed_and_tree(pyproject: Path) -> tuple[set[str], set[str]]:
    """(packages pyproject.toml lists, packages found under its package-dir roots)."""
    conf = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    tree: set[str] = set()
    for top, root in conf["package-dir"].items():
        base = pyproject.parent / root
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if "__pycache__" in rel.parts:
                continue
            tree.add(".".join((top, *rel.parts)))
    return listed, tree


def test_the_explicit_package_list_is_the_trees():
    listed, tree = listed_and_tree(REPO / "pyproject.toml")
    assert not tree - listed, f"in the tree, missing from pyproject.toml's packages: {sorted(tree - listed)}"
    assert not listed - tree, f"listed in pyproject.toml, not in the tree: {sorted(listed - tree)}"


def test_a_sub_package_missing_from_the_list_is_named(tmp_path):
    """The check itself, on a copy: a new sub-package not listed is reported by name."""
    (tmp_path / "src" / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "src" / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackages = ["pkg", "pkg.gone"]\n[tool.setuptools.package-dir]\npkg = "src/pkg"\n')
    listed, tree = listed_and_tree(tmp_path / "pyproject.toml")
    assert tree - listed == {"pkg.sub"} and listed - tree == {"pkg.gone"}
