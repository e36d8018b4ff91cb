"""What a dead run left on an appliance, undone by the next run: files, routes, SAs, charon.

Why more than ``files.recover``: a run killed with its tunnel up left (issue 40, tried by
hand) both ends' IKE and CHILD SAs, their kernel SAs and SPD entries, and its connection
loaded in charon -- ``files.recover`` put the files back but nothing told charon. So the
provisioner journals, before it loads a connection, an undo entry that ends the
connection's SAs on that end (:func:`sa_undo_script`: forced, idempotent; the policies go
with them), and :func:`recover` -- ``files.recover`` (undo scripts newest first, then the
files) -- then makes charon load the restored files, which unloads the dead run's
connection. Call it under the appliance lock, as ``files.recover``.

Library code: no pytest.
"""

from __future__ import annotations

import logging
from typing import Any

from ipsec_hil.lab import files
from ipsec_hil.lab.provision.commands import forced_terminate

log = logging.getLogger(__name__)

#: where charon's files live: a restored file under it means charon must load again
SWANCTL_DIR = "/usr/local/etc/swanctl"
#: the words an SA undo entry's ``what`` carries (how :func:`recover` knows charon changed)
SA_UNDO_MARK = "SAs ended (charon loads the restored files after)"


def sa_undo_script(conn: str) -> str:
    """sh for the journal: end every SA of ``conn`` on this end now, without waiting for the
    peer (``--force``: the peer may be the dead run's other end, or gone). Idempotent: a
    connection without SAs is the wanted state."""
    return f"{forced_terminate(conn)} >/dev/null 2>&1 || true\n"


def sa_undo_what(app_name: str, conn: str) -> str:
    return f"{app_name}: {conn}'s {SA_UNDO_MARK}"


def recover(app: Any, journal_dir: str = files.DEFAULT_JOURNAL_DIR, timeout: float = 60) -> list[str]:
    """``files.recover`` on ``app``'s host, then ``swanctl --load-all`` when it ended a dead
    run's SAs or restored a file of charon's, so charon holds what the files say (the dead
    run's connection and its PSK unloaded). Returns the report lines."""
    done = files.recover(app.host, journal_dir, timeout)
    if any(SA_UNDO_MARK in line or SWANCTL_DIR + "/" in line for line in done):
        if app.host.exists(f"{SWANCTL_DIR}/swanctl.conf"):
            res = app.swanctl_load()
            done.append(f"{app.name}: swanctl --load-all after the recovery (status {res.status})")
    return done


def recover_ends(apps: Any, journal_dir: str = files.DEFAULT_JOURNAL_DIR, timeout: float = 60) -> dict[str, list[str]]:
    """:func:`recover` on the two (or more) ends of a tunnel, in the order that works: first
    every end's route and interface undos, then each end's SA undos, files and reload.

    Why both ends at once: ending one end's SAs sends its peer a DELETE, which removes the
    peer's half too; a route the peer added inside the tunnel's selectors lives with the
    engine's association (the twin models the engine's table so), and a ``route delete`` run
    after the association is gone no longer reaches it -- the route stayed, hidden, and the
    next bring-up's ``route add`` was refused as existing (found by
    tests/safety/test_every_step_sigkill.py). Call it holding every end's lock.
    Returns appliance -> report lines."""
    done: dict[str, list[str]] = {a.name: [] for a in apps}
    failed: list[str] = []
    for app in apps:
        for u in reversed(files.pending_undos(app.host, journal_dir, timeout)):
            if SA_UNDO_MARK in u.what:
                continue
            try:
                app.host.run(u.script, timeout=timeout).check(f"undo {u.what}")
                files.forget_undo(app.host, u, timeout)
                done[app.name].append(f"undone: {u.describe()}")
            except Exception as e:  # noqa: BLE001 -- its entry stays; recover() below tries it again
                failed.append(f"{app.name}: {u.what}: {e}")
    for app in apps:
        done[app.name] += recover(app, journal_dir, timeout)
    if failed:
        log.warning("recovery: undone at the second try (after the first failed): %s", "; ".join(failed))
    return done
