"""pydantic's validation errors as ``expected ..., found ...`` sentences a lab owner reads.

Why: a raw pydantic message ("Input should be a valid integer, unable to parse string as
an integer") names neither what to write nor, for an unknown key, what the known ones are.
Values under ``psk`` are never repeated (a key pasted in by mistake must not reach a log).
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel

from ipsec_hil.lab.topology.lines import Path_
from ipsec_hil.lab.topology.model import Topology


def found(value: Any, path: Path_) -> str:
    """What the file holds at ``path``, short and safe to print."""
    if any(p == "psk" for p in path):
        return "a value (not shown: it is under psk)"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unwrap(ann: Any) -> Any:
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        return args[0] if len(args) == 1 else ann
    return ann


def _model_at(path: Path_) -> type[BaseModel] | None:
    ann: Any = Topology
    for part in path:
        ann = _unwrap(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            field = ann.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            ann = field.annotation
        elif typing.get_origin(ann) is dict:
            ann = typing.get_args(ann)[1]
        elif typing.get_origin(ann) is list:
            ann = typing.get_args(ann)[0]
        else:
            return None
    ann = _unwrap(ann)
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


_EXPECTED = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "dict_type": "a mapping", "model_type": "a mapping",
    "model_attributes_type": "a mapping", "list_type": "a list", "path_type": "a path",
}  # fmt: skip


def describe(err: dict[str, Any]) -> str:
    kind, ctx, loc = err["type"], err.get("ctx") or {}, tuple(err["loc"])
    shown = found(err.get("input"), loc)
    if kind == "missing":
        return "expected a value (required), found nothing"
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = list(model.model_fields) if model else []
        hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        did = f" (did you mean {hint[0]!r}?)" if hint else ""
        return f"expected one of {', '.join(allowed)}, found unknown key {loc[-1]!r}{did}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind == "literal_error":
        return f"expected {ctx['expected']}, found {shown}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, found {shown}"
    for bound, word in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if kind.startswith(("greater_than", "less_than")) and bound in ctx:
            return f"expected a value {word} {ctx[bound]}, found {shown}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length', 1)} entry, found none"
    return f"expected {err['msg'][0].lower()}{err['msg'][1:]}, found {shown}"


