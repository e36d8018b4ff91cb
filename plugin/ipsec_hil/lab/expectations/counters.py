"""Counter names the code knows: what a test may name in a ledger, checked before the lab is touched.

Why (issue 53): a test names counters in ledger references, ``"<appliance>:<counter>"``
(ipsec_hil.lab.measuring.measure), and a misspelt name used to be found on the lab, after
the tunnel was up and the traffic had run ("ledger: 'tx_encrpyt'"). The names a test may
use are known without a lab:

- the counters of the appliance's model: its profile's ``counters`` (the driver's and the
  coprocessor's, ipsec_hil.lab.expectations.hardware; a profiles file adds a model's own);
- FreeBSD's ESP statistics, ``esp.<libxo key>`` (ipsec_hil.lab.parsers.netstat_esp);
- the doors a ledger reads per port and per SA: ``if.<port>.idrop``/``.odrop``
  (expect.if_drop) and ``sa.0x<spi>.hw_offl``/``hw_offl_bytes`` (measuring.offload).

Two ways a test names them, both checked at collection:

- typed, through the model: ``XGS136 = model_counters("xgs136")`` at a test module's top,
  then ``XGS136.tx_taken`` is the name ``"tx_taken"``; a name the profile lacks fails the
  module's import (a collection error naming the model and its counters);
- in a reference, ``f"{dut}:tx_encrypt"``: the plugin (ipsec_hil.fixtures'
  ``pytest_generate_tests``) reads every such reference in the test function and in the
  module's functions it calls (:func:`referenced_names`) and checks each against the
  profiles of the models the test's tunnels run on (:func:`check_names`): an unknown name is
  a collection error naming the test, the name, its line and the profiles.

Library code: no pytest here; ``check_names`` raises :class:`CounterNameError`.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from ipsec_hil.lab.errors import ProfileError
from ipsec_hil.lab.expectations.hardware import REGISTRY, HardwareProfile
from ipsec_hil.lab.parsers import netstat_esp

#: The prefix of FreeBSD's ESP statistics in a ledger (measuring.measure.ESP_PREFIX).
ESP_PREFIX = "esp."
#: Every ESP statistic a ledger holds, by its libxo key (both spellings of bytes-in).
KERNEL_ESP: frozenset[str] = frozenset(ESP_PREFIX + k for k in (*(c.key for c in netstat_esp.COUNTERS),
                                                                 "receive-bytes"))
#: Names made per port or per SA (expect.if_drop, measuring.offload.sa_prefix).
PER_PORT_OR_SA = re.compile(r"if\.[^.:\s]+\.(idrop|odrop)|sa\.0x[0-9a-f]{8}\.hw_offl(_bytes)?")
#: The counter part of an f-string reference ``f"{appliance}:NAME"``.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class CounterNameError(ProfileError):
    """A test names a counter no profile of its models has."""


def known_names(profile: HardwareProfile) -> frozenset[str]:
    """Every fixed name a ledger of an appliance of ``profile``'s model can hold."""
    return frozenset(profile.counter_names) | KERNEL_ESP


def is_known(name: str, profiles: Iterable[HardwareProfile]) -> bool:
    return PER_PORT_OR_SA.fullmatch(name) is not None or any(name in known_names(p) for p in profiles)


@dataclass(frozen=True)
class ModelCounters:
    """The counters of one model, by attribute: ``model_counters("xgs136").tx_taken`` is
    ``"tx_taken"``; a name the model's profile lacks raises :class:`CounterNameError`."""

    profile: HardwareProfile

    def __getattr__(self, name: str) -> str:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self.profile.counters:
            return name
        raise CounterNameError(f"{self.profile.model} ({self.profile.driver}) has no counter {name!r}; its counters: "
                               f"{', '.join(self.profile.counter_names)}")

    def ref(self, appliance: str, name: str) -> str:
        """The ledger reference of the checked counter ``name`` on ``appliance``."""
        return f"{appliance}:{getattr(self, name)}"


def model_counters(model: str) -> ModelCounters:
    """The counters of ``model`` (the registry's: a profiles file's models included)."""
    return ModelCounters(REGISTRY.get(model))


@dataclass(frozen=True)
class Reference:
    """A counter named in a test's source: the name, its file and line, the function."""

    name: str
    file: str
    line: int
    function: str


def _references_in(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """``f"{x}:NAME"``: an f-string of one placeholder, then ``:`` and a literal name."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr) or len(node.values) != 2:
            continue
        head, tail = node.values
        if (isinstance(head, ast.FormattedValue) and isinstance(tail, ast.Constant) and isinstance(tail.value, str)
                and tail.value.startswith(":") and _NAME.fullmatch(tail.value[1:])):
            yield tail.value[1:], node.lineno


def referenced_names(func: Callable[..., object]) -> list[Reference]:
    """Every counter ``func`` names in an f-string reference, and the functions of its
    module it calls by name (transitively): the test's helpers, where its invariants often
    live. A function whose source cannot be read names none."""
    module = inspect.getmodule(func)
    seen: set[str] = set()
    out: list[Reference] = []
    todo = [func]
    while todo:
        f = inspect.unwrap(todo.pop())
        if f.__name__ in seen:
            continue
        seen.add(f.__name__)
        try:
            lines, first = inspect.getsourcelines(f)
            file = inspect.getsourcefile(f) or "?"
        except (OSError, TypeError):
            continue
        tree = ast.parse(textwrap.dedent("".join(lines)))
        out += [Reference(name, file, first + line - 1, f.__name__) for name, line in _references_in(tree)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                callee = getattr(module, node.func.id, None)
                if inspect.isfunction(callee) and inspect.getmodule(callee) is module:
                    todo.append(callee)
    return out


def check_names(refs: Sequence[Reference], profiles: Sequence[HardwareProfile], where: str) -> None:
    """Every reference names a counter of one of ``profiles`` (the models the test runs
    on: its tunnels' two ends), an ESP statistic or a door; else :class:`CounterNameError`
    naming ``where`` (the test), each unknown name with its line, and the profiles."""
    unknown = [r for r in refs if not is_known(r.name, profiles)]
    if not unknown:
        return
    models = sorted({p.model for p in profiles})
    names = sorted({n for p in profiles for n in p.counter_names})
    said = "; ".join(f"{r.name!r} ({r.file.rsplit('/', 1)[-1]}:{r.line}, in {r.function})" for r in unknown)
    raise CounterNameError(f"{where}: unknown counter {said}: no counter of the profile(s) {', '.join(models)}, "
                           f"no ESP statistic (esp.<key>) and no door (if.<port>.idrop/odrop, sa.0x<spi>.hw_offl); "
                           f"the profiles' counters: {', '.join(names)}")


__all__ = ["CounterNameError", "KERNEL_ESP", "ModelCounters", "Reference", "check_names", "is_known", "known_names",
           "model_counters", "referenced_names"]
