"""No import circle in plugin/ipsec_hil/ nor in twin/ipsec_hil_twin/: every module can be read
(and imported) on its own.

Why: a circle (fixtures -> records -> session -> fixtures, as it once was) means no module of
it can be understood or imported alone; lazy imports inside functions only hid it, and so do
type-only imports (``if TYPE_CHECKING:``): the twin's IKE parts once reached each other
through the daemon object, an eight-module circle that only annotations closed. The graph is
read from the source (AST), lazy and type-only imports included, so hiding one again fails
here with the circle named; the type-only imports are counted, so a scan that stopped seeing
them would show it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPO = ROOT / "plugin"  # the source root of the package
PACKAGE = "ipsec_hil"
SOURCES = {"ipsec_hil": ROOT / "plugin", "ipsec_hil_twin": ROOT / "twin"}
"""Each package the distribution ships, by its source root."""


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


def _is_type_checking_guard(node: ast.stmt) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:``."""
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def import_sites(repo: Path = REPO, package: str = PACKAGE) -> list[tuple[str, str, bool, Path, int]]:
    """(module, package module it imports, whether only under ``if TYPE_CHECKING:``, file, line)
    for every import anywhere in a module's body (functions included, ``__main__`` guards not)."""
    modules = {module_name(p, repo): p for p in (repo / package).rglob("*.py")}
    sites: list[tuple[str, str, bool, Path, int]] = []
    for mod, path in sorted(modules.items()):
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        script_only = {id(n) for guard in tree.body if _is_main_guard(guard) for n in ast.walk(guard)}
        type_only = {id(n) for g in ast.walk(tree) if isinstance(g, ast.If) and _is_type_checking_guard(g)
                     for stmt in g.body for n in ast.walk(stmt)}
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
                    sites.append((mod, t, id(node) in type_only, path, node.lineno))
    return sites


def import_edges(repo: Path = REPO, package: str = PACKAGE) -> list[tuple[str, str, bool]]:
    """(module, package module it imports, whether only under ``if TYPE_CHECKING:``)."""
    return [(mod, target, typed) for mod, target, typed, _, _ in import_sites(repo, package)]


def type_only_imports(repo: Path = REPO, package: str = PACKAGE) -> list[tuple[str, str]]:
    """(module, imported module) of every package import made only for type checking."""
    return [(m, t) for m, t, typed in import_edges(repo, package) if typed]


def import_graph(repo: Path = REPO, package: str = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports (anywhere in its body, TYPE_CHECKING included:
    a type-only import is a dependency of the reader all the same)."""
    graph: dict[str, set[str]] = {module_name(p, repo): set() for p in (repo / package).rglob("*.py")}
    for mod, target, _ in import_edges(repo, package):
        graph[mod].add(target)
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


@pytest.mark.parametrize("package", sorted(SOURCES))
def test_no_import_circle(package):
    graph = import_graph(SOURCES[package], package)
    assert len(graph) > 50, f"expected the modules of {package} under {SOURCES[package]}, found {len(graph)}"
    cycle = find_cycle(graph)
    assert cycle is None, f"import circle in {package} (type-only imports count): " + " -> ".join(cycle)


@pytest.mark.parametrize("package", sorted(SOURCES))
def test_type_only_imports_are_in_the_graph(package):
    """Every ``if TYPE_CHECKING:`` import is an edge of the graph the circle check reads.
    The count is printed (-s): a type-only import is a dependency like any other."""
    repo = SOURCES[package]
    graph = import_graph(repo, package)
    typed = type_only_imports(repo, package)
    print(f"{package}: {len(typed)} type-only imports of its own modules: {typed}")
    for mod, target in typed:
        assert target in graph[mod], f"{mod}: its type-only import of {target} is not in the import graph"


def test_the_graph_sees_type_only_imports(tmp_path):
    """The circle the twin's IKE parts had: closed only by a TYPE_CHECKING import."""
    pkg = tmp_path / "ipsec_hil_twin"
    (pkg / "ike").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ike" / "__init__.py").write_text("")
    (pkg / "ike" / "daemon.py").write_text("from .children import ChildSAs\n")
    (pkg / "ike" / "children.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .daemon import Daemon\n")
    assert type_only_imports(tmp_path, "ipsec_hil_twin") == [("ipsec_hil_twin.ike.children", "ipsec_hil_twin.ike.daemon")]
    assert find_cycle(import_graph(tmp_path, "ipsec_hil_twin")) == [
        "ipsec_hil_twin.ike.children", "ipsec_hil_twin.ike.daemon", "ipsec_hil_twin.ike.children"]


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


# -- Folders in layers (issue 53): each folder of lab/ and of the twin (and each module
# directly in them) imports only its own layer and those below it, and no folder-level loop.
# Why folders and not only modules: the modules had no circle while lab/'s folders formed one
# loop of 12 (remote -> measuring.timeshare -> ... -> remote): a reader could not start at
# the bottom of the house and read up. Each layer is named here, bottom first; a new folder
# or top-level module must be placed in one (test_every_folder_is_in_a_layer), and
# docs/DESIGN.md's "The layers at a glance" draws the same order.

LAB_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("errors", "timeshare", "command", "topology", "expectations", "parsers", "ping_argv", "decision", "cases")),
    ("transport", ("remote", "files", "sharing")),
    ("measuring", ("measuring",)),
    ("appliance", ("appliance",)),
    ("provisioning", ("provision", "driver")),
    ("traffic", ("traffic", "probes", "inject")),
    ("lab", ("dead_runs", "live_lab", "tunnel", "rekey", "preflight")),
    ("programs", ("comparing", "survey")),
    ("page", ("reporting",)),  # renders what it is given: nothing of the lab imports it
)
TWIN_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("errors", "jsonl", "personality", "machinery")),
    ("faults", ("faults",)),
    ("engine", ("engine",)),
    ("fbsd", ("fbsd",)),
    ("daemons", ("ike", "shell")),
    ("lifecycle", ("lifecycle",)),
    ("programs", ("bench", "__main__")),
)
LAYERS = {"ipsec_hil.lab": (SOURCES["ipsec_hil"] / "ipsec_hil" / "lab", LAB_LAYERS),
          "ipsec_hil_twin": (SOURCES["ipsec_hil_twin"] / "ipsec_hil_twin", TWIN_LAYERS)}
#: What lab/ may import of ipsec_hil outside it: the console scripts' one-line answers
#: (standard library only), anywhere; and the virtual lab's start/stop (ipsec_hil.virtual_lab,
#: the lab's errors and topology only), in its programs layer -- it is a program of the lab
#: that lives among the plugin glue's files.
LAB_MAY_IMPORT = {"ipsec_hil.cli": None, "ipsec_hil.exitcodes": None, "ipsec_hil.virtual_lab": "programs"}


def node_of(module: str, package: str) -> str | None:
    """The folder (or top-level module) of ``package`` that ``module`` is in, None outside."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1:].split(".")[0]


def folder_nodes(folder: Path) -> set[str]:
    return {p.stem if p.is_file() else p.name for p in folder.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}


def folder_imports(folder: Path, package: str, repo: Path | None = None, top: str | None = None):
    """(node, node it imports, file, line) for every import between two folders of ``package``."""
    repo = repo or folder.parents[package.count(".")]
    for mod, target, _, path, line in import_sites(repo, top or package.split(".")[0]):
        src, dst = node_of(mod, package), node_of(target, package)
        if src and dst and src != dst:
            yield src, dst, mod, target, path, line


def layer_violations(folder: Path, package: str, layers, repo: Path | None = None) -> list[str]:
    rank = {node: (i, name) for i, (name, nodes) in enumerate(layers) for node in nodes}
    out: list[str] = []
    for src, dst, mod, target, path, line in dict.fromkeys(folder_imports(folder, package, repo)):
        if src in rank and dst in rank and rank[dst][0] > rank[src][0]:
            out.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: {mod} imports "
                       f"{target}: layer {rank[src][1]!r} ({src}) may not import the higher layer {rank[dst][1]!r} ({dst})")
    return out


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_every_folder_is_in_a_layer(package):
    folder, layers = LAYERS[package]
    placed = [node for _, nodes in layers for node in nodes]
    assert len(placed) == len(set(placed)), f"{package}: a folder in two layers: {placed}"
    on_disk = folder_nodes(folder)
    assert not on_disk - set(placed), f"{package}: place each in a layer (tests/plugin/test_import_graph.py): {sorted(on_disk - set(placed))}"
    assert not set(placed) - on_disk, f"{package}: layers name what is not there: {sorted(set(placed) - on_disk)}"


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_folder_level_loop(package):
    folder, _ = LAYERS[package]
    graph: dict[str, set[str]] = {node: set() for node in folder_nodes(folder)}
    for src, dst, *_ in folder_imports(folder, package):
        graph.setdefault(src, set()).add(dst)
        graph.setdefault(dst, set())
    cycle = find_cycle(graph)
    assert cycle is None, f"folder-level import loop in {package}: " + " -> ".join(cycle)


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_folder_imports_a_higher_layer(package):
    folder, layers = LAYERS[package]
    assert not layer_violations(folder, package, layers), "\n".join(layer_violations(folder, package, layers))


def test_the_lab_imports_no_plugin_glue():
    """lab/ is the library (no pytest); of the package around it only LAB_MAY_IMPORT."""
    folder, layers = LAYERS["ipsec_hil.lab"]
    rank = {node: name for name, nodes in layers for node in nodes}
    wrong = [f"{path.relative_to(ROOT)}:{line}: {mod} imports {target}"
             for mod, target, _, path, line in dict.fromkeys(import_sites(SOURCES["ipsec_hil"], "ipsec_hil"))
             if mod.startswith("ipsec_hil.lab.") and not target.startswith("ipsec_hil.lab")
             and (target not in LAB_MAY_IMPORT
                  or LAB_MAY_IMPORT[target] not in (None, rank.get(node_of(mod, "ipsec_hil.lab"))))]
    assert not wrong, "\n".join(wrong)


def test_the_layer_check_names_file_line_and_import(tmp_path):
    """A low folder importing a high one fails, naming the file, the line and the import."""
    pkg = tmp_path / "ipsec_hil_twin"
    for d in ("low", "high"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "b.py").write_text("from ipsec_hil_twin.low import a\n")
    (pkg / "low" / "a.py").write_text('"""doc"""\n\ndef f():\n    from ipsec_hil_twin.high import b\n')
    layers = (("bottom", ("low",)), ("top", ("high",)))
    assert layer_violations(pkg, "ipsec_hil_twin", layers, tmp_path) == [
        f"{pkg / 'low' / 'a.py'}:4: ipsec_hil_twin.low.a imports ipsec_hil_twin.high.b: "
        "layer 'bottom' (low) may not import the higher layer 'top' (high)"]
    graph = {"low": {"high"}, "high": {"low"}}
    assert find_cycle(graph) == ["high", "low", "high"]
