"""A module for tests/twin_lab/test_prefork.py to launch in a pre-forked child: it reports
what it was started as (argv, environment, descriptors, signals, session, buffering) as
one JSON line on stdout, a line on stderr, and exits with the status its argv names."""
from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    status = {l.split(":")[0]: l.split()[1] for l in open("/proc/self/status") if l.startswith(("SigIgn", "SigBlk"))}
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, closed by then
            pass
    print(json.dumps({"argv": argv, "name": __name__, "mark": os.environ.get("WARM_MARK"),
                      "only_env": sorted(os.environ) == ["PYTHONUNBUFFERED", "WARM_MARK"],
                      "fds": fds, "sid": os.getsid(0), "pid": os.getpid(), **status}))
    print("to stderr", file=sys.stderr)  # after the JSON line in the log only if stdout is unbuffered
    return int(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
