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


def after_then_raise(exc_factory: Callable[[], BaseException]):
    """Run the command, then raise (the change is made, the caller never hears of it)."""

    def act(host: InterruptingHost, call: Callable[..., Any], script: str | None) -> Any:
        call()
        raise exc_factory()

    return act


def cut_mid_command(delay: float = 0.4, hold: float = 1.5):
    """Run the command, keep its channel open ``hold`` s, and close the SSH transport from
    another thread ``delay`` s in: the connection dies mid-command after the change."""

    def act(host: InterruptingHost, call: Callable[..., Any], script: str | None) -> Any:
        inner = host.inner

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
