"""All children initiated in one remote command: each child's own output, status and outcome.

The script of :func:`initiate_children` runs for real in /bin/sh (``LocalHost``) against a
``swanctl`` on PATH that replays real strongSwan 5.9.8 captures (tests/golden/
swanctl_initiate, kernel-libipsec pair): the success, a TS_UNACCEPTABLE refusal, and output
that imitates the markers. What must hold: every child gets exactly its own text and exit
status, in order, whatever the text contains; a command that ends early is an error naming
the first child without a result, never a guessed outcome.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.parsers.swanctl_initiate import Outcome
from ipsec_hil.lab.provision.commands import initiate_children, initiate_script
from ipsec_hil.lab.remote.local import LocalHost

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "swanctl_initiate"
OK, REFUSED = "real-libipsec-ok", "real-libipsec-ts-unacceptable-create-child"


class _App:
    def __init__(self, host: LocalHost) -> None:
        self.host = host


@pytest.fixture
def app(tmp_path: Path) -> _App:
    """A host whose ``swanctl`` replays a capture chosen by the child's name, and logs its argv."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    cases = []
    for child, case, extra in (("ok", OK, ""), ("refused", REFUSED, ""),
                               ("forger", OK, "echo '@@hil-initiate 000000000000 end 0 0'\n")):
        status = (GOLDEN / f"{case}.status").read_text().strip() if (GOLDEN / f"{case}.status").exists() else "0"
        err = GOLDEN / f"{case}.stderr"
        cases.append(f"  *--child\\ {child}\\ *) {extra}cat {shlex.quote(str(GOLDEN / f'{case}.txt'))}; "
                     + (f"cat {shlex.quote(str(err))} >&2; " if err.exists() else "") + f"exit {status};;")
    (bindir / "swanctl").write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> {shlex.quote(str(calls))}\n"
        'case " $* " in\n' + "\n".join(cases) + "\n  *--child\\ dies\\ *) kill -9 $PPID;;\n"
        "  *) echo 'initiate failed: CHILD_SA config not found' >&2; exit 1;;\nesac\n")
    (bindir / "swanctl").chmod(0o755)
    host = LocalHost("fake")
    real_run = host.run

    def run(script: str, **kw):
        return real_run(f"PATH={shlex.quote(str(bindir))}:$PATH\n" + script, **kw)

    host.run = run  # type: ignore[method-assign]
    a = _App(host)
    a.calls = calls  # type: ignore[attr-defined]
    return a


def test_each_child_gets_its_own_outcome_in_order(app):
    seen = []
    res = initiate_children(app, "hil-x", ["refused", "ok"], timeout=20,
                            note=lambda c, r: seen.append((c, r.outcome)))
    assert list(res) == ["refused", "ok"]
    assert res["ok"].outcome is Outcome.ESTABLISHED and res["ok"].status == 0
    assert res["refused"].outcome is Outcome.TS_UNACCEPTABLE and res["refused"].status == 1
    assert seen == [("refused", Outcome.TS_UNACCEPTABLE), ("ok", Outcome.ESTABLISHED)]
    calls = app.calls.read_text().splitlines()
    assert calls == [f"--initiate --child {c} --ike hil-x --timeout 20" for c in ("refused", "ok")]


def test_a_marker_in_the_output_stays_the_childs_text(app):
    """A line imitating the markers (another token) is not taken for one: the parser sees it."""
    with pytest.raises(LabError, match="not a log line nor a result line: '@@hil-initiate 000000000000 end 0 0'"):
        initiate_children(app, "hil-x", ["forger"], timeout=20)


def test_a_command_that_ends_early_names_the_first_child_without_a_result(app):
    seen = []
    with pytest.raises(LabError, match=r"initiate of dies \(2 of 3\): no complete output, the command ended early"):
        initiate_children(app, "hil-x", ["ok", "dies", "ok2"], timeout=5, note=lambda c, r: seen.append(c))
    assert seen == ["ok"]  # what was initiated before is still told (the teardown needs it)


def test_the_script_is_one_command_per_child_quoted():
    text = initiate_script("hil-x", ["a b", "c;rm -rf /"], 7.9, "t0k")
    assert "swanctl --initiate --child 'a b' --ike hil-x --timeout 7 2>&1" in text
    assert "--child 'c;rm -rf /'" in text
    assert text.count("swanctl --initiate") == 2
