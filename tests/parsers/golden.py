"""Golden-file loader shared by the golden test and the fuzz test (no pytest import).

Layout: tests/golden/<command>/<case>.txt is stdout (verbatim capture); optional
<case>.stderr, <case>.status, <case>.args.json ({"function": "parse", "kwargs": {...}});
expected result <case>.json (dataclasses.asdict, JSON-normalised) or <case>.error (a
substring of the ParseError message). Captures that end with an `rc=N` line added by
whoever captured them (the real strongSwan samples) get it stripped here, into status.
"""
from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import re
from pathlib import Path
from typing import Any, Callable

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
# parsers whose parse() takes (stdout, stderr, status) because the outcome needs all three
STREAM_PARSERS = frozenset({"ping", "swanctl_initiate", "swanctl_load", "md5", "route_get", "ip_route"})
_RC = re.compile(r"rc=([0-9]+)")


@dataclasses.dataclass(frozen=True)
class Case:
    command: str
    name: str
    stdout: str
    stderr: str
    status: int
    function: str
    kwargs: dict[str, Any]
    expected: Any  # JSON value, or None when error is set
    error: str | None
    path: Path

    def call(self, stdout: str | None = None) -> Any:
        """Run the parser on this case (or on STDOUT replacing the case's stdout)."""
        module = importlib.import_module(f"ipsec_hil.lab.parsers.{self.command}")
        fn: Callable[..., Any] = getattr(module, self.function)
        text = self.stdout if stdout is None else stdout
        if self.command in STREAM_PARSERS and self.function == "parse":
            return fn(text, self.stderr, self.status, **self.kwargs)
        if self.function == "parse_errors":
            return fn(self.stderr if stdout is None else stdout, **self.kwargs)
        return fn(text, **self.kwargs)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


def load_case(txt: Path) -> Case:
    name = txt.name[: -len(".txt")]  # case names may contain dots (real-5.9.8)

    def sibling(suffix: str) -> Path:
        return txt.with_name(name + suffix)

    stdout = _read(txt)
    stderr = _read(sibling(".stderr"))
    status_path = sibling(".status")
    status = int(status_path.read_text().strip()) if status_path.exists() else 0
    lines = stdout.splitlines(keepends=True)
    if not status_path.exists() and lines and _RC.fullmatch(lines[-1].strip()):
        status = int(_RC.fullmatch(lines[-1].strip()).group(1))  # type: ignore[union-attr]
        stdout = "".join(lines[:-1])
    args_path = sibling(".args.json")
    args = json.loads(args_path.read_text()) if args_path.exists() else {}
    json_path, error_path = sibling(".json"), sibling(".error")
    return Case(
        command=txt.parent.name, name=name, stdout=stdout, stderr=stderr, status=status,
        function=args.get("function", "parse"), kwargs=args.get("kwargs", {}),
        expected=json.loads(json_path.read_text()) if json_path.exists() else None,
        error=error_path.read_text().strip() if error_path.exists() else None, path=txt,
    )


def all_cases() -> list[Case]:
    return [load_case(p) for p in sorted(GOLDEN.glob("*/*.txt"))]


def _default(obj: Any) -> Any:
    if isinstance(obj, enum.Enum):
        return obj.value
    raise TypeError(f"not JSON-able: {obj!r}")


def normalise(result: Any) -> Any:
    """dataclasses.asdict, then through JSON (tuples -> lists, enums -> values)."""
    value = dataclasses.asdict(result) if dataclasses.is_dataclass(result) else result
    return json.loads(json.dumps(value, default=_default))


if __name__ == "__main__":  # print the parse of each case whose expectation is missing
    import sys

    for case in all_cases():
        if case.expected is None and case.error is None or "--all" in sys.argv:
            try:
                value = normalise(case.call())
                if "--write" in sys.argv:  # only after reading the printed parse by eye
                    case.path.with_name(case.name + ".json").write_text(json.dumps(value, indent=1) + "\n")
                print(case.command, case.name, json.dumps(value, indent=1))
            except Exception as exc:  # noqa: BLE001 - a report tool
                print(case.command, case.name, "RAISES", type(exc).__name__, exc)
