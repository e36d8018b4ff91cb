"""`python -m ipsec_hil_twin.ike.daemon --host-dir DIR`: the appliance's charon, in its namespace.

Why: the suite brings tunnels up with `swanctl` exactly as on hardware; this daemon
negotiates them with the peer appliance's daemon over UDP 500 (ipsec_hil_twin.ike.proto -- the
twin's own protocol, NOT interoperable with real IKEv2) and installs each child's two
associations into the local ESP engine (DIR/engine.sock).  Outcomes follow strongSwan
5.9.8: the responder picks a connection by addresses and identities (best match, ties
in load order); children whose selectors do not fit that connection's children get
TS_UNACCEPTABLE; an established IKE_SA with the same addresses, identities and
proposals is reused for further children (CREATE_CHILD_SA); no common proposal gives
NO_PROPOSAL_CHOSEN; a wrong key AUTHENTICATION_FAILED; an unreachable peer retransmits
(5 times by default, timing shortened, DIR/host.json `ike` or $TWIN_IKE_RETRANSMIT) and
gives up.

Deliberate differences from strongSwan, documented so nobody mistakes them:
- `start_action = trap` is emulated as start-on-load (no acquires in the twin).
- A CREATE_CHILD_SA that times out fails that child only; the IKE_SA is kept (a rekey
  that times out leaves the old child to its life_time, see ipsec_hil_twin.ike.rekey).
- ESP DH groups (PFS) are not compared; every CREATE_CHILD_SA uses a fresh X25519 anyway.
- `offload` of each association: DIR/host.json `kernel_cipher` (bool, or a map from
  tunnel/connection name to bool); a connection named `<tunnel>` or `<tunnel>-...` uses
  its tunnel's flag.  kernel -> offload false.

Faults (DIR/faults.json, re-read per packet): `peer_unreachable {}` -- every IKE packet
received is ignored; `child_never_up {child}` -- requests carrying that child are never
sent (initiator) or never answered (responder): the initiator retransmits and gives up,
no association is installed; `rekey_lost`, `old_sa_kept`, `counters_restart` -- see
ipsec_hil_twin.ike.rekey (old_sa_kept's leftovers leave the engine once it is off: a periodic tick
here and a sweep before every control request).

Rekeying and expiry follow strongSwan (ipsec_hil_twin.ike.lifetimes, ipsec_hil_twin.ike.rekey): children
rekey by themselves at rekey_time minus a jitter up to rand_time and at life_time are
deleted and created anew (5.9.8's recreate after a hard expiry);
DIR/host.json `ike.delete_rekeyed_delay` (default 5 s) is how long a rekeyed child's
inbound association outlives the rekey.

On start, DIR/root/usr/local/etc/swanctl/swanctl.conf (if present) is loaded and its
start actions honoured, as OPNsense does at boot.

Roles, one module each, sharing one IkeState (ipsec_hil_twin.ike.state: its IKE_SAs,
configuration, faults, tasks): configs (the loaded swanctl.conf), transport (UDP 500,
retransmits), initiator, responder, children (CHILD_SAs and their associations in the
engine), lifetimes (soft and hard expiry timers), rekey (CHILD_SA and IKE_SA rekeys,
expiry), control (ike.sock). Each part is given the state and the parts it calls, never
this Daemon: the Daemon only builds them, in the order their modules import each other
(transport, lifetimes -> children -> initiator -> rekey -> responder, control), and hands
the timers their rekey part and the transport its responder once both exist.
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from ipsec_hil_twin.machinery.labprocs import name_process

from .children import ChildSAs
from .control import ControlServer
from .initiator import Initiator
from .lifetimes import Lifetimes
from .model import Failed
from .rekey import Rekeys
from .responder import Responder
from .state import IkeState
from .transport import Timing, Transport

__all__ = ["Daemon", "Failed", "Timing", "main"]

SWANCTL_CONF = "/usr/local/etc/swanctl/swanctl.conf"
FLUSH_WAIT_S = 5.0
"""How long a reset waits for its cancelled tasks to unwind (they only await the engine
and UDP, so they end at once unless the machine is starved)."""


class Daemon:
    """One appliance's charon: builds the parts on one shared state and runs them."""

    def __init__(self, host_dir: str | Path, port: int = 500) -> None:
        self.state = s = IkeState(host_dir, port)
        self.hd, self.port, self.host, self.config, self.sas = s.hd, s.port, s.host, s.config, s.sas
        self.log, self.spawn = s.log, s.spawn
        self.transport = Transport(s)
        self.lifetimes = Lifetimes(s)
        self.children = ChildSAs(s, self.transport, self.lifetimes)
        self.initiator = Initiator(s, self.transport, self.children, self.lifetimes)
        self.rekeys = Rekeys(s, self.transport, self.children, self.initiator, self.lifetimes)
        self.lifetimes.act_with(self.rekeys)
        self.responder = Responder(s, self.children, self.lifetimes, self.rekeys)
        self.control = ControlServer(self)

    async def start(self) -> None:
        await self.transport.listen(self.responder)
        self.server = await self.control.start()
        boot_conf = self.hd.rootpath(SWANCTL_CONF)
        if boot_conf.is_file():
            try:
                res = self.load_file(str(boot_conf))
                self.log(f"boot: loaded {len(res['loaded'])} connections from {boot_conf}")
            except Exception as exc:  # a broken file must not keep the daemon down
                self.log(f"boot: loading {boot_conf} failed: {exc}")
        self.log(f"listening on UDP {self.port}, control {self.hd.ike_sock}")

    def load_file(self, path: str) -> dict[str, Any]:
        """swanctl --load-all: replace the configuration, then honour its start actions."""
        res = self.config.load_file(path)
        for child, conn in self.config.auto_start():
            self.spawn(self._auto_start(child, conn))
        return res

    async def _auto_start(self, child: str, conn: str) -> None:
        try:
            await self.initiator.initiate(child, conn, lambda line: self.log(f"start_action: {line}"))
        except Failed as exc:
            self.log(f"start_action: {conn}/{child}: {exc}")

    async def flush(self) -> None:
        """Daemon shutdown (a reboot): pending work cancelled, all SAs gone from the engine.

        The cancelled tasks are waited for (up to FLUSH_WAIT_S) before the SAs are
        removed: a task unwinding after the flush could otherwise still add or delete
        associations in the engine of the next test's tunnel."""
        cancelled = [t for t in self.state.tasks if t is not asyncio.current_task()]
        for t in cancelled:
            t.cancel()
        if cancelled:
            await asyncio.wait(cancelled, timeout=FLUSH_WAIT_S)
        await self.children.flush()
        await self.rekeys.sweep_kept(reboot=True)


async def _main(host_dir: str, port: int) -> None:
    d = Daemon(host_dir, port)
    await d.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    await stop.wait()
    await d.flush()
    d.hd.ike_sock.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ipsec_hil_twin.ike.daemon", description=__doc__.split("\n")[0])
    ap.add_argument("--host-dir", required=True, help="the appliance's host dir (DESIGN.md)")
    ap.add_argument("--port", type=int, default=500, help="UDP port (500; tests may pick another)")
    args = ap.parse_args(argv)
    name_process("twin-ike")
    asyncio.run(_main(args.host_dir, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
