"""Helpers run ON the bench host: ``python -m ipsec_hil.lab.probes.<name> ARGS`` prints one JSON object.

Why a separate process: scapy needs raw sockets where the bench's interfaces are (a real
bench PC, or the virtual lab's bench namespace), while the suite talks to every host
through the same transport. So a probe is a tiny CLI that the suite runs via
``Host.run`` (``ipsec_hil.lab.traffic.bench.Bench.probe``) and whose JSON it parses.

Contract of every probe: exit 0 and one JSON object on the last stdout line; on a usage
or runtime error exit non-zero with ``{"error": "..."}`` as the last line. Secrets (ESP
keys) are read from a file named on the command line, never from argv, and never printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Callable, Sequence


class ProbeUsage(Exception):
    """Bad arguments (reported as JSON, exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print usage and exit 2 itself
        raise ProbeUsage(f"{self.prog}: {message}")


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    return _Parser(prog=f"python -m ipsec_hil.lab.probes.{prog}", description=description)


def run(main: Callable[[Sequence[str]], dict], argv: Sequence[str] | None = None) -> int:
    """Run a probe's main, print its JSON (or the error as JSON), return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = main(args)
    except ProbeUsage as e:
        print(json.dumps({"error": str(e), "kind": "usage"}))
        return 2
    except Exception as e:  # a probe reports, the suite decides
        tb = traceback.format_exc(limit=3).strip().splitlines()[-1]
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "kind": "runtime", "where": tb}))
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


def positive_float(v: str) -> float:
    f = float(v)
    if not f > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return f


def positive_int(v: str) -> int:
    i = int(v, 0)
    if i <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return i
