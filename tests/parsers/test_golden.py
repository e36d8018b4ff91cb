"""Every golden case: the parse equals <case>.json, or raises ParseError matching <case>.error."""
from __future__ import annotations

import pytest

from ipsec_hil.lab.parsers import ParseError

from .golden import Case, all_cases, normalise

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.command}/{c.name}" for c in CASES])
def test_golden(case: Case) -> None:
    assert (case.expected is None) != (case.error is None), f"{case.path}: need exactly one of .json / .error"
    if case.error is not None:
        with pytest.raises(ParseError) as info:
            case.call()
        assert case.error in str(info.value)
        return
    assert normalise(case.call()) == case.expected


def test_each_parser_has_the_four_kinds_of_case() -> None:
    """success, variant, empty and garbled: at least 2 successes, one error, one empty input."""
    by_command: dict[str, list[Case]] = {}
    for case in CASES:
        by_command.setdefault(case.command, []).append(case)
    from ipsec_hil.lab.parsers import MODULES

    for name in MODULES:
        cases = by_command.get(name, [])
        assert sum(c.expected is not None for c in cases) >= 2, f"{name}: needs a success and a variant case"
        assert any(c.error is not None for c in cases), f"{name}: needs a garbled case"
        assert any(not c.stdout.strip() for c in cases), f"{name}: needs an empty-output case"


@pytest.mark.parametrize("text_case, raw_case", [
    ("real-5.9.8", "equivalent-of-real-5.9.8"),
    ("real-libipsec-established", "real-libipsec-established"),
    ("real-libipsec-connecting-and-established", "real-libipsec-connecting-and-established"),
])
def test_list_sas_text_and_raw_agree(text_case: str, raw_case: str) -> None:
    """The same SAs (captured together from a real charon 5.9.8) parse equal in both formats."""
    by_key = {(c.command, c.name): c for c in CASES}
    text = by_key[("swanctl_list_sas", text_case)]
    raw = by_key[("swanctl_list_sas_raw", raw_case)]
    assert normalise(text.call()) == normalise(raw.call())
