"""The pre-shared key as a value that never shows itself by accident.

Why: the PSK passes through the fixture, the provisioner and the renderer; one f-string or
a pytest assertion rewrite printing the object would put it into a log or a report. The
only way to the key is :meth:`Secret.reveal`, called where the text for the appliance is
written (:func:`ipsec_hil.lab.provision.render.render_swanctl`).
"""

from __future__ import annotations

import hashlib

from ipsec_hil.lab.errors import ProvisionError

MASK = "<masked>"


class Secret:
    """A pre-shared key that never shows itself by accident (repr/str/format are masked)."""

    __slots__ = ("_value",)

    def __init__(self, value: str | bytes) -> None:
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        value = value.strip("\r\n")
        if not value:
            raise ProvisionError("pre-shared key is empty")
        self._value = value

    def reveal(self) -> str:
        """The key itself -- only for writing it into a file on the appliance."""
        return self._value

    def fingerprint(self) -> str:
        """A short non-reversible tag (8 hex of sha256) so two runs can say 'same key'."""
        return hashlib.sha256(self._value.encode()).hexdigest()[:8]

    def __repr__(self) -> str:
        return f"Secret({MASK})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self):  # pickling would copy the key into places we do not control
        raise TypeError("Secret is not picklable")


def as_secret(psk: Secret | str | bytes) -> Secret:
    return psk if isinstance(psk, Secret) else Secret(psk)


