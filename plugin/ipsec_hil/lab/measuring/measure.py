"""Counter snapshots, settling, deltas, ledgers and the invariants the pages assert.

Why: the pages read every counter before and after a run, on both ends, and state
invariants between the deltas ("tx_encrypt = out_taken = FROM_KN_TO_IPSEC_ENCR; the peer's
ESP input +7,397,169 exactly, its authentication drops 0"). This module is that bookkeeping:

- :class:`Snapshot` -- all driver counters (logical names) and the kernel's ESP statistics
  of one appliance, read in one round trip (``Appliance.snapshot()``);
- :func:`settle` / :func:`settle_all` -- counters are only compared after two equal
  consecutive reads (several appliances read concurrently);
- :class:`Delta` (one appliance) and :class:`Ledger` (all of them) with ``table()``/``csv()``;
- ``expect_*`` -- invariant checks raising :class:`InvariantError` whose message states the
  invariant in the pages' words *and* carries the whole ledger, so a failure is readable
  without rerunning anything.

Counter references are ``"<appliance>:<counter>"``; the kernel's ESP statistics appear as
``esp.<freebsd-key>`` (e.g. ``"peer3300:esp.received-packets"``). A bare counter name in
:func:`expect_zero` means "on every appliance that has it".
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import io
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Protocol, Sequence, Union

from ipsec_hil.lab.errors import InvariantError, LabError
from ipsec_hil.lab.expectations.expect import if_drop
from ipsec_hil.lab.measuring import quiet
from ipsec_hil.lab.measuring.offload import SaOffload
from ipsec_hil.lab.remote.together import each_at_once
from ipsec_hil.lab.timeshare import SETTLE, spent

ESP_PREFIX = "esp."


class SettleTimeout(LabError):
    """Counters kept moving for the whole settle timeout (traffic still running?)."""


@dataclass(frozen=True)
class Snapshot:
    """Every counter of one appliance at one moment (one round trip)."""

    appliance: str
    time: float
    counters: Mapping[str, int]
    esp: Mapping[str, int] = field(default_factory=dict)
    esp_loaded: bool = True
    #: per SA, the IPsec offload framework's counters (FreeBSD 15, setkey -D's hw offl
    #: lines: ipsec_hil.lab.measuring.offload); () on a kernel without the framework
    sas: tuple[SaOffload, ...] = ()
    #: per port of the lab file, its (input drops, output drops) as `netstat -i -d` shows
    #: them (if_data's ifi_iqdrops, ifi_oqdrops: a full receive ring, a full send queue;
    #: output None when the appliance printed no Drop column), the ledger's doors (issue 52)
    ifs: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)

    def values(self) -> dict[str, int]:
        """Driver counters, ``esp.<key>`` kernel statistics, each SA's ``sa.0x<spi>.hw_offl``
        door (offload.SaOffload.values) and each port's ``if.<port>.idrop`` / ``.odrop``
        (:func:`if_drop`) in one flat mapping."""
        out = dict(self.counters)
        out.update({ESP_PREFIX + k: v for k, v in self.esp.items()})
        for sa in self.sas:
            out.update(sa.values())
        for port, (idrop, odrop) in self.ifs.items():
            out[if_drop(port, "in")] = idrop
            if odrop is not None:
                out[if_drop(port, "out")] = odrop
        return out

    def same_values(self, other: "Snapshot") -> bool:
        return self.values() == other.values()


def unchanged_since(last: tuple[float, Snapshot] | None, snap: Snapshot, now: float) -> tuple[float, Snapshot]:
    """What an appliance keeps as its last read (``Appliance.last_read``) after reading
    ``snap`` at ``now``: ``(since, snap)``, ``since`` the time of the first of the reads
    that all showed these values (``now`` if they changed). :func:`settle_all` starts
    from it, so a meter right after another settles with one read: the previous meter's
    settled pair already spans the interval, and an equal read now extends it."""
    if last is not None and last[1].same_values(snap):
        return last[0], snap
    return now, snap


class _Snapshots(Protocol):
    name: str

    def snapshot(self) -> Snapshot: ...


@spent(SETTLE)
def settle(
    appliance: _Snapshots,
    interval: float | None = None,
    timeout: float = 10.0,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Snapshot:
    """Read snapshots until two consecutive reads are equal; return the last one.

    Raises :class:`SettleTimeout` naming the counters that were still moving. Its time,
    the snapshots' SSH included, is the run's "settle" share (ipsec_hil.lab.timeshare).
    """
    return settle_all([appliance], interval, timeout, sleep=sleep, clock=clock)[0]


@spent(SETTLE)
def settle_all(
    appliances: Sequence[_Snapshots],
    interval: float | None = None,
    timeout: float = 10.0,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[Snapshot]:
    """:func:`settle` for several appliances at once: their snapshots are read concurrently
    (one thread per appliance, each its own connection), so a meter on two ends costs one
    end's settle, not the sum (issue 15: settles were 14 % of an acceptance run, read one
    end after the other). Each appliance is done at its own first pair of equal reads at
    least ``interval`` apart; the others are read again. Snapshots in the order given.

    An appliance's last read (its ``last_read``, kept by ``Appliance.snapshot`` with
    :func:`unchanged_since`: the snapshot and since when -- clock() at the end of the
    first read -- its values were read unchanged) is the first of the pair when there is
    one: a meter that starts where the previous one settled then costs one read, not two
    reads and the interval (issue 15). The rule is unchanged -- the counters are
    monotonic, so two equal reads at least ``interval`` apart mean nothing moved between
    them however long ago the first was.

    ``interval`` None: :func:`ipsec_hil.lab.measuring.quiet.settle_interval` -- the appliances'
    counter lag, or a load's tail for their first settle after a load.
    """
    apps = list(appliances)
    if not apps:
        return []
    if interval is None:
        interval = quiet.settle_interval(apps)
    start = clock()
    prev: dict[int, Snapshot] = {}
    due = start  # when the next read may start: ``interval`` after the newest first read
    fresh = []
    for i, app in enumerate(apps):
        last = getattr(app, "last_read", None)
        if last is None:
            fresh.append(i)
        else:
            prev[i] = last[1]
            due = max(due, last[0] + interval)
    if fresh:
        prev.update(zip(fresh, _read_all([apps[i] for i in fresh])))
        due = clock() + interval
    reads = 1
    done: dict[int, Snapshot] = {}
    while True:
        wait = due - clock()
        if wait > 0:
            sleep(wait)
        pending = [i for i in range(len(apps)) if i not in done]
        cur = dict(zip(pending, _read_all([apps[i] for i in pending])))
        due = clock() + interval
        reads += 1
        for i, snap in cur.items():
            if snap.same_values(prev[i]):
                done[i] = snap
        if len(done) == len(apps):
            quiet.settled(apps)
            return [done[i] for i in range(len(apps))]
        if clock() - start >= timeout:
            lines = []
            for i in sorted(set(cur) - set(done)):
                a, b = prev[i].values(), cur[i].values()
                moving = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                lines.append(f"{getattr(apps[i], 'name', cur[i].appliance)}: counters did not settle within "
                             f"{timeout:g} s ({reads} reads, {interval:g} s apart); still moving: {', '.join(moving)}")
            raise SettleTimeout("; ".join(lines))
        prev.update(cur)


def _read_all(apps: Sequence[_Snapshots]) -> list[Snapshot]:
    """One snapshot of each appliance, read concurrently when there are several."""
    return each_at_once(lambda a: a.snapshot(), apps, name="hil-snapshot")


# --------------------------------------------------------------------------- deltas


@dataclass(frozen=True)
class Row:
    appliance: str
    counter: str
    before: int | None
    after: int | None

    @property
    def delta(self) -> int | None:
        if self.before is None or self.after is None:
            return None
        return self.after - self.before


@dataclass(frozen=True)
class Delta:
    """One appliance's counters before and after."""

    before: Snapshot
    after: Snapshot

    def __post_init__(self) -> None:
        if self.before.appliance != self.after.appliance:
            raise LabError(
                f"delta between two appliances: {self.before.appliance} and {self.after.appliance}"
            )

    @property
    def appliance(self) -> str:
        return self.before.appliance

    @property
    def rows(self) -> list[Row]:
        b, a = self.before.values(), self.after.values()
        names = list(b) + [k for k in a if k not in b]
        return [Row(self.appliance, n, b.get(n), a.get(n)) for n in names]

    def __getitem__(self, counter: str) -> int:
        b, a = self.before.values(), self.after.values()
        if counter not in b or counter not in a:
            raise KeyError(f"{self.appliance} has no counter {counter!r} in both snapshots")
        return a[counter] - b[counter]

    def __contains__(self, counter: str) -> bool:
        return counter in self.before.values() and counter in self.after.values()


Ref = Union[str, int, Sequence[str]]


@dataclass(frozen=True)
class Check:
    """One invariant as stated and whether it held (for the page)."""

    text: str
    held: bool
    detail: str = ""
    #: frames lost and counted by a door (expect_conserved's counted loss), 0 for any other check
    loss: int = 0


_collector: contextvars.ContextVar[list[Check] | None] = contextvars.ContextVar("hil_checks", default=None)


@contextlib.contextmanager
def collect_checks() -> Iterator[list[Check]]:
    """Collect every invariant checked inside the block (held or broken) -- for the page."""
    checks: list[Check] = []
    token = _collector.set(checks)
    try:
        yield checks
    finally:
        _collector.reset(token)


class Ledger:
    """Deltas of every appliance of one measurement, plus the checks made on them."""

    def __init__(self, deltas: Iterable[Delta], title: str = "") -> None:
        self.deltas: dict[str, Delta] = {}
        for d in deltas:
            if d.appliance in self.deltas:
                raise LabError(f"ledger: appliance {d.appliance} given twice")
            self.deltas[d.appliance] = d
        self.title = title
        self.checks: list[Check] = []

    @classmethod
    def from_snapshots(cls, before: Iterable[Snapshot], after: Iterable[Snapshot], title: str = "") -> "Ledger":
        b = {s.appliance: s for s in before}
        a = {s.appliance: s for s in after}
        if set(a) != set(b):
            raise LabError(f"ledger: before has {sorted(b)}, after has {sorted(a)}")
        return cls((Delta(b[n], a[n]) for n in b), title)

    # -- lookups
    def delta(self, ref: str) -> int:
        appliance, counter = self._split(ref)
        try:
            return self.deltas[appliance][counter]
        except KeyError as e:
            raise LabError(f"ledger{(' ' + self.title) if self.title else ''}: {e.args[0]}") from None

    def value(self, ref: Ref) -> int:
        """An int as is, a reference's delta, or the sum of a list of references' deltas."""
        if isinstance(ref, bool):
            raise TypeError("a bool is not a counter reference")
        if isinstance(ref, int):
            return ref
        if isinstance(ref, str):
            return self.delta(ref)
        return sum(self.delta(r) for r in ref)

    def expand(self, name: str) -> list[str]:
        """``"a:x"`` -> [it]; bare ``"x"`` -> ``"<app>:x"`` for every appliance that has x."""
        if ":" in name:
            return [name]
        refs = [f"{app}:{name}" for app, d in self.deltas.items() if name in d]
        if not refs:
            raise LabError(f"ledger: no appliance has a counter {name!r}")
        return refs

    @staticmethod
    def _split(ref: str) -> tuple[str, str]:
        if ":" not in ref:
            raise LabError(f"counter reference {ref!r} must be '<appliance>:<counter>'")
        app, counter = ref.split(":", 1)
        return app, counter

    @property
    def rows(self) -> list[Row]:
        return [r for d in self.deltas.values() for r in d.rows]

    # -- renderings
    def table(self) -> str:
        """Fixed-width text: appliance, counter, before, after, delta (the pages' +N form)."""

        def num(v: int | None, signed: bool = False) -> str:
            if v is None:
                return "-"
            return f"{v:+,}" if signed else f"{v:,}"

        rows = [("appliance", "counter", "before", "after", "delta")]
        rows += [(r.appliance, r.counter, num(r.before), num(r.after), num(r.delta, True)) for r in self.rows]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = []
        if self.title:
            lines.append(f"ledger: {self.title}")
        for i, r in enumerate(rows):
            lines.append(
                f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}  {r[4]:>{widths[4]}}"
            )
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["appliance", "counter", "before", "after", "delta"])
        for r in self.rows:
            w.writerow([r.appliance, r.counter, _blank(r.before), _blank(r.after), _blank(r.delta)])
        return buf.getvalue()

    def markdown(self) -> str:
        lines = ["| appliance | counter | before | after | delta |", "|---|---|---:|---:|---:|"]
        for r in self.rows:
            d = "-" if r.delta is None else f"{r.delta:+,}"
            b = "-" if r.before is None else f"{r.before:,}"
            a = "-" if r.after is None else f"{r.after:,}"
            lines.append(f"| {r.appliance} | {r.counter} | {b} | {a} | {d} |")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Ledger({self.title!r}, appliances={list(self.deltas)})"


def _blank(v: int | None) -> str | int:
    return "" if v is None else v


# --------------------------------------------------------------------------- invariants


def _record(ledger: Ledger | None, check: Check) -> None:
    if ledger is not None:
        ledger.checks.append(check)
    sink = _collector.get()
    if sink is not None:
        sink.append(check)


def _describe(ref: Ref) -> str:
    if isinstance(ref, int):
        return f"{ref:,}"
    if isinstance(ref, str):
        return ref
    return " + ".join(ref)


def _fail(ledger: Ledger | None, text: str, detail: str, loss: int = 0) -> InvariantError:
    _record(ledger, Check(text, False, detail, loss=loss))
    msg = f"invariant broken: {text}\n  {detail}"
    if ledger is not None:
        msg += "\n\n" + ledger.table()
    return InvariantError(msg)


def expect_equal(ledger: Ledger, a: Ref, b: Ref, why: str, *, at_least: int | None = None) -> int:
    """``delta(a) == delta(b)`` exactly ("the peer's ESP input +7,397,169 exactly").

    ``at_least``: the packets the traffic asked must have moved (from iperf3's report or a
    ping count) -- an equality that also holds at 0 = 0 proves nothing about a tunnel that
    carried nothing, so the measurements pass it and the equality fails below it.
    """
    va, vb = ledger.value(a), ledger.value(b)
    text = f"{why}: {_describe(a)} = {_describe(b)}" + (f", at least {at_least:,}" if at_least is not None else "")
    if va != vb:
        raise _fail(ledger, text, f"{_describe(a)} {va:+,} but {_describe(b)} {vb:+,} (differ by {va - vb:+,})")
    if at_least is not None and va < at_least:
        raise _fail(ledger, text, f"both {va:+,}, fewer than the {at_least:,} packets the traffic must have "
                                  f"made: the tunnel did not carry it")
    _record(ledger, Check(text, True, f"both {va:+,}"))
    return va


def expect_conserved(ledger: Ledger, sent: Ref, received: Ref, why: str, *, drops: Sequence[str],
                     tolerance: float, at_least: int) -> int:
    """The ledger closes on counts (issue 52): ``sent`` = ``received`` + every door between
    them (``drops``: the counters of frames lost after ``sent`` counted them and before
    ``received`` could -- the sender's transmit drops, a port's full send queue, the
    receiver's missed receive ring), EXACTLY: a frame that vanished uncounted is a defect,
    whatever its number. The counted loss is then judged by the test's loss rule: at most
    ``tolerance`` of what was sent ("the congested tolerance"); the check says which door
    counted it, so a page shows counted loss with its counter. Either way at least
    ``at_least`` packets moved. Returns the sent count."""
    doors = list(drops)
    if isinstance(received, int) or not doors:
        closing: Ref = received if not doors else received + ledger.value(doors)
    else:
        closing = [received, *doors] if isinstance(received, str) else [*received, *doors]
    count = expect_equal(ledger, sent, closing, why, at_least=at_least)
    lost = ledger.value(doors) if doors else 0
    if lost:
        moved = ", ".join(f"{r} {ledger.delta(r):+,}" for r in doors if ledger.delta(r))
        text = f"{why}: counted loss ({moved}) within {tolerance:.4%} of {_describe(sent)}"
        allowed = tolerance * count
        if lost > allowed:
            raise _fail(ledger, text, f"{lost:,} of {count:,} frames lost ({lost / count:.4%}), allowed {allowed:,.6g}",
                        loss=lost)
        _record(ledger, Check(text, True, f"{lost:,} of {count:,} frames lost, counted", loss=lost))
    return count


def expect_zero(ledger: Ledger, names: Iterable[str] | str, why: str = "") -> None:
    """Every named counter's delta is 0 ("rx_bad 0, rx_blocked 0")."""
    if isinstance(names, str):
        names = [names]
    refs = [r for n in names for r in ledger.expand(n)]
    text = f"{why + ': ' if why else ''}{', '.join(refs)} stay 0"
    moved = [(r, ledger.delta(r)) for r in refs if ledger.delta(r) != 0]
    if moved:
        raise _fail(ledger, text, "moved: " + ", ".join(f"{r} {v:+,}" for r, v in moved))
    _record(ledger, Check(text, True, "all 0"))


def expect_at_least(value: float, floor: float, why: str, *, ledger: Ledger | None = None, unit: str = "") -> float:
    """``value >= floor`` (throughput floors, established children, ...)."""
    u = f" {unit}" if unit else ""
    text = f"{why}: at least {floor:,.6g}{u}"
    if not value >= floor:
        raise _fail(ledger, text, f"measured {value:,.6g}{u}, below the floor {floor:,.6g}{u}")
    _record(ledger, Check(text, True, f"measured {value:,.6g}{u}"))
    return value


def expect_within(a: Ref | float, b: Ref | float, rel_tol: float, why: str, *, ledger: Ledger | None = None) -> None:
    """``|a - b| <= rel_tol * max(|a|, |b|)`` -- e.g. frames handed vs decrypted when congested."""

    def val(x: Ref | float) -> float:
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return x
        if ledger is None:
            raise LabError(f"expect_within: {x!r} is a counter reference but no ledger was given")
        return ledger.value(x)

    va, vb = val(a), val(b)
    text = f"{why}: {_describe_any(a)} within {rel_tol:.4%} of {_describe_any(b)}"
    diff = abs(va - vb)
    allowed = rel_tol * max(abs(va), abs(vb))
    if diff > allowed:
        raise _fail(ledger, text, f"{va:,.6g} vs {vb:,.6g}: differ by {diff:,.6g}, allowed {allowed:,.6g}")
    _record(ledger, Check(text, True, f"{va:,.6g} vs {vb:,.6g}"))


def _describe_any(x: Ref | float) -> str:
    if isinstance(x, float):
        return f"{x:,.6g}"
    return _describe(x)  # type: ignore[arg-type]
