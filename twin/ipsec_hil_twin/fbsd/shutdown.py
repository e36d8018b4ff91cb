"""shutdown(8) `-r now`: ask the lab's supervisor to reboot this appliance.

The supervisor (ipsec_hil_twin.lifecycle.supervisor, RUN/supervisor.sock, op `reboot`) restarts the
appliance's processes, so the SSH session running this command drops, as on hardware.
"""
from __future__ import annotations

import os
import sys
import time

from ipsec_hil_twin import jsonl
from ipsec_hil_twin.errors import ControlSocketError
from ipsec_hil_twin.fbsd import _common as c


USAGE = "usage: shutdown [-] [-c | -f | -h | -p | -r | -k] [-o [-n]] [-q] time [warning-message ...]\n"


def main(argv: list[str]) -> int:
    reboot = halt = False
    when: str | None = None
    for a in argv:
        if a.startswith("-") and len(a) > 1:
            letters = c.option_letters("shutdown", a, "rhpnko", USAGE)
            if letters is None:
                return 1
            reboot = reboot or "r" in letters
            halt = halt or bool(set(letters) & set("hp"))
        elif when is None:
            when = a
    if when is None:
        return _usage()
    if when != "now" and not when.startswith("+0"):
        c.err("shutdown", "only `now` is emulated on this appliance")
        return 1
    if not reboot:
        c.err("shutdown", "only -r (reboot) is emulated on this appliance")
        return 1
    del halt
    hd = c.host_dir()
    host = c.host_info(hd)
    sock_path = (host.get("paths") or {}).get("supervisor_sock") or str(hd.path.parent.parent / "supervisor.sock")
    print("Shutdown NOW!")
    print(f"shutdown: [pid {os.getpid()}]")
    sys.stdout.flush()
    sys.stderr.write(f"\n*** FINAL System shutdown message from root@{host.get('name', hd.name)} ***\n\n"
                     "System going down IMMEDIATELY\n\n\n")
    sys.stderr.flush()
    try:
        reply = jsonl.request(sock_path, {"op": "reboot", "host": host.get("name", hd.name), "wait": False})
    except ControlSocketError as exc:
        c.err("shutdown", f"cannot reach the lab supervisor: {exc}")
        return 1
    ok = reply.get("ok")
    if not ok:
        c.err("shutdown", "reboot refused by the lab supervisor")
        return 1
    time.sleep(0.2)
    return 0


def _usage() -> int:
    sys.stderr.write(USAGE)
    return 1


if __name__ == "__main__":
    c.run_main(main)
