"""The lab builder's fixtures (a small topology, a fresh prefix with guaranteed cleanup)."""
from tests.twin_lab.conftest import fresh_prefix, small_topology  # noqa: F401
