"""The fault matrix: one shard per model of the hardware registry, each on its own virtual
lab (tests/teeth/shard.py says how).

No file per model: the shards are this module's ``matrix_model`` parameter, the registry's
models (tests/teeth/matrix.py models()), so a model added to the registry has its shard
without a line here. Under ``--dist loadfile`` (tools/run-selftests) each model's shard is
a work unit of its own (tests/file_order.py shard_scope), so the shards run on separate
xdist workers at once, as the per-model files did. One model alone:
``pytest tests/teeth/test_fault_matrix.py -k xgs136``.
"""

import pytest

from . import matrix
from .shard import *  # noqa: F403 -- the shard's lab, its result and the checks on it

pytestmark = [pytest.mark.needs_root]


@pytest.fixture(scope="module", params=matrix.models())
def matrix_model(request: pytest.FixtureRequest) -> str:
    """The model whose rows this shard runs (one module-scoped parameter per registry model)."""
    return request.param
