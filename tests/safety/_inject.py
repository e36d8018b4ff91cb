"""Interruption points for the integrity scenarios, shared by the tests and the driver.

Why a wrapper around the Host and not a patched provisioner: the interruption must hit the
library where a real one would -- between or inside the commands it sends -- without the
library knowing. ``InterruptingHost`` forwards everything to the real SshHost and, at the
first call matching a step's trigger, lets the command run on the appliance and then
interrupts (the change is made, its answer is lost: the hardest case for a rollback).

Steps (the provisioning of an inner-IPv6 tunnel, in order; "peer" = the remote end):
  backup    the peer's first backup copy (cp -p into the journal)
  write     the peer's conf.d file written (SFTP)
  load      the peer's swanctl --load-all
  initiate  swanctl --initiate (the local end)
  v6route   the first route add (inner IPv6 prerequisites)
  test      a command of the test body while the tunnel is up
  teardown  the first swanctl --terminate of the teardown
"""

from __future__ import annotations

import re
import threading
from typing import Any, Callable

STEPS = ("backup", "write", "load", "initiate", "v6route", "test", "teardown")
TEST_COMMAND = "echo hil-safety-test-body"


def trigger(step: str, local: str, remote: str) -> Callable[[str, str, str], bool]:
    """Predicate (host name, operation, text) -> True at the step's command."""

    def t(host: str, op: str, text: str) -> bool:
        if step == "backup":
            return host == remote and op == "run" and "cp -p" in text
        if step == "write":
            return host == remote and op == "write" and "/conf.d/" in text
        if step == "load":
            return host == remote and op == "run" and "--load-all" in text
        if step == "initiate":
            return host == local and op == "run" and "--initiate" in text
        if step == "v6route":
            return op == "run" and text.startswith("route") and " add " in text
        if step == "test":
            return op == "run" and TEST_COMMAND in text
        if step == "teardown":
            return op == "run" and "--terminate" in text
        raise ValueError(f"unknown step {step!r}; known: {STEPS}")

    return t


class Armed:
    """Shared one-shot state: fires once, then every host behaves normally again."""

    def __init__(self, match: Callable[[str, str, str], bool], action: Callable[["InterruptingHost", Callable[[], Any]], Any]) -> None:
        self.match = match
        self.action = action
        self.fired = threading.Event()

    def check(self, host: "InterruptingHost", op: str, text: str) -> bool:
        if self.fired.is_set() or not self.match(host.name, op, text):
            return False
        self.fired.set()
        return True


class InterruptingHost:
    """A Host that forwards to ``inner`` and runs ``armed.action`` at the armed step."""

    def __init__(self, inner: Any, armed: Armed) -> None:
        self.inner = inner
        self.armed = armed
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run(self, script: str, *, timeout: float | None = None, stdin: bytes | None = None):
        call = lambda s=script: self.inner.run(s, timeout=timeout, stdin=stdin)  # noqa: E731
        if self.armed.check(self, "run", script):
            return self.armed.action(self, call, script)
        return call()

    def write_file_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        call = lambda s=None: self.inner.write_file_atomic(path, data, mode)  # noqa: E731
        if self.armed.check(self, "write", path):
            return self.armed.action(self, call, None)
        return call()

    # the Host protocol's other calls: steps too (a read or a test for a file is a point
    # between two changes where a run can die), interrupted the same way
    def read_file(self, path: str) -> bytes:
        return self._file_op("read", path, lambda s=None: self.inner.read_file(path))

    def exists(self, path: str) -> bool:
        return self._file_op("exists", path, lambda s=None: self.inner.exists(path))

    def remove(self, path: str, missing_ok: bool = True) -> None:
        return self._file_op("remove", path, lambda s=None: self.inner.remove(path, missing_ok))

    def rename(self, src: str, dst: str) -> None:
        return self._file_op("rename", f"{src} -> {dst}", lambda s=None: self.inner.rename(src, dst))

    def _file_op(self, op: str, text: str, call: Callable[..., Any]) -> Any:
        if self.armed.check(self, op, text):
            return self.armed.action(self, call, None)
        return call()


def wrap_hosts(apps: dict, armed: Armed) -> None:
    """Every appliance's host behind one :class:`InterruptingHost` sharing ``armed``."""
    for a in apps.values():
        a.host = InterruptingHost(a.host, armed)


def unwrap_hosts(apps: dict) -> None:
    for a in apps.values():
        while isinstance(a.host, InterruptingHost):
            a.host = a.host.inner


# ------------------------------------------------------------- every step, by identity


Step = tuple[str, str, str, int]  # (host, operation, normalised text, n-th identical call)

#: a made-up token: a clock reading (seconds since the epoch with a fraction; first, or its
#: digits would be taken for hex and a short fraction left), or 6+ hex digits with at least
#: one decimal digit (no word of the scripts), or any random hex where the library puts it
#: (after the run id in a journal name, in a restore's temp name, a lease's nonce) -- digits
#: or not; and a lease record's pid (the recording's process is not the killed run's)
_TOKEN = re.compile(r"\b\d{9,}\.\d+\b|\b(?=[0-9a-f]*[0-9])[0-9a-f]{6,}\b|(?<=<run>-)[0-9a-f]{6}\b"
                    r"|(?<=\.restore-)[0-9a-f]{8}\b|(?<=\"pid\": )\d+|(?<=\"nonce\": \")[0-9a-f]+")


class StepNames:
    """Names each remote call of a run by what it is, not by when it came: (host, operation,
    text with the run id replaced, n) for the n-th identical call. Why not a plain index: the
    same provisioning run sends the same calls per host, but a timing-dependent extra call
    (a poll, a retry) would shift every later index; a name stays the step it was."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._seen: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()

    def name(self, host: str, op: str, text: str) -> Step:
        # the run id, and the tokens a run makes up (journal names carry a nanosecond clock
        # and random hex, a restore its temp name, an initiate its marker, a journal entry its time)
        norm = _TOKEN.sub("<t>", " ".join(text.replace(self.run_id, "<run>").split()))
        key = (host, op, norm)
        with self._lock:
            n = self._seen.get(key, 0) + 1
            self._seen[key] = n
        return (host, op, norm, n)


def recorder(run_id: str, into: list[Step]) -> Callable[[str, str, str], bool]:
    """A trigger that never fires and appends the name of every call to ``into``."""
    names = StepNames(run_id)

    def rec(host: str, op: str, text: str) -> bool:
        into.append(names.name(host, op, text))
        return False

    return rec


class AtStep:
    """A trigger that fires at the call named ``step`` (see :class:`StepNames`); it keeps
    the names it saw, so a step never reached can be told from its nearest neighbour."""

    def __init__(self, run_id: str, step: Step) -> None:
        self.names = StepNames(run_id)
        self.step = step
        self.seen: list[Step] = []

    def __call__(self, host: str, op: str, text: str) -> bool:
        name = self.names.name(host, op, text)
        self.seen.append(name)
        return name == self.step

    def nearest(self) -> str:
        """The seen call most like the step (same host and operation, longest common start)."""
        host, op, text, _ = self.step
        same = [s for s in self.seen if s[0] == host and s[1] == op]
        if not same:
            return "no call of that host and operation"

        def common(s: Step) -> int:
            return next((i for i, (a, b) in enumerate(zip(s[2], text)) if a != b), min(len(s[2]), len(text)))

        best = max(same, key=common)
        i = common(best)
        return f"nearest: #{best[3]} differing at character {i}: ...{best[2][max(0, i - 30):i + 50]!r}"


def at_step(run_id: str, step: Step) -> AtStep:
    return AtStep(run_id, step)


def describe(step: Step) -> str:
    host, op, text, n = step
    first = text if len(text) <= 90 else text[:87] + "..."
    return f"{host} {op} #{n}: {first}"


def after_then_raise(exc_factory: Callable[[], BaseException]):
    """Run the command, then raise (the change is made, the caller never hears of it)."""

    def act(host: InterruptingHost, call: Callable[..., Any], script: str | None) -> Any:
        call()
        raise exc_factory()

    return act


def cut_before():
    """The connection is cut just before the step's command is sent: the command never
    reaches the host. Over SSH the transport is really closed (the library reconnects once,
    as it would after a link flap); a host without a connection of its own (the bench in
    its namespace, ``LocalHost``) gets the TransportError the library would see."""

    def act(host: InterruptingHost, call: Callable[..., Any], script: str | None) -> Any:
        inner = host.inner
        if not hasattr(inner, "transport"):
            from ipsec_hil.lab.errors import TransportError

            raise TransportError(f"{host.name}: connection cut before the command (injected)")
        inner.transport().close()
        return call()

    return act


def cut_mid_command(delay: float = 0.4, hold: float = 1.5):
    """Run the command, keep its channel open ``hold`` s, and close the SSH transport from
    another thread ``delay`` s in: the connection dies mid-command after the change."""

    def act(host: InterruptingHost, call: Callable[..., Any], script: str | None) -> Any:
        inner = host.inner
        if not hasattr(inner, "transport"):  # no connection to cut (LocalHost): done, answer lost
            from ipsec_hil.lab.errors import TransportError

            call()
            raise TransportError(f"{host.name}: connection cut while the command ran (injected)")

        def cut() -> None:
            t = inner.transport()
            t.close()

        timer = threading.Timer(delay, cut)
        if script is None:  # a file write: do it, then cut while a slow command runs
            call()
            timer.start()
            r = inner.run(f"sleep {hold}")
            timer.join()
            return r.check("sleep after the write")  # a cut shows as a failed command
        wrapped = "{\n" + script + "\n}\n_s=$?\nsleep " + str(hold) + "\nexit $_s\n"
        timer.start()
        try:
            r = call(wrapped)
        finally:
            timer.join()
        return r.check("command cut mid-way") if r.status < 0 else r

    return act
