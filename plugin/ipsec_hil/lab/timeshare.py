"""Where a run's wall time goes: seconds by category, each second counted once (issue 15).

Why: "the suite waits for traffic, not for itself" can only be kept if the run says where
its time went -- traffic, tunnel bring-up, SSH, counter settling, stream start/stop,
probes, the rest -- so that the next regression shows on the page instead of as a run
that is merely slower. This module is the accounting; the places that spend the time
mark themselves once each (``with spent("settle"):`` or ``@spent("ssh", ...)``) and the
pytest plugin (ipsec_hil.timeshare_plugin) puts the totals on the page.

The rules, and why:

- **One second, one category.** The open categories form a stack and elapsed time is
  charged to the innermost one (the top), so a stream's start/stop does not also count
  its traffic, and the categories plus "other" (time no category was open: collection,
  pytest, the tests' own Python) sum to the wall time.
- **A transport joins the phase it serves** (``within_phase=True``, used for SSH and shell
  commands): every phase talks to the appliances through commands, so a command run while
  bring-up, settle or a probe is open is that phase's time; only a command run outside
  every phase (a test's counter read, a ping, a lock) is charged to "ssh". Charged to
  the innermost otherwise, "bring-up" would be a few milliseconds of Python and the
  page could not say what a tunnel costs. How much time commands took in all, phases
  included, is kept beside it (:attr:`Breakdown.inclusive`, :attr:`Breakdown.calls`).
- **A cap** (``cap=seconds``): traffic is the seconds a test asked for; what its iperf3
  client takes beyond them (connecting, the final exchange) is charged to the enclosing
  category ("stream start/stop"), or to "other" when none is open.
- **Only one thread is accounted**: the thread that runs the tests (pytest's main thread;
  :meth:`TimeShare.restart` names it). Helper threads (a ping stream beside a rekey, six
  concurrent iperf3 clients) run while the main thread waits; counting them too would
  count the same wall second twice. Their wait is charged to whatever the main thread has
  open, else to "other".
- Never hold a category open across a ``yield`` to tests (a fixture's setup and
  teardown are separate ``with`` blocks): everything the tests did meanwhile would be
  charged to it.

Library code: no pytest; ``spent`` works from a Python prompt (its totals are this
process's, since :meth:`TimeShare.restart`).
"""

from __future__ import annotations

import threading
import time
from contextlib import ContextDecorator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

TRAFFIC = "traffic"
BRING_UP = "bring-up"
SSH = "ssh"
SETTLE = "settle"
STREAM = "stream start/stop"
PROBES = "probes"
OTHER = "other"

#: The page's row order (issue 15's list); a category not listed here follows them by name.
ORDER = (TRAFFIC, BRING_UP, SSH, SETTLE, STREAM, PROBES)


@dataclass
class _Frame:
    category: str  # what was opened
    charge: str | None  # who is charged while this frame is the top (None: "other")
    cap: float | None
    outermost: bool  # the first open frame of its category: its span is the inclusive time
    entered: float
    own: float = 0.0  # seconds charged to ``charge`` within this frame (nested frames charging it too)


class TimeShare:
    """Seconds by category for one process (see the module's docstring for the rules)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.restart()

    def restart(self, thread: threading.Thread | None = None) -> None:
        """Start the wall clock again with empty totals; ``thread`` (default: the main
        thread) is the one whose time is accounted. Changed in place, so every ``spent``
        made earlier (a decorator bound at import) keeps counting here."""
        with self._lock:
            self._owner = (thread or threading.main_thread()).ident
            self._started = self._clock()
            self._mark = self._started
            self._stack: list[_Frame] = []
            self._seconds: dict[str, float] = {}
            self._inclusive: dict[str, float] = {}
            self._calls: dict[str, int] = {}

    def spent(self, category: str, *, cap: float | None = None, within_phase: bool = False) -> "Spent":
        """A context manager (and decorator) charging the time inside it to ``category``."""
        return Spent(self, category, cap, within_phase)

    # -- the stack (called by Spent, on the accounted thread only)

    def _accounted(self) -> bool:
        return threading.get_ident() == self._owner

    def _charge_top(self, now: float) -> None:
        if self._stack:
            top = self._stack[-1]
            dt = now - self._mark
            top.own += dt
            if top.charge is not None:
                self._seconds[top.charge] = self._seconds.get(top.charge, 0.0) + dt
        self._mark = now

    def _push(self, category: str, cap: float | None, within_phase: bool) -> None:
        with self._lock:
            now = self._clock()
            self._charge_top(now)
            parent = self._stack[-1].charge if self._stack else None
            charge = parent if within_phase and parent is not None else category
            outermost = all(f.category != category for f in self._stack)
            self._stack.append(_Frame(category, charge, cap, outermost, now))
            if outermost:  # a write that renames is one SSH operation, not two
                self._calls[category] = self._calls.get(category, 0) + 1

    def _pop(self) -> None:
        with self._lock:
            if not self._stack:  # restarted while a category was open: nothing to close
                return
            now = self._clock()
            self._charge_top(now)
            frame = self._stack.pop()
            if frame.outermost:
                self._inclusive[frame.category] = self._inclusive.get(frame.category, 0.0) + now - frame.entered
            parent = self._stack[-1] if self._stack else None
            if frame.cap is not None and frame.own > frame.cap and frame.charge is not None:
                excess = frame.own - frame.cap
                frame.own = frame.cap
                self._seconds[frame.charge] -= excess
                if parent is not None and parent.charge is not None:
                    self._seconds[parent.charge] = self._seconds.get(parent.charge, 0.0) + excess
                    parent.own += excess
            if parent is not None and parent.charge == frame.charge:
                # the parent's category was charged meanwhile (a command inside traffic):
                # its cap must see that time as its own
                parent.own += frame.own

    # -- reading

    def snapshot(self) -> "Breakdown":
        """The totals so far (an open category counts up to now) and the wall time since restart."""
        with self._lock:
            now = self._clock()
            seconds = dict(self._seconds)
            if self._stack and self._stack[-1].charge is not None:
                top = self._stack[-1]
                seconds[top.charge] = seconds.get(top.charge, 0.0) + now - self._mark
            inclusive = dict(self._inclusive)
            for f in self._stack:
                if f.outermost:
                    inclusive[f.category] = inclusive.get(f.category, 0.0) + now - f.entered
            return Breakdown(now - self._started, seconds, inclusive, dict(self._calls))


class Spent(ContextDecorator):
    """``with spent(...)`` / ``@spent(...)``: holds no state of its own (the accumulator's
    stack does), so one instance may be entered again and again, from nested calls too."""

    def __init__(self, share: TimeShare, category: str, cap: float | None, within_phase: bool) -> None:
        self.share = share
        self.category = category
        self.cap = cap
        self.within_phase = within_phase

    def __enter__(self) -> "Spent":
        if self.share._accounted():
            self.share._push(self.category, self.cap, self.within_phase)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.share._accounted():
            self.share._pop()


@dataclass
class Breakdown:
    """One process's (or several summed) seconds by category, and the wall time they share.

    ``seconds``: exclusive (each second once); ``inclusive``: the time a category was open
    at all, nested phases included (for "ssh": every command, also those inside phases);
    ``calls``: how often it was opened (not counting openings inside itself). ``processes`` > 1 when xdist workers were summed:
    then ``wall`` is their summed wall time, not the run's.
    """

    wall: float
    seconds: dict[str, float] = field(default_factory=dict)
    inclusive: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    processes: int = 1

    @property
    def other(self) -> float:
        return max(0.0, self.wall - sum(self.seconds.values()))

    def rows(self) -> list[tuple[str, float]]:
        """(category, seconds) in the page's order, every category of :data:`ORDER` shown
        (a zero says "this run did none of it"), then any other category, then "other"."""
        extra = sorted(c for c in self.seconds if c not in ORDER)
        return [(c, max(0.0, self.seconds.get(c, 0.0))) for c in (*ORDER, *extra)] + [(OTHER, self.other)]

    def to_dict(self) -> dict[str, Any]:
        """Plain data (xdist carries it from a worker in ``workeroutput``)."""
        return {"wall": self.wall, "seconds": dict(self.seconds), "inclusive": dict(self.inclusive),
                "calls": dict(self.calls), "processes": self.processes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Breakdown":
        return cls(float(d.get("wall", 0.0)), {k: float(v) for k, v in (d.get("seconds") or {}).items()},
                   {k: float(v) for k, v in (d.get("inclusive") or {}).items()},
                   {k: int(v) for k, v in (d.get("calls") or {}).items()}, int(d.get("processes", 1)))

    @classmethod
    def total(cls, parts: Iterable["Breakdown"]) -> "Breakdown":
        """The sum of several processes' breakdowns (wall times summed too)."""
        out = cls(0.0, processes=0)
        for p in parts:
            out.wall += p.wall
            out.processes += p.processes
            for mine, theirs in ((out.seconds, p.seconds), (out.inclusive, p.inclusive)):
                for k, v in theirs.items():
                    mine[k] = mine.get(k, 0.0) + v
            for k, n in p.calls.items():
                out.calls[k] = out.calls.get(k, 0) + n
        return out


def share_text(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` ("n/a" of nothing), the terminal's and the page's."""
    return f"{100 * part / whole:.1f} %" if whole > 0 else "n/a"


def ratio_text(wall: float, traffic_asked: float) -> str:
    return f"{wall / traffic_asked:.2f}x" if traffic_asked > 0 else "n/a (no traffic asked)"


def terminal_lines(b: Breakdown, *, run_wall: float, traffic_asked: float) -> list[str]:
    """The table, short, for the terminal summary (the page's: ipsec_hil.lab.reporting.sections.time_share)."""
    width = max(len(c) for c, _ in b.rows())
    lines = [f"{c:<{width}}  {s:>9,.1f} s  {share_text(s, b.wall):>7}" for c, s in b.rows()]
    lines.append(f"{'wall':<{width}}  {b.wall:>9,.1f} s" + (f"  ({b.processes} workers summed)" if b.processes > 1 else ""))
    lines.append(f"wall {run_wall:,.1f} s / traffic asked {traffic_asked:,.1f} s = {ratio_text(run_wall, traffic_asked)}")
    return lines


#: This process's accumulator (restarted by the pytest plugin at configure).
SHARE = TimeShare()


def spent(category: str, *, cap: float | None = None, within_phase: bool = False) -> Spent:
    """Charge the time inside ``with spent(category):`` (or a ``@spent(...)`` function) to
    ``category`` in this process's :data:`SHARE` (rules: the module's docstring)."""
    return SHARE.spent(category, cap=cap, within_phase=within_phase)


__all__ = ["BRING_UP", "Breakdown", "ORDER", "OTHER", "PROBES", "SETTLE", "SHARE", "SSH", "STREAM", "Spent",
           "TRAFFIC", "TimeShare", "ratio_text", "share_text", "spent", "terminal_lines"]
