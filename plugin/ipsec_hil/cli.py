"""What the console scripts do with what a person types: one line that says what to run,
never a traceback.

Why: a newcomer's first command is a script given the default lab file,
topologies/virtual.yaml -- a virtual lab's template, which only `python -m ipsec_hil_twin
up` turns into a running lab (its lab.resolved.yaml: SSH addresses, keys). Read as a
hardware lab it ended in a traceback (`TransportError: dut3300: mgmt lacks address`). Each
script now either starts the lab it needs (ipsec-hil-acceptance, the decision-power
benchmark: ipsec_hil.virtual_lab) or refuses, in one line naming the command to run, a
template where it needs a running lab, a lab file that is missing, unreadable or invalid
(the topology's own `FILE:LINE` problems, one a line), and an unknown option.

The exit status of all of those is INPUT_ERROR (2, argparse's own for usage errors), in
every script that uses this module: ipsec-hil-survey, ipsec-hil-lease, ipsec-hil-report,
`python -m ipsec_hil.lab.comparing.decision_power`, `python -m
ipsec_hil.lab.traffic.bench_bringup` (tests/plugin/test_console_scripts.py feeds each one
what a person types). Standard library only at import: ipsec-hil-report runs under any
python3 (tools/report); the lab file's model is imported when a lab file is read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from ipsec_hil.lab.topology import Topology

INPUT_ERROR = 2
"""Exit status of a script refusing what it was given (the lab file, an option)."""


class InputError(Exception):
    """What a person typed cannot be used: the message is the line(s) to print."""

    def report(self) -> int:
        """Print the message on stderr; the exit status INPUT_ERROR."""
        print(self, file=sys.stderr)
        return INPUT_ERROR


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (the help names the options), exit INPUT_ERROR."""

    def error(self, message: str) -> NoReturn:
        self.exit(INPUT_ERROR, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def template_line(prog: str, path: str | Path, then: str) -> str:
    """The line for a virtual lab's template given where a running lab is needed; ``then``
    says what to do with the running lab's resolved file (``survey its lab.resolved.yaml``)."""
    return (f"{prog}: {path} is a virtual lab's template, not a running lab: start it with "
            f"`python -m ipsec_hil_twin up {path}` and {then}")


def unreadable(prog: str, path: str | Path, exc: OSError) -> InputError:
    """A file named on the command line that cannot be read (missing, a directory, no permission)."""
    return InputError(f"{prog}: {path}: {exc.strerror or exc}")


def load_lab_file(prog: str, path: str | Path, *, then: str | None) -> Topology:
    """The lab file ``path`` (models from the suite's registry, as the plugin loads it).

    ``then``: what the script does with a running virtual lab's lab.resolved.yaml (see
    :func:`template_line`), for a script that needs a running lab; None for one that
    starts a virtual lab itself and so takes its template. Raises InputError.
    """
    from ipsec_hil import virtual_lab
    from ipsec_hil.lab.errors import LabError
    from ipsec_hil.lab.expectations.hardware import REGISTRY
    from ipsec_hil.lab.topology import load_topology

    try:
        topology = load_topology(path, models=REGISTRY)
    except OSError as exc:
        raise unreadable(prog, path, exc) from None
    except UnicodeDecodeError:
        raise InputError(f"{prog}: {path}: not a lab file (not text)") from None
    except LabError as exc:  # TopologyError: FILE:LINE problems, one a line
        raise InputError("\n".join(f"{prog}: {line}" for line in str(exc).splitlines())) from None
    if then is not None and topology.lab.virtual and not virtual_lab.is_running_lab(topology):
        raise InputError(template_line(prog, path, then))
    return topology
