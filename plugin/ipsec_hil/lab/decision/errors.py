"""The one error the decision library raises on purpose.

Why its own class: the pytest layer turns every ``LabError`` into a clear failure, and a
caller that passes a bad parameter (a negative width, too few trials) must learn *which*
parameter and why, not get a numpy traceback. It is also a ``ValueError`` so plain-Python
callers can catch it the usual way.
"""

from __future__ import annotations

from ipsec_hil.lab.errors import LabError


class DecisionError(LabError, ValueError):
    """A parameter or an input sample is unusable; the message names it and its value."""


def bad(name: str, value: object, want: str) -> DecisionError:
    """``DecisionError('NAME: expected WANT, found VALUE')`` -- one shape for every message."""
    return DecisionError(f"{name}: expected {want}, found {value!r}")
