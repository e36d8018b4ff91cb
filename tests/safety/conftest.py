"""The safety modules' shared fixture: one virtual lab per module (see _lab.py)."""

from safety._lab import vlab  # noqa: F401 -- a fixture, used by name
