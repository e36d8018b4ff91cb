"""--driver MODEL=PATH parsing: every bad value is a usage error naming it (fast, no lab)."""

from __future__ import annotations

import hashlib

import pytest

from ipsec_hil.driver_plugin import parse_driver_options


def test_relative_path_resolved_and_build_read(tmp_path):
    (tmp_path / "octep.ko").write_bytes(b"module bytes")
    got = parse_driver_options(["xgs3300=octep.ko"], tmp_path)
    path, build = got["xgs3300"]
    assert path == tmp_path / "octep.ko"
    assert build.md5 == hashlib.md5(b"module bytes").hexdigest() and build.size == 12


@pytest.mark.parametrize("values,why", [
    (["octep.ko"], "expected MODEL=PATH"),
    (["xgs9999=octep.ko"], "unknown model 'xgs9999'; known: xgs3300, xgs136"),
    (["xgs3300=missing.ko"], "no such file"),
    (["xgs3300=empty.ko"], "file is empty"),
    (["xgs3300=a.ko", "xgs3300=a.ko"], "a second build for xgs3300"),  # one build per model
])
def test_bad_values_are_usage_errors(tmp_path, values, why):
    """The error names the value that is wrong: the last one given."""
    (tmp_path / "empty.ko").write_bytes(b"")
    (tmp_path / "a.ko").write_bytes(b"a")
    with pytest.raises(pytest.UsageError, match=f"--driver '{values[-1]}': .*{why}"):
        parse_driver_options(values, tmp_path)


def test_comparison_figures_are_checked_by_name():
    """--compare-figures: the known names pass in order; an unknown, an empty or a repeated one
    is refused naming it (compare_plugin turns the ValueError into a usage error)."""
    from ipsec_hil.lab.comparing.build_comparison import KNOWN_FIGURES, check_figures

    assert check_figures(["up", " pdr "]) == ("up", "pdr")
    assert set(KNOWN_FIGURES) == {"up", "down", "pdr", "cpu"}
    with pytest.raises(ValueError, match="unknown comparison figure 'ndr'; known: up, down, pdr"):
        check_figures(["up", "ndr"])
    with pytest.raises(ValueError, match="no comparison figure named"):
        check_figures(["", " "])
    with pytest.raises(ValueError, match="named twice"):
        check_figures(["pdr", "pdr"])
