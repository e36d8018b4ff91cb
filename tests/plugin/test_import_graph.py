"""No import circle in plugin/ipsec_hil/: every module can be read (and imported) on its own.

Why: a circle (fixtures -> records -> session -> fixtures, as it once was) means no module of
it can be understood or imported alone; lazy imports inside functions only hid it. The
graph is read from the source (AST), lazy imports included, so hiding one again fails here
with the circle named.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2] / "plugin"  # the source root of the package
PACKAGE = "ipsec_hil"


def module_name(path: Path, repo: Path) -> str:
    parts = list(path.relative_to(repo).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` at module level."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators))


def import_graph(repo: Path = REPO) -> dict[str, set[str]]:
    """module -> the plugin modules it imports (anywhere in its body)."""
    modules = {module_name(p, repo): p for p in (repo / PACKAGE).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        script_only = {id(n) for guard in tree.body if _is_main_guard(guard) for n in ast.walk(guard)}
        for node in ast.walk(tree):
            if id(node) in script_only:  # runs only as `python -m module`, never on import
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".") if is_package else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules:  # `import ipsec_hil.lab.x as y` / attribute imports
                    t = t.rpartition(".")[0]
                if t and t != mod and not mod.startswith(t + "."):  # a package's own __init__ is not a circle
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_circle_in_plugin():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle in plugin/ipsec_hil/: " + " -> ".join(cycle)


def test_gate_and_driver_plugins_do_not_import_each_other():
    """They add page sections through the pytest_hil_page_sections hook (ipsec_hil.hookspecs)."""
    graph = import_graph()
    assert "ipsec_hil.gate_plugin" not in graph["ipsec_hil.driver_plugin"]
    assert "ipsec_hil.driver_plugin" not in graph["ipsec_hil.gate_plugin"]


def test_the_check_finds_a_circle():
    """The detector itself: a -> b -> a is named (a test that cannot fail proves nothing)."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_lazy_imports(tmp_path):
    pkg = tmp_path / "ipsec_hil"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "one.py").write_text("def f():\n    from ipsec_hil import two\n")
    (pkg / "two.py").write_text("from ipsec_hil.one import f\n")
    assert find_cycle(import_graph(tmp_path)) == ["ipsec_hil.one", "ipsec_hil.two", "ipsec_hil.one"]
