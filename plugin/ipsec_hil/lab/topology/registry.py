"""What the loader needs to know about appliance models, passed in by whoever loads.

Why a protocol and not an import: the schema is the one contract the suite and the
virtual lab share (DESIGN.md "The lab is an independent oracle"). If the schema imported
the suite's hardware registry to check ``model: xgs136``, every process that reads a lab
file -- the twin's included -- would load the suite's expectations with it, and the twin
could quietly take its figures from them. So the caller says which models it knows: the
suite passes its ``ipsec_hil.lab.expectations.hardware.REGISTRY``, the twin passes
``ipsec_hil_twin.personality.MODELS`` (the models it emulates). Each checks a host's
``profile:`` overrides its own way; the loader turns a refusal into a ``FILE:LINE`` error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class KnownModels(Protocol):
    """The models a loader accepts on ``hosts.X.model``, and their ``profile:`` overrides."""

    def names(self) -> Iterable[str]:
        """Every model name this caller knows (live: read at each load)."""
        ...

    def check_profile(self, model: str, overrides: Mapping[str, Any]) -> None:
        """Refuse overrides ``model`` cannot take: raise ValueError or a LabError whose
        message says what is wrong (the loader prefixes ``FILE:LINE: hosts.X.profile.KEY``)."""
        ...


def model_names(models: KnownModels) -> tuple[str, ...]:
    """The names as a tuple, after checking ``models`` is a registry at all (a caller that
    passed something else learns it here, not from an AttributeError deep in pydantic)."""
    if not isinstance(models, KnownModels):
        raise TypeError(f"models: expected a registry with names() and check_profile() "
                        f"(e.g. ipsec_hil.lab.expectations.hardware.REGISTRY), found {type(models).__name__}")
    return tuple(models.names())
