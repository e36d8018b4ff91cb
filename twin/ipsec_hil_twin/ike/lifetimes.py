"""Soft and hard expiry: when a CHILD_SA or IKE_SA rekeys by itself, and when a child dies.

Why its own module: the suite's rekey tests set short `rekey_time`/`life_time`/`rand_time`
and count on strongSwan's arithmetic, which lives here and nowhere else:

- child (child_cfg.c get_lifetime/apply_jitter, child_sa.c install): the soft expiry is
  `rekey_time - jitter`, jitter uniform in [0, rand_time + 1) truncated to whole seconds;
  the hard expiry is `life_time` after the install, without jitter; 0 disables either
  (but see child_rekey_after for rekey_time = 0 with a rand_time).
  Defaults (vici_config.c check_lifetimes): life_time = rekey_time + 10 %, rand_time =
  life_time - rekey_time.
- IKE_SA (peer_cfg.c get_rekey_time, ike_sa.c set_state): `rekey_time - random() %
  rand_time`; rand_time defaults to over_time, 10 % of rekey_time.

Times are monotonic whole seconds, as charon's time_monotonic(), so what `--list-sas`
prints (`rekeying in`, `expires in`) is the scheduled second minus the current one.
A timer that fires for a child no longer INSTALLED (rekeyed, deleted) does nothing;
the roles act on the timers through ipsec_hil_twin.ike.rekey.
"""
from __future__ import annotations

import asyncio
import random
import time
from typing import Protocol

from .model import ChildSA, IkeSA
from .state import IkeState


class Expiry(Protocol):
    """What the timers start when they fire (ipsec_hil_twin.ike.rekey.Rekeys)."""

    async def auto_rekey(self, child: ChildSA) -> None: ...

    async def expire(self, child: ChildSA) -> None: ...

    async def auto_rekey_ike(self, sa: IkeSA) -> None: ...


def child_rekey_after(rekey_time: int, rand_time: int, rng: random.Random) -> int:
    """Seconds from install to the soft expiry (child_cfg.c apply_jitter); 0: none.

    Negative for `rekey_time = 0` with a rand_time (the default when life_time is set):
    apply_jitter computes 0 - jitter as a double and stores it in a uint64, which wraps
    (x86-64), so charon's rekey_time lies that many seconds in the past -- 5.9.8 lists
    `rekeying in -Ns` for such a child (seen on real charon) -- while the kernel's soft
    lifetime is astronomically far: it never rekeys."""
    if rand_time <= 0:
        return max(0, rekey_time)
    after = int(rekey_time - (rand_time + 1) * rng.random())  # int(): truncation toward 0, as C
    return after if rekey_time <= 0 else max(1, after)


def ike_rekey_after(rekey_time: int, rand_time: int | None, rng: random.Random) -> int:
    """Seconds from establishment to the IKE_SA rekey (peer_cfg.c get_rekey_time)."""
    if rekey_time <= 0:
        return 0
    jitter = rekey_time // 10 if rand_time is None else rand_time
    if jitter <= 0:
        return rekey_time
    return max(1, rekey_time - rng.randrange(jitter))


class Lifetimes:
    """Arms the expiry timers of children and IKE_SAs on the daemon's event loop.

    What a timer starts is the rekey part's (act_with): it is built after the parts that
    arm timers (children, initiator), so it is given here once they exist."""

    def __init__(self, state: IkeState, rng: random.Random | None = None) -> None:
        self.state = state
        self.rng = rng or random.Random()
        self._expiry: Expiry | None = None

    def act_with(self, expiry: Expiry) -> None:
        self._expiry = expiry

    @property
    def rekeys(self) -> Expiry:
        if self._expiry is None:
            raise RuntimeError("Lifetimes: a timer fired before act_with() gave it the rekey part")
        return self._expiry

    def child_rekey(self, child: ChildSA) -> int:
        """The child's jittered rekey seconds, drawn once (at install, where strongSwan
        hands it to the kernel as the SAs' soft lifetime) and reused by arm_child."""
        if child.rekey_after is None:
            child.rekey_after = child_rekey_after(child.rekey_time, child.rand_time, self.rng)
        return child.rekey_after

    def arm_child(self, child: ChildSA) -> None:
        """Schedule a newly installed child's soft and hard expiry."""
        now = time.monotonic()
        child.install_s = int(now)
        rekey = self.child_rekey(child)
        if rekey:
            child.rekey_at = child.install_s + rekey
        if rekey > 0:
            self._later(rekey, self._soft, child)
        if child.life_time > 0:
            child.expire_at = child.install_s + child.life_time
            self._later(child.life_time, self._hard, child)

    def arm_ike(self, sa: IkeSA) -> int:
        """Schedule an established IKE_SA's rekey; returns the seconds (0: none)."""
        after = ike_rekey_after(sa.conn.rekey_time, sa.conn.rand_time, self.rng)
        if after:
            sa.rekey_at = int(time.monotonic()) + after
            self._later(after, self._ike, sa)
        return after

    @staticmethod
    def _later(seconds: int, fire, obj) -> None:
        """Fire `seconds` after now, i.e. within the listed second or just after it: an
        INSTALLED child lists `rekeying in 0s` at most, never a time in the past (the
        states after the rekey do, as 5.9.8's).  Not aligned to whole seconds, so two
        appliances with the same lifetimes do not rekey in lockstep."""
        asyncio.get_running_loop().call_later(seconds, fire, obj)

    def _soft(self, child: ChildSA) -> None:
        if child.state == "INSTALLED":
            self.state.spawn(self.rekeys.auto_rekey(child))

    def _hard(self, child: ChildSA) -> None:
        if child.state != "DESTROYING":
            self.state.spawn(self.rekeys.expire(child))

    def _ike(self, sa: IkeSA) -> None:
        if sa.state == "ESTABLISHED" and self.state.sas.get(sa.spi_i) is sa:
            self.state.spawn(self.rekeys.auto_rekey_ike(sa))
