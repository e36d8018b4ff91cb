"""YAML to plain data that remembers the line of every key, item and value.

Why: a lab owner edits the topology by hand, far from the code; every error must say
where (``FILE:LINE: hosts.xgs136.ports.port8.mtu: expected ..., found ...``). The YAML is
composed into nodes (``yaml.compose``) and converted here, recording each path's line;
:class:`Located` then turns (path, message) into that ``FILE:LINE: path: message`` line.
Merge keys and duplicate keys are refused (a hand-edited file that silently keeps one of
two values is worse than an error).
"""

from __future__ import annotations

from typing import Any

import yaml

Path_ = tuple[Any, ...]


class Located:
    """Plain data built from YAML nodes plus the line of every path in it."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[Path_, int] = {}
        self.problems: list[tuple[int, str]] = []

    def line(self, path: Path_) -> int:
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return 1

    def add(self, path: Path_, message: str, line: int | None = None) -> None:
        ln = self.line(path) if line is None else line
        self.problems.append((ln, f"{self.file}:{ln}: {dotted(path) or '(top)'}: {message}"))

    def build(self, loader: yaml.SafeLoader, node: yaml.Node, path: Path_) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    self.add(path, "expected plain keys, found a YAML merge key (<<); write the keys out", key_node.start_mark.line + 1)
                    continue
                if not isinstance(key_node, yaml.ScalarNode):
                    self.add(path, "expected a plain key, found a mapping or list used as key", key_node.start_mark.line + 1)
                    continue
                key = str(loader.construct_object(key_node))
                key_line = key_node.start_mark.line + 1
                if key in out:
                    self.add(path + (key,), f"expected each key once, found {key!r} again (first on line {self.lines[path + (key,)]})", key_line)
                    continue
                self.lines[path + (key,)] = key_line
                out[key] = self.build(loader, value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(loader, item, path + (i,)) for i, item in enumerate(node.value)]
        return loader.construct_object(node, deep=True)


def dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def compose(text: str, doc: Located) -> Any:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            doc.add((), "expected a topology (lab, hosts, links, tunnels), found an empty file")
            return None
        return doc.build(loader, node, ())
    except yaml.MarkedYAMLError as exc:
        # Not str(exc): it quotes the offending line, which may hold a secret.
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        where = ""
        if exc.context and exc.context_mark is not None and exc.context_mark.line + 1 != line:
            where = f" ({exc.context} started on line {exc.context_mark.line + 1})"
        doc.add((), f"expected valid YAML, found a syntax error: {exc.problem or exc.context}{where}", line)
        return None
    except yaml.YAMLError as exc:
        doc.add((), f"expected valid YAML, found: {type(exc).__name__}")
        return None
    finally:
        loader.dispose()


