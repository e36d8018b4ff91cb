"""Hypothesis fuzz of every parser: garbage in -> a value or ParseError, nothing else.

Inputs are random text and mutated real samples (the golden success cases): truncate,
delete/duplicate/swap a line, flip a character, turn a digit into a letter or another
digit, insert junk. Besides "no other exception", two teeth checks (best effort, as the
brief asks): for netstat_esp, iperf3, setkey_spd and the health parsers (HEALTH_PARSERS) a
truncated sample never parses into the same value as the full one, and for netstat_esp,
setkey_spd and the health parsers a changed digit never yields the original value.
Bounded: 200 examples per parser and strategy, no deadline, no example database on disk.
"""
from __future__ import annotations

import dataclasses
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipsec_hil.lab.parsers import MODULES, ParseError

from .golden import Case, all_cases, normalise

SUCCESS: dict[str, list[Case]] = {}
for _case in all_cases():
    if _case.expected is not None:
        SUCCESS.setdefault(_case.command, []).append(_case)

FUZZ = settings(
    max_examples=200, deadline=None, database=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# the appliance-health parsers keep every number and name they read: any cut or changed digit shows
HEALTH_PARSERS = ("netstat_m", "vmstat_z", "vmstat_m", "dmesg", "boottime")
MUTATIONS = ("truncate", "delete_line", "dup_line", "swap_lines", "flip_char", "digit_to_letter",
             "digit_to_digit", "insert_junk")


def _value_or_parse_error(case: Case, stdout: str | None = None, stderr: str | None = None) -> object:
    """The normalised parse, or the ParseError; any other exception propagates (= a failure)."""
    if stderr is not None:
        case = dataclasses.replace(case, stderr=stderr)
    try:
        return normalise(case.call(stdout))
    except ParseError as exc:
        assert str(exc), "ParseError without a message"
        return exc


@st.composite
def mutated(draw: st.DrawFn, text: str) -> tuple[str, str, int]:
    """(mutation kind, mutated text, index of the changed character or -1)."""
    kind = draw(st.sampled_from(MUTATIONS))
    lines = text.splitlines(keepends=True)
    if not text:
        return kind, draw(st.text(max_size=50)), -1
    if kind == "truncate":
        cut = draw(st.integers(0, len(text) - 1))
        return kind, text[:cut], cut
    if kind in ("delete_line", "dup_line", "swap_lines") and lines:
        i = draw(st.integers(0, len(lines) - 1))
        if kind == "delete_line":
            return kind, "".join(lines[:i] + lines[i + 1:]), -1
        if kind == "dup_line":
            return kind, "".join(lines[: i + 1] + [lines[i]] + lines[i + 1:]), -1
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
        return kind, "".join(lines), -1
    if kind in ("digit_to_letter", "digit_to_digit"):
        digits = [k for k, c in enumerate(text) if c.isdigit()]
        if digits:
            k = draw(st.sampled_from(digits))
            alphabet = string.ascii_letters if kind == "digit_to_letter" else string.digits.replace(text[k], "")
            return kind, text[:k] + draw(st.sampled_from(alphabet)) + text[k + 1:], k
    if kind == "insert_junk":
        k = draw(st.integers(0, len(text)))
        return kind, text[:k] + draw(st.text(min_size=1, max_size=20)) + text[k:], k
    k = draw(st.integers(0, len(text) - 1))
    return "flip_char", text[:k] + draw(st.characters(codec="utf-8")) + text[k + 1:], k


@pytest.mark.parametrize("command", MODULES)
@FUZZ
@given(data=st.data())
def test_mutated_samples_parse_or_raise_parse_error(command: str, data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(SUCCESS[command]), label="sample")
    on_stderr = bool(case.stderr) and data.draw(st.booleans(), label="mutate stderr")
    original = case.stderr if on_stderr else case.stdout
    kind, text, at = data.draw(mutated(original), label="mutation")
    result = _value_or_parse_error(case, stderr=text) if on_stderr else _value_or_parse_error(case, stdout=text)
    if on_stderr or isinstance(result, ParseError) or text.strip() == original.strip():
        return
    if command == "netstat_esp" and not case.expected["loaded"]:
        return  # "not loaded" samples: truncating to nothing legitimately means "not loaded" too
    if command in ("netstat_esp", "iperf3", "setkey_spd", *HEALTH_PARSERS) and kind == "truncate":
        assert result != case.expected, f"{case.name}: truncated at {at} parses like the full sample"
    if command in ("netstat_esp", "setkey_spd", *HEALTH_PARSERS) and kind in ("digit_to_letter", "digit_to_digit"):
        assert result != case.expected, f"{case.name}: changed digit at {at} gives the original value"


_JUNK_LINES = st.sampled_from([
    "", "esp:", "\t1 packet in", "{", "}", "[IKE] x", "initiate failed: x", "--- x ping statistics ---",
    "list-sas reply {}", "No SAD entries.", "Id Refs Address Size Name", "\tinet6 ::1 prefixlen 128",
    "lab: #1, ESTABLISHED, IKEv2, 0000000000000000_i* 0000000000000000_r", '{"statistics": {}}',
    "MD5 (x) = 0cc175b9c0f1b6a831c399e269772661", "   route to: ::1", "a.b: 1",
    "No SPD entries.", "10.0.0.0/8[any] 10.1.0.0/16[any] any", "\tout ipsec",
    "\tesp/tunnel/192.0.2.1-192.0.2.2/unique:1",
    "\tspid=1 seq=0 pid=1 scope=global ", "\trefcnt=1", "\thw offl if: mce0", "PATTERN: 0xff",
    "\thw offl use: Nov 30 10:00:01 2026\thw offl allocated: 1\thw offl: 84(bytes)",
    "0/0/0 requests for mbufs denied (mbufs/clusters/mbuf+clusters)", '{"mbuf-statistics": {}}',
    "ITEM                   SIZE  LIMIT     USED     FREE      REQ     FAILSLEEP XDOMAIN",
    "mbuf:                   256, 6507312,    1211,    6244,102991870,   0,   0,   0",
    "         Type InUse MemUse Requests  Size(s)", "       octep    12  4098K       40  64,256",
    "{ sec = 1700000000, usec = 123 } Tue Nov 14 22:13:20 2023", "lock order reversal:",
])


@pytest.mark.parametrize("command", MODULES)
@FUZZ
@given(data=st.data())
def test_random_text_parses_or_raises_parse_error(command: str, data: st.DataObject) -> None:
    case = SUCCESS[command][0]
    text = data.draw(st.one_of(
        st.text(max_size=400),
        st.lists(_JUNK_LINES | st.text(max_size=40), max_size=12).map("\n".join),
    ), label="text")
    _value_or_parse_error(case, stdout=text)
