"""The own tests' run order: every test file's worker seconds from a measured run, longest first.

Why a module of its own (not tests/conftest.py): a test imports it by name, and under
pytest's rootdir-relative imports ``conftest`` is whichever conftest.py was imported
first (tests/transport has one too), so ``from conftest import ...`` broke a full
collection while the file alone passed.

Written by ``tools/selftest-times reports/selftests/junit.xml --write-order tests/file_times.json``;
tests/conftest.py sorts the collected items with :func:`order_longest_first`, so under
xdist (``--dist loadfile --no-loadscope-reorder``, as tools/run-selftests runs) the longest
file never starts last while the other worker idles.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

#: Worker seconds by test file (paths under tests/) from a measured run: the run order, longest first.
#: Written by ``tools/selftest-times reports/selftests/junit.xml --write-order tests/file_times.json``;
#: a file not in it (new since) runs after the recorded ones, in collection order.
FILE_TIMES = TESTS / "file_times.json"


def load_file_times(path: Path = FILE_TIMES) -> dict[str, float]:
    """The recorded seconds by file; a broken file is a usage error naming it and the field."""
    try:
        seconds = json.loads(path.read_text())["seconds"]
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise pytest.UsageError(f"{path}: not an order file with a 'seconds' map ({exc!r}); "
                                "rewrite it with tools/selftest-times --write-order") from None
    if not isinstance(seconds, dict):
        raise pytest.UsageError(f"{path}: 'seconds' is {type(seconds).__name__}, not a map of file to seconds")
    for name, value in seconds.items():
        if not isinstance(value, (int, float)) or value < 0:
            raise pytest.UsageError(f"{path}: seconds[{name!r}] = {value!r}, not a number of seconds >= 0")
    return {str(k): float(v) for k, v in seconds.items()}


def _file_of(item) -> str:
    try:
        return Path(item.path).resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return ""


def order_longest_first(items: list, times: dict[str, float]) -> None:
    """Sort ``items`` (anything with a ``path``) by their file's recorded seconds, longest
    first; stable, so a file's tests stay together in order and unrecorded files (0 s) keep
    their collection order after the recorded ones."""
    items.sort(key=lambda item: -times.get(_file_of(item), 0.0))


