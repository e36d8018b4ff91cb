"""One injection: frames sent by the peer (or a bench port), tags counted on the far LAN.

Why shell-only file handling: the programs (scripts.py) are written by the same sh script
that starts them, so nothing relies on SFTP and the shell seeing the same /tmp (the virtual
lab maps SFTP paths); the frames travel as the sender's stdin.  The receiver starts first
and says it is listening (a ready file, checked by the starting script); the sender sends
the whole batch -- one process, the frames paced -- and the END frame last; the receiver
stops shortly after END arrives (or at its cap, when END itself was lost).
"""
from __future__ import annotations

import json
import logging
import shlex
import struct
import time
from dataclasses import dataclass, field

from ipsec_hil.lab.remote.shell import Host, argv, random_token
from ipsec_hil.lab.timeshare import TRAFFIC, spent

from .craft import Frame, Inner, InjectError, min_inner
from .scripts import RECEIVER, SENDER, UDP_SENDER

log = logging.getLogger(__name__)
PYTHON = "python3"
TRANSFER_BPS = 250_000
"""A floor for how fast a batch reaches the sender over its SSH channel (bytes/s; the
virtual lab's Python sshd on a loaded 2-core machine), used only to size the waits."""


@dataclass(frozen=True)
class WirePath:
    """The outer path: frames to `dst` (the appliance under test), from `src` if given."""

    dst: str
    src: str | None = None


@dataclass
class Delivery:
    """What the far LAN saw of one batch."""

    frames: list = field(repr=False)  # Frame (injected ESP) or Datagram (outbound sweep)
    counts: dict[int, int]
    lengths: dict[int, int]  # UDP payload bytes per index
    end_seen: bool
    sent: int
    failed: int
    send_seconds: float
    seconds: float  # receiver start to result, wall time of the whole injection
    other: int = 0
    # what the pacing asked the sending to take: the batch's share of "traffic asked" (a
    # test adds it to its record's traffic_seconds), like an iperf3 stream's seconds
    paced_seconds: float = 0.0

    def times(self, frame: Frame) -> int:
        """How often the frame's inner packet came out on the far LAN."""
        return self.counts.get(frame.index, 0)

    def delivered(self) -> list[Frame]:
        return [f for f in self.frames if self.times(f)]

    def lost(self) -> list[Frame]:
        return [f for f in self.frames if not self.times(f)]

    def duplicated(self) -> list[Frame]:
        return [f for f in self.frames if self.times(f) > 1]

    def inner_len(self, frame: Frame, family: str) -> int | None:
        """The delivered inner packet's length (IP + UDP + payload), None if not delivered."""
        n = self.lengths.get(frame.index)
        return None if n is None else n + (20 if family == "ipv4" else 40) + 8


def _program(path: str, text: str) -> str:
    """sh lines that write a program to `path` (a here-document: same host, same /tmp)."""
    return f"cat > {shlex.quote(path)} <<'__HIL_WIRE_EOF__'\n{text.strip()}\n__HIL_WIRE_EOF__\n"


def _blob(frames: list[Frame]) -> bytes:
    return b"".join(struct.pack("!H", len(f.esp)) + f.esp for f in frames)


#: seconds between two looks for the receiver's answer: 10 ms, as a 50 ms poll added 25 ms
#: on average to each of a run's ~45 injections (issue 15)
ANSWER_POLL_S = 0.01


class _Receiver:
    """The counting program on ``receiver`` for one batch: started (listening) before the
    sender runs, its answer collected after, its files removed either way."""

    def __init__(self, receiver: Host, inner: Inner, cap: float) -> None:
        self.host, self.inner, self.cap = receiver, inner, cap
        self.base = f"/tmp/hil-wire-{random_token()}"
        self.removed = False

    def start(self) -> None:
        b = self.base
        start = _program(f"{b}-recv.py", RECEIVER) + "\n".join([
            f"nohup {argv(PYTHON, b + '-recv.py', self.inner.family, self.inner.dst, self.inner.port, self.inner.token.hex(), b + '-ready', f'{self.cap:g}', b + '-out')}"
            f" > /dev/null 2> {b}-err < /dev/null &",
            "p=$!", "i=0",
            "while [ $i -lt 200 ]; do",
            f"  [ -f {b}-ready ] && {{ echo $p; exit 0; }}",
            "  kill -0 $p 2>/dev/null || break", "  sleep 0.05; i=$((i+1))", "done",
            f"cat {b}-err >&2; exit 1", ""])
        self.host.run(start, timeout=30).check(f"wire receiver on {self.host.name}")

    def _files(self) -> str:
        b = self.base
        return f"{b}-recv.py {b}-ready {b}-out {b}-out.tmp {b}-err"

    def answer(self) -> dict:
        """The receiver's count; its files are removed in the same round trip."""
        b = self.base
        # the file comes GRACE (0.1 s) after END; looked for until the receiver's cap + 5 s
        polls = int((self.cap + 5) / ANSWER_POLL_S)
        wait = "\n".join([
            "i=0", f"while [ ! -s {b}-out ] && [ $i -lt {polls} ]; do sleep {ANSWER_POLL_S}; i=$((i+1)); done",
            f"if [ -s {b}-out ]; then cat {b}-out; rm -f {self._files()}; exit 0; fi",
            f"cat {b}-err >&2; exit 1", ""])
        out = self.host.run(wait, timeout=self.cap + 30).check(f"wire receiver on {self.host.name}").stdout
        self.removed = True
        return json.loads(out.strip())

    def remove(self) -> None:
        """The receiver's files, unless its answer took them already."""
        if not self.removed:
            self.host.run(f"rm -f {self._files()}\n", timeout=30)


def _run_batch(sender: Host, receiver: Host, inner: Inner, cap: float, program: str, args: list[str],
               stdin: bytes | None, frames: list, what: str, paced: float) -> Delivery:
    """Start the receiver, run one sender program to its end, collect the receiver's count.

    The sender's run is "traffic" in the run's breakdown for up to ``paced`` seconds (the
    pacing's duration); the rest of it (the frames' transfer, the program's start) and
    the receiver's start and answer are charged as usual (ipsec_hil.lab.timeshare)."""
    t0 = time.monotonic()
    rx = _Receiver(receiver, inner, cap)
    rx.start()
    path, runner = f"{rx.base}-send.py", f"{rx.base}-send.sh"
    run_line = argv(PYTHON, path, *args) + f"\nst=$?; rm -f {path} {runner}; exit $st\n"
    try:
        if stdin is None:
            with spent(TRAFFIC, cap=paced):
                res = sender.run(_program(path, program) + run_line, timeout=cap + 30)
        else:
            # the frames stream into the sender as it paces them (Host.run_file), instead of
            # a here-document the sender could only start after (1.9 s for 40 MB)
            sender.run(_program(path, program) + _program(runner, run_line), timeout=30).check(
                f"wire sender's program on {sender.name}")
            with spent(TRAFFIC, cap=paced):
                res = sender.run_file(runner, stdin=stdin, timeout=cap + 30)
        res.check(f"wire sender on {sender.name}")
        sent = json.loads(res.stdout.strip().splitlines()[-1])
        if stdin is not None and (sent.get("cut") or int(sent["sent"]) + int(sent["failed"]) != len(frames) + 1):
            raise InjectError(f"wire sender on {sender.name}: {sent['sent']} sent + {sent['failed']} failed of "
                              f"{len(frames) + 1} frames (its stdin ended early{' inside a frame' if sent.get('cut') else ''})")
        got = rx.answer()
    except BaseException as exc:
        if stdin is not None:  # the runner removes both itself when it ran to its end
            try:
                sender.run(f"rm -f {path} {runner}\n", timeout=30)
            except Exception as cleanup:  # noqa: BLE001 -- the injection's own error is the one to raise
                log.warning("%s: could not remove %s: %s", sender.name, runner, cleanup)
        if isinstance(exc, (ValueError, IndexError, KeyError)):
            raise InjectError(f"wire injection: unreadable answer ({exc})") from None
        raise
    finally:
        rx.remove()
    d = Delivery(frames=list(frames), counts={int(k): v for k, v in got["counts"].items()},
                 lengths={int(k): v for k, v in got["lengths"].items()}, end_seen=bool(got["end"]),
                 sent=int(sent["sent"]), failed=int(sent["failed"]), send_seconds=float(sent["seconds"]),
                 seconds=time.monotonic() - t0, other=int(got.get("other", 0)), paced_seconds=paced)
    log.info("%s %s -> %s: %d sent (%d failed, %d waits on a full local queue) in %.2fs, %d delivered, end %s",
             what, sender.name, inner.dst, d.sent, d.failed, int(sent.get("queue_full", 0)), d.send_seconds,
             len(d.delivered()), d.end_seen)
    if d.failed:
        log.warning("%s: sender errors %s", what, sent.get("errors"))
    return d


def inject(sender: Host, receiver: Host, path: WirePath, inner: Inner, frames: list[Frame],
           end: Frame, *, pps: float = 4000.0, rate_mbit: float | None = None,
           cap: float | None = None) -> Delivery:
    """Send `frames` then `end` from `sender` along `path`; count tags on `receiver`.

    The receiver listens on inner.dst / inner.port (an address of the host behind the
    appliance under test).  `rate_mbit` paces the bytes (None: frames/s only).  `cap`
    bounds the receiver's wait (default: the paced sending and transfer time plus 10 s).
    InjectError when a program cannot start or answer.
    """
    batch = [*frames, end]
    blob = _blob(batch)
    # the frames travel on the sender's stdin while it sends: a jumbo path's sweep is ~40 MB
    transfer = len(blob) / TRANSFER_BPS
    paced = max(len(batch) / pps, len(blob) * 8 / (rate_mbit * 1e6) if rate_mbit else 0.0)
    cap = cap if cap is not None else paced + 10.0 + transfer
    return _run_batch(sender, receiver, inner, cap, SENDER,
                      [path.dst, path.src or "-", f"{pps:g}", f"{(rate_mbit or 0) * 1e6:g}"], blob, frames,
                      "wire injection", paced)


@dataclass(frozen=True)
class Datagram:
    """One datagram of an outbound sweep: its tag index and inner packet length."""

    index: int
    inner_len: int


def sweep_udp(sender: Host, receiver: Host, inner: Inner, sizes: range, *, pps: float = 4000.0,
              rate_mbit: float | None = None) -> Delivery:
    """One UDP datagram of every inner size in `sizes` from `sender` (bound to inner.src)
    to `receiver` (listening on inner.dst), built on the sender -- the outbound sweep: the
    appliance under test encrypts what `sender` (itself, or the bench behind it) sends.

    Why built there: only the arguments travel, not ~40 MB of a jumbo path's sweep."""
    if sizes.step != 1 or not len(sizes) or sizes.start < min_inner(inner.family):
        raise InjectError(f"sweep sizes {sizes}: expected consecutive sizes from at least {min_inner(inner.family)}")
    frames = [Datagram(i, n) for i, n in enumerate(sizes)]
    paced = max(len(frames) / pps, sum(sizes) * 8 / (rate_mbit * 1e6) if rate_mbit else 0.0)
    return _run_batch(sender, receiver, inner, paced + 10.0, UDP_SENDER,
                      [inner.dst, str(inner.port), inner.src, inner.token.hex(), str(sizes.start), str(sizes[-1]),
                       f"{pps:g}", f"{(rate_mbit or 0) * 1e6:g}"], None, frames, "outbound sweep", paced)
