"""A pytest plugin for an inner ``--collect-only`` run: what the acceptance suite selects.

Loaded with ``-p tests.acceptance.selection_dump`` by
tests/acceptance/test_selection_by_properties.py; writes one JSON row per collected item to
the file named by ``HIL_SELECTION_DUMP``: the test function, its tunnel case (tunnel name,
configuration id, model; None for a test without one), the rest of its parameter id, and
the reason it would be skipped (None: it runs). Why a plugin and not ``-q`` output: the
node ids say nothing of skip marks, and a test that meets no tunnel is collected as a
skipped ``[no-tunnel]`` item.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from _pytest.skipping import evaluate_skip_marks


def _row(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get("tunnel") if callspec is not None else None
    rest = callspec.id if callspec is not None else ""
    if case is not None:
        rest = rest.replace(case.id, "<case>", 1)
    skip = evaluate_skip_marks(item)
    return {"function": item.nodeid.split("[", 1)[0].rsplit("tests_hil/", 1)[-1],
            "case": None if case is None else [case.tunnel, case.config.id, case.model],
            "rest": rest,
            "skip": None if skip is None else skip.reason}


def pytest_collection_finish(session: pytest.Session) -> None:
    path = os.environ["HIL_SELECTION_DUMP"]
    with open(path, "w") as f:
        json.dump([_row(i) for i in session.items], f)
