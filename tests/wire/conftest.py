"""The wire tests' namespace lab: the engine tests' MiniLab fixture (hostA|gwA|gwB|hostB).

gwA is the appliance under test, gwB the peer that injects, hostA the far LAN's receiver."""
from __future__ import annotations

from tests.engine.conftest import lab, needs_root, settle  # noqa: F401  (fixture and helpers)
