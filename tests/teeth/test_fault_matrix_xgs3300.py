"""The fault matrix's xgs3300 rows on their own virtual lab (tests/teeth/shard.py says how)."""

import pytest

from .shard import *  # noqa: F403 -- the shard's lab, its result and the checks on it

pytestmark = [pytest.mark.needs_root]


@pytest.fixture(scope="module")
def matrix_model() -> str:
    return "xgs3300"
