"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``.

Why: the single-file Allure report renders with JavaScript and shows an attachment's
content only after a click; ``--dump-dom`` cannot click. Chromium's pipe transport
(commands on fd 3, replies on fd 4, each message JSON ending in a NUL byte) needs no
port, no websocket library and no network: the browser talks only to this process.

Used by tests/report only; Debian's ``chromium`` with the flags the brief lists.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class CdpError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; ``with Browser(profile_dir) as b: ...``."""

    def __init__(self, profile: Path, *, width: int = 1400, height: int = 1000, timeout: float = 60.0):
        self.timeout = timeout
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def child_fds() -> None:
            # chromium wants the pipe ends as fd 3 and fd 4 (dup first: either may be 3 or 4);
            # dup2's copies are inheritable, every other fd of ours is close-on-exec
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=child_fds, close_fds=False, start_new_session=True)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.session: str | None = None
        target = self.call("Target.createTarget", url="about:blank", browser=True)["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True, browser=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    # ------------------------------------------------------------------ protocol

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError("chromium did not answer in time")
            ready, _, _ = select.select([self._r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise CdpError(f"chromium closed the pipe (exit {self.proc.poll()})")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, *, browser: bool = False, **params: Any) -> dict:
        """Send one command (to the page's session unless ``browser``); its result."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    # ------------------------------------------------------------------ page helpers

    def js(self, expression: str) -> Any:
        """Evaluate in the page; returns the value (JSON-able), awaiting promises."""
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise CdpError(f"JS error in {expression[:80]!r}: {res['exceptionDetails'].get('text')} "
                           f"{res['exceptionDetails'].get('exception', {}).get('description', '')}")
        return res.get("result", {}).get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait_for(self, expression: str, what: str, timeout: float = 30.0) -> Any:
        """Poll a JS expression until it is truthy; fail naming ``what`` otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.25)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close", browser=True)
        except (CdpError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:  # only our own process group (start_new_session)
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
