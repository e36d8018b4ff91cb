"""ESP arithmetic against the reference figures, carried in the repository with their sources.

The figures (tests/data/reference_figures.yaml) are the ones of the reference table of ESP
overheads and limits (RFC 4303/4106/3602/4868), FreeBSD's forwarded-packet gate
(netipsec/ipsec_output.c, xform_esp.c) and the measurement page 000 (a 1,398-byte ping =
inner 1,446; the bisect: 1,335 bytes of ping data pass, 1,336 are refused). Each names its
source in the file; no test reads a file outside the clone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ipsec_hil.lab.expectations import esp_math as m

GCM, CBC = "aes-gcm-16", "aes-cbc-hmac-sha256"
FIGURES_FILE = Path(__file__).resolve().parents[1] / "data" / "reference_figures.yaml"


def overhead_range(cipher: str, outer: str) -> list[int]:
    """(min, max) ESP overhead over every padding (inner lengths 0..199)."""
    seen = {m.esp_overhead(cipher, outer, n) for n in range(0, 200)}
    return [min(seen), max(seen)]


CALLS = {"overhead_range": overhead_range, "max_inner": m.max_inner, "esp_payload_len": m.esp_payload_len,
         "kernel_worst_case_header": m.kernel_worst_case_header, "forwarded_ipv6_limit": m.forwarded_ipv6_limit,
         "forwarded_limit": m.forwarded_limit, "ping_data_for_inner": m.ping_data_for_inner,
         "inner_for_ping_data": m.inner_for_ping_data}


@dataclass(frozen=True)
class Figure:
    id: str
    call: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    source: str
    expect: Any = None
    expect_above: int | None = None

    def value(self) -> Any:
        return CALLS[self.call](*self.args, **self.kwargs)


def load_figures(path: Path = FIGURES_FILE) -> list[Figure]:
    """The figures of ``path``; a malformed one is an error naming the file, the entry and the field."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML ({exc})") from None
    items = data.get("figures") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise ValueError(f"{path}: expected a non-empty list under 'figures'")
    out: list[Figure] = []
    for i, f in enumerate(items):
        where = f"{path}: figures[{i}]" + (f" ({f.get('id')})" if isinstance(f, dict) and f.get("id") else "")
        if not isinstance(f, dict):
            raise ValueError(f"{where}: expected a mapping, got {type(f).__name__}")
        unknown = set(f) - {"id", "call", "args", "kwargs", "expect", "expect_above", "source"}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
        for field in ("id", "call", "args", "source"):
            if field not in f:
                raise ValueError(f"{where}: field '{field}' is missing")
        if f["call"] not in CALLS:
            raise ValueError(f"{where}: field 'call': {f['call']!r} is not one of {sorted(CALLS)}")
        if not isinstance(f["args"], list) or not isinstance(f.get("kwargs", {}), dict):
            raise ValueError(f"{where}: field 'args' must be a list and 'kwargs' a mapping")
        if ("expect" in f) == ("expect_above" in f):
            raise ValueError(f"{where}: give exactly one of 'expect' and 'expect_above'")
        if not str(f["source"]).strip():
            raise ValueError(f"{where}: field 'source' is empty: say where the figure comes from")
        out.append(Figure(f["id"], f["call"], tuple(f["args"]), dict(f.get("kwargs", {})), f["source"],
                          f.get("expect"), f.get("expect_above")))
    ids = [f.id for f in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return out


FIGURES = load_figures()


@pytest.mark.parametrize("fig", FIGURES, ids=[f.id for f in FIGURES])
def test_reference_figure(fig: Figure):
    got = fig.value()
    if fig.expect_above is not None:
        assert got > fig.expect_above, f"{fig.id}: {fig.call}{fig.args} = {got}, not above {fig.expect_above} ({fig.source})"
    else:
        assert got == fig.expect, f"{fig.id}: {fig.call}{fig.args} = {got}, expected {fig.expect} ({fig.source})"


def _figure(fig_id: str) -> Any:
    return next(f.expect for f in FIGURES if f.id == fig_id)


@pytest.mark.parametrize("cipher,outer", [(GCM, "ipv4"), (GCM, "ipv6"), (CBC, "ipv4"), (CBC, "ipv6")])
def test_the_largest_inner_fits_exactly(cipher, outer):
    """The reference's largest inner packet is the largest: one byte more does not fit."""
    expected = _figure(f"max-inner-{cipher.split('-')[1]}-{outer}-1500")
    assert m.outer_packet_len(cipher, outer, expected) <= 1500 < m.outer_packet_len(cipher, outer, expected + 1)


def test_the_gate_is_conservative_by_63_bytes_for_gcm_over_ipv4():
    """Page 000 / FreeBSD: the worst-case header costs GCM over IPv4 63 bytes of path MTU."""
    assert _figure("max-inner-gcm-ipv4-1500") - _figure("forwarded-ipv6-limit-ipv4-outer") == 63
    assert m.inner_for_ping_data(1398, "ipv6") == m.max_inner(GCM, "ipv4", 1500)


@pytest.mark.parametrize("text, message", [
    ("figures: []", "non-empty list under 'figures'"),
    ("figures:\n- {id: a, call: max_inner, args: [], source: s}", r"figures\[0\] \(a\): give exactly one of"),
    ("figures:\n- {id: a, call: nope, args: [], expect: 1, source: s}", r"field 'call': 'nope' is not one of"),
    ("figures:\n- {id: a, call: max_inner, args: [], expect: 1}", r"field 'source' is missing"),
    ("figures:\n- {id: a, call: max_inner, args: [], expect: 1, source: ' '}", r"field 'source' is empty"),
])
def test_a_bad_figures_file_names_the_entry_and_field(tmp_path, text, message):
    p = tmp_path / "figures.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_figures(p)


@pytest.mark.parametrize(
    "call",
    [
        lambda: m.max_inner("aes-ccm", "ipv4", 1500),
        lambda: m.max_inner(GCM, "ipx", 1500),
        lambda: m.esp_payload_len(GCM, -1),
        lambda: m.ping_data_for_inner(20, "ipv6"),
        lambda: m.max_inner(GCM, "ipv4", 40),
        lambda: m.ipv4_gate_applies(3, True),
    ],
)
def test_bad_input_is_a_clear_error(call):
    with pytest.raises(ValueError):
        call()


@given(
    cipher=st.sampled_from(m.CIPHERS),
    outer=st.sampled_from(m.FAMILIES),
    mtu=st.integers(min_value=576, max_value=9216),
)
def test_max_inner_is_the_largest_that_fits(cipher, outer, mtu):
    n = m.max_inner(cipher, outer, mtu)
    assert m.outer_packet_len(cipher, outer, n) <= mtu
    assert m.outer_packet_len(cipher, outer, n + 1) > mtu
