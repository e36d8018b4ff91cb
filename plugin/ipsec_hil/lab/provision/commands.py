"""The swanctl commands the provisioner runs itself: every child initiated in one remote
command, a child terminated by its unique id, an IKE_SA whose peer is gone forced away.

Why: strongSwan initiates one CHILD_SA per ``swanctl --initiate`` (vici's ``initiate``
takes one child), so N children are N swanctl processes -- but they need not be N round
trips to the appliance (0.1 s each over SSH to the virtual lab when idle, 0.3-0.7 s under
load; tens of ms on hardware). One POSIX sh script runs them on the appliance one after
the other, each behind a marker line carrying a random token (no swanctl output can forge
it) and followed by its exit status; each child's text is then read by the same parser as
a lone ``swanctl --initiate`` (parsers.swanctl_initiate).

Why one after the other and not concurrently: real charon 5.9.8 sends the log of an
IKE_SA to every swanctl waiting on it (vici's control log is filtered by IKE_SA, not by
child), so concurrent initiates on one IKE_SA each print the others' "CHILD_SA ...
established" and notify lines, and a child's SPIs and failure cause can no longer be told
from its output (tests/interop saw a child credited with its neighbour's SPIs). charon
negotiates the CREATE_CHILD_SA exchanges of one IKE_SA one at a time anyway, and each
waiting swanctl would hold one of its worker threads: concurrency would buy little.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Sequence

from ipsec_hil.lab.command import SWANCTL_TERMINATE, Command
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.parsers import swanctl_initiate
from ipsec_hil.lab.remote import RunResult

_MARK = "@@hil-initiate"


def initiate_script(conn: str, children: Sequence[str], timeout: float, token: str) -> str:
    """The sh script that initiates ``children`` of ``conn`` in order, each child's combined
    stdout+stderr between ``@@hil-initiate TOKEN begin I`` and ``@@hil-initiate TOKEN end I STATUS``."""
    t = int(max(1, timeout))
    lines = []
    for i, child in enumerate(children):
        cmd = swanctl_initiate.COMMAND("--child", child, "--ike", conn, "--timeout", t)
        lines += [f"echo '{_MARK} {token} begin {i}'", f"{cmd} 2>&1", f"echo \"{_MARK} {token} end {i} $?\""]
    return "\n".join(lines) + "\n"


def parse_script_output(stdout: str, children: Sequence[str], token: str) -> dict[str, Any]:
    """Split the script's output at its markers and parse each complete child's part, in
    order, up to the first child without one (a command that ended early)."""
    begin = re.compile(rf"^{_MARK} {re.escape(token)} begin (?P<i>[0-9]+)$")
    end = re.compile(rf"^{_MARK} {re.escape(token)} end (?P<i>[0-9]+) (?P<status>[0-9]+)$")
    parts: dict[int, tuple[int, list[str]]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if begin.match(line):
            current = []
        elif (m := end.match(line)) and current is not None:
            parts[int(m["i"])] = (int(m["status"]), current)
            current = None
        elif current is not None:
            current.append(line)
    out: dict[str, Any] = {}
    for i, child in enumerate(children):
        if i not in parts:
            break
        status, text = parts[i]
        out[child] = swanctl_initiate.parse("\n".join(text) + "\n", "", status)
    return out


def initiate_children(app: Any, conn: str, children: Sequence[str], timeout: float,
                      note: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """Initiate every child of ``conn`` on ``app`` with one remote command. Returns child ->
    InitiateResult in ``children``'s order; ``note(child, result)`` is called for each child
    with a result -- also when the command ended early, before the LabError naming the first
    child without one (so a teardown knows what was initiated)."""
    if not children:
        return {}
    token = os.urandom(6).hex()
    r: RunResult = app.host.run(initiate_script(conn, children, timeout, token),
                                timeout=len(children) * (int(max(1, timeout)) + 5) + 30)
    results = parse_script_output(r.stdout, children, token)
    if note:
        for child, res in results.items():
            note(child, res)
    if len(results) < len(set(children)):
        missing = next(c for c in children if c not in results)
        tail = " | ".join(r.stderr.strip().splitlines()[-3:])
        raise LabError(f"{getattr(app, 'name', 'appliance')}: initiate of {missing} "
                       f"({children.index(missing) + 1} of {len(children)}): no complete output, the command "
                       f"ended early (status {r.status}{': ' + tail if tail else ''})")
    return results


def terminate_child_id(app: Any, unique_id: int, timeout: float) -> RunResult:
    """``swanctl --terminate --child-id N``: one CHILD_SA by its unique id, wherever it lives
    (a child the peer filed under another connection's IKE_SA is not reached by ``--ike``)."""
    t = int(max(1, timeout))
    return app.host.run(SWANCTL_TERMINATE("--child-id", unique_id, "--timeout", t), timeout=t + 30)


def terminate_ike_forced(app: Any, ike: str) -> RunResult:
    """``swanctl --terminate --ike X --force``: destroy the IKE_SA without waiting for the peer's
    answer to the DELETE. Only for an IKE_SA whose orderly terminate timed out (a peer that
    rebooted does not know it and never answers): charon would otherwise keep it DELETING for
    its whole retransmission schedule (about 165 s with the defaults)."""
    return app.host.run(forced_terminate(ike), timeout=35)


def forced_terminate(ike: str) -> Command:
    """``swanctl --terminate --ike X --force --timeout 5``: :func:`terminate_ike_forced`'s line,
    and a dead run's tunnel journal's (provision.recovery)."""
    return SWANCTL_TERMINATE("--ike", ike, "--force", "--timeout", 5)
