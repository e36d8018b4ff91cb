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




# ------------------------------------------------------------- xdist work units

#: Test files (paths under tests/) whose items go to xdist workers one parameter set at a
#: time, not as one file: the fault matrix, one shard per registry model in one file
#: (tests/teeth/test_fault_matrix.py). Each shard is ~4-5 minutes of one worker; kept as
#: one unit the file would run its shards one after the other on one worker.
SHARDED_FILES = ("teeth/test_fault_matrix.py",
                 # interruption at every step: one unit per part of a kind's steps (tools/run-safety)
                 "safety/test_every_step.py", "safety/test_every_step_cut.py",
                 "safety/test_every_step_cut_running.py", "safety/test_every_step_sigkill.py")


def shard_scope(nodeid: str) -> str:
    """The xdist work unit of ``nodeid`` under ``--dist loadfile``: its file, except in a
    :data:`SHARDED_FILES` file, where it is the file and the item's parameters
    (``tests/teeth/test_fault_matrix.py[xgs136]``): the module-scoped parameter's items
    stay together, so each shard's lab and result are made once, in one worker."""
    file, _, rest = nodeid.partition("::")
    if "[" in rest and any(file == name or file.endswith("/" + name) for name in SHARDED_FILES):
        return f"{file}[{rest.split('[', 1)[1]}"
    return file


def sharded_loadfile_scheduler(config, log):
    """xdist's LoadFileScheduling with :func:`shard_scope` as its work unit (tests/conftest.py
    returns it from ``pytest_xdist_make_scheduler`` for ``--dist loadfile``)."""
    from xdist.scheduler import LoadFileScheduling

    class ShardedLoadFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shard_scope(nodeid)

    return ShardedLoadFileScheduling(config, log)
