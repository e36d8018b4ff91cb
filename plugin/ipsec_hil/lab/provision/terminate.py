"""Ending a tunnel's SAs from the initiator, and proving neither end still lists any.

Why its own module: what real charon 5.9.8 showed (tests/interop) decides how: the children
of a shared-identity tunnel may live in ANOTHER connection's IKE_SA (``--ike`` of the plan
reaches none of them), the responder's own terminate always failed with status 1 once the
initiator's DELETE had removed its half (so a real failure looked the same), and a teardown
is only done when both ends' listings say so.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping, Sequence

from ipsec_hil.lab.errors import ProvisionError
from ipsec_hil.lab.provision import verify
from ipsec_hil.lab.provision.commands import terminate_child_id, terminate_ike_forced

#: terminate's bound grows by this per child of the IKE_SA: the daemon uninstalls every
#: child's SAs and policies before it answers (the twin ~0.1-0.2 s a child; 256 children
#: took 48 s where a fixed 15 s had always timed out unnoticed)
TERMINATE_S_PER_CHILD = 0.5
#: how often the responder is read again while its half of a terminated tunnel goes away
GONE_POLL_S = 0.5
#: how long a responder's half may stay ESTABLISHED and unchanged, its initiator clean,
#: before the wait for it ends (check_gone: nobody is deleting it)
STALLED_S = 3.0


def bound_s(children: int) -> float:
    """Seconds a terminate of an IKE_SA with ``children`` children may take."""
    return 15 + TERMINATE_S_PER_CHILD * children


def terminate_on_initiator(app: Any, conn: str, initiated: Mapping[str, Any]) -> str:
    """On the initiator only (its DELETE removes the peer's half too). First each initiated
    child (``initiated``: child -> InitiateResult) that is NOT inside an IKE_SA named ``conn``,
    by its unique id (``--ike`` would not reach it), then the IKE_SA. An ``--ike`` that did not
    complete (a peer that rebooted never answers the DELETE) is forced: charon would keep the
    IKE_SA DELETING through its whole retransmission schedule (~165 s). Statuses are noted,
    not judged: :func:`check_gone` reads both ends afterwards."""
    sas = app.list_sas()
    done = []
    for uid, ike in verify.strays(conn, initiated, sas):
        st = terminate_child_id(app, uid, timeout=15).status
        done.append(f"child #{uid} in IKE_SA {ike} (status {st})")
    mine = [ike for ike in sas.ike_sas if ike.name == conn]
    if mine:
        st = app.swanctl_terminate(ike=conn, timeout=bound_s(sum(len(ike.children) for ike in mine))).status
        done.append(f"IKE_SA {conn} (status {st})")
        if st != 0:
            done.append(f"forced (status {terminate_ike_forced(app, conn).status})")
    return f"{app.name}: terminated " + (", ".join(done) or f"nothing (no SA of {conn} listed)")


def check_gone(initiator: Any, responder: Any, conn: str, children: Sequence[str],
               initiated: Mapping[str, Any]) -> str:
    """Both ends' ``--list-sas``: nothing of the plan may remain (its IKE_SA, a child of its
    names, or one carrying an SPI its bring-up negotiated); raises ProvisionError naming it.

    The initiator's listing is final once its terminate returned. The responder removes its
    half AFTER it answered the DELETE (charon destroys the IKE_SA once the response is sent;
    the twin then uninstalls child after child), so while the initiator is clean the
    responder is read again until it is too, for at most :func:`bound_s`, every
    ``GONE_POLL_S``; whatever it still lists then is an error.

    Except a half nobody is deleting: a responder that processed the DELETE lists its
    IKE_SA DELETING (charon sets it before it answers; so does the twin) until it is gone.
    One that still lists it ESTABLISHED, the listing unchanged for ``STALLED_S``, never got
    or never took the DELETE (the initiator gave up on a lost rekey, or rebooted); its own
    timers end it, long after any bound, so the wait ends there (seen in the fault matrix:
    15.6 s per such teardown of one child, three in one shard's part).
    """
    spis = verify.negotiated_spis(initiated)
    left = {initiator.name: verify.leftovers(conn, children, spis, initiator.list_sas())}
    deadline = time.monotonic() + bound_s(len(children))
    seen: list[str] | None = None
    since = time.monotonic()
    while True:
        sas = responder.list_sas()
        left[responder.name] = now_left = verify.leftovers(conn, children, spis, sas)
        if left[initiator.name] or not now_left or time.monotonic() > deadline:
            break
        established = any(ike.name == conn and ike.state == "ESTABLISHED" for ike in sas.ike_sas)
        if not established or now_left != seen:
            seen, since = now_left, time.monotonic()
        elif time.monotonic() - since >= STALLED_S:
            break
        time.sleep(GONE_POLL_S)
    bad = "; ".join(f"{n} still lists {verify.summarize(l)}" for n, l in left.items() if l)
    if bad and not left[initiator.name]:
        bad += f" ({clear_half(responder, conn, children, spis)})"
    if bad:
        raise ProvisionError(f"{conn} not terminated: {bad}")
    return f"no SA of {conn} left on {' or '.join(left)}"


def clear_half(app: Any, conn: str, children: Sequence[str], spis: Iterable[str]) -> str:
    """The responder's half of a tunnel whose initiator holds nothing any more, terminated
    there by force; returns what was done and what is left, for the teardown's error.

    Why: an initiator may destroy its IKE_SA without a DELETE (a rekey or liveness check
    that timed out, as charon does), so its terminate reaches nobody and the responder
    keeps its half until its own timers end it -- on real charon too. Left there, the
    half's outbound association, older than any new one for the same selectors, takes the
    traffic of the next tunnel between the same networks (seen in the fault matrix: every
    healthy run of the next row lost everything). The error is still raised: a half left
    behind is news, but the next test starts on a clean lab."""
    names, spiset = set(children), {s for s in spis if s}
    done = []
    sas = app.list_sas()
    for ike, c in sas.children():
        if ike.name != conn and (c.name in names or {c.spi_in, c.spi_out} & spiset):
            done.append(f"child #{c.uniqueid} (status {terminate_child_id(app, c.uniqueid, timeout=5).status})")
    if any(ike.name == conn for ike in sas.ike_sas):
        done.append(f"IKE_SA {conn} (status {terminate_ike_forced(app, conn).status})")
    still = verify.leftovers(conn, children, spiset, app.list_sas())
    return (f"terminated on {app.name} by force: {', '.join(done) or 'nothing matched'}; "
            + (f"it still lists {verify.summarize(still)}" if still else "now clean"))
