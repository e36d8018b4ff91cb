"""Shared checks for FreeBSD's `--libxo json` documents (netstat -m, vmstat -z, vmstat -m).

libxo wraps a program's output in one top-level object; a program that calls
xo_set_version (vmstat: "1") gets a `"__version"` string beside its container, one that
does not (FreeBSD 14's netstat) does not. Numbers printed with %ju are bare JSON integers,
so a quoted number is a format drift and an error here, never silently converted.
"""
from __future__ import annotations

from typing import Callable, Optional, TypeVar

from ._base import fail, json_line_of, load_json

T = TypeVar("T")


def container(command: str, text: str, name: str) -> tuple[object, Optional[str]]:
    """(the value of top-level key NAME, the __version string or None); nothing else allowed."""
    doc = load_json(command, text)
    if not isinstance(doc, dict) or set(doc) - {"__version"} != {name}:
        fail(command, 1, text.strip().splitlines()[0][:200], f'expected one top-level "{name}" object')
    version = doc.get("__version")
    if version is not None and not isinstance(version, str):
        fail(command, *json_line_of(text, '"__version"'), f"__version: expected a string, found {version!r}")
    return doc[name], version


def object_container(command: str, text: str, name: str) -> tuple[dict, Optional[str]]:
    """container() whose value must be an object: a C struct's counters, by name."""
    value, version = container(command, text, name)
    if not isinstance(value, dict):
        fail(command, *json_line_of(text, name), f'"{name}": expected an object')
    return value, version


def count(command: str, text: str, obj: dict, key: str, where: str) -> int:
    """OBJ[KEY] as a non-negative JSON integer, or ParseError naming WHERE and KEY."""
    if key not in obj:
        fail(command, *json_line_of(text, where), f"{where}: key {key!r} missing")
    value = obj[key]
    if type(value) is not int or value < 0:
        fail(command, *json_line_of(text, f'"{key}"'), f"{key}: expected a non-negative integer, found {value!r}")
    return value


def only_keys(command: str, text: str, obj: dict, allowed: set[str], where: str) -> None:
    """ParseError on any key of OBJ outside ALLOWED (a new key means a format we do not know)."""
    extra = sorted(set(obj) - allowed)
    if extra:
        fail(command, *json_line_of(text, f'"{extra[0]}"'), f"{where}: unknown key {extra[0]!r}")


def text_or_json(command: str, text: str, empty_why: str,
                 parse_text: Callable[[str], T], parse_json: Callable[[str], T]) -> T:
    """Dispatch on the form: libxo JSON starts with '{'; empty output is an error (EMPTY_WHY)."""
    if not text.strip():
        fail(command, 0, text, f"empty output ({empty_why})")
    return parse_json(text) if text.lstrip().startswith("{") else parse_text(text)


def items(command: str, text: str, name: str, list_key: str, id_key: str, allowed: set[str], what: str
          ) -> tuple[list[dict], Optional[str]]:
    """The objects of `{NAME: {LIST_KEY: [...]}}`, and __version.

    Each object must carry a non-empty string ID_KEY and no key outside ALLOWED (a key we do
    not know is a format we do not know); an error names the object as `WHAT 'id'`.
    """
    stats, version = container(command, text, name)
    if not isinstance(stats, dict) or set(stats) != {list_key} or not isinstance(stats[list_key], list):
        fail(command, *json_line_of(text, name), f'"{name}": expected {{"{list_key}": [...]}}')
    for item in stats[list_key]:
        if not isinstance(item, dict) or not isinstance(item.get(id_key), str) or not item[id_key]:
            fail(command, *json_line_of(text, f'"{list_key}"'),
                 f"{list_key}: expected an object with a {id_key}, found {item!r}")
        only_keys(command, text, item, allowed, f"{what} {item[id_key]!r}")
    return stats[list_key], version


def counts(command: str, text: str, obj: dict, keys: tuple[str, ...], where: str) -> list[int]:
    """count() of each of KEYS, in order: the numbers of one record."""
    return [count(command, text, obj, key, where) for key in keys]
