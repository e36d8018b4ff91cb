"""shutdown(8) `-r now`: ask the lab's supervisor to reboot this appliance.

The supervisor (twin.supervisor, RUN/supervisor.sock, op `reboot`) restarts the
appliance's processes, so the SSH session running this command drops, as on hardware.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time

from twin.fbsd import _common as c


def main(argv: list[str]) -> int:
    reboot = halt = False
    when: str | None = None
    for a in argv:
        if a.startswith("-") and len(a) > 1:
            for ch in a[1:]:
                if ch == "r":
                    reboot = True
                elif ch in "hp":
                    halt = True
                elif ch in "nko":
                    pass
                else:
                    sys.stderr.write(f"shutdown: illegal option -- {ch}\n")
                    return _usage()
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
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(sock_path)
        s.sendall((json.dumps({"op": "reboot", "host": host.get("name", hd.name), "wait": False}) + "\n").encode())
        reply = s.makefile("rb").readline()
    except OSError as exc:
        c.err("shutdown", f"cannot reach the lab supervisor: {exc.strerror or exc}")
        return 1
    finally:
        s.close()
    try:
        ok = json.loads(reply.decode() or "{}").get("ok")
    except json.JSONDecodeError:
        ok = False
    if not ok:
        c.err("shutdown", "reboot refused by the lab supervisor")
        return 1
    time.sleep(0.2)
    return 0


def _usage() -> int:
    sys.stderr.write("usage: shutdown [-] [-c | -f | -h | -p | -r | -k] [-o [-n]] [-q] time [warning-message ...]\n")
    return 1


if __name__ == "__main__":
    c.run_main(main)
