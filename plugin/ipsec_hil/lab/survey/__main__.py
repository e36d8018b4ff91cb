"""``ipsec-hil-survey TOPOLOGY --out DIR`` (also ``python -m ipsec_hil.lab.survey``).

Reads every appliance and the bench of a lab file (read-only, each appliance under its
lease), saves the bundle in DIR and prints the table (ipsec_hil.lab.survey.table). Exit
status: 0 everything parsed and every profile matched; 4 a read was not parsed or failed;
8 a profile's counters differ from the appliance's (12: both); 3 a host could not be
surveyed (its lease is held, or it did not answer); 2 bad arguments, a lab file that is
missing or invalid, or a virtual lab's template (one line naming the command that starts
it: ipsec_hil.cli), or a bundle directory that cannot be made.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ipsec_hil.cli import ArgumentParser, InputError, load_lab_file, unreadable
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.survey.run import survey
from ipsec_hil.lab.survey.table import render
from ipsec_hil.lab.expectations.hardware import REGISTRY


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="ipsec-hil-survey", description=__doc__.split("\n\n")[1])
    ap.add_argument("topology", type=Path, help="the lab file (a virtual lab's lab.resolved.yaml, or the real lab's)")
    ap.add_argument("--out", type=Path, required=True, help="the bundle's directory (created)")
    ap.add_argument("--hil-profiles", type=Path, default=None,
                    help="a profiles file whose models the lab file names (as pytest --hil-profiles)")
    args = ap.parse_args(argv)
    try:
        if args.hil_profiles is not None:
            from ipsec_hil.lab.expectations.profiles_file import load_profiles_file

            try:
                for p in load_profiles_file(args.hil_profiles):
                    REGISTRY.register(p, source=str(args.hil_profiles))
            except OSError as exc:
                raise unreadable(ap.prog, args.hil_profiles, exc) from None
            except LabError as exc:
                raise InputError(f"{ap.prog}: {exc}") from None  # the message names the file
        topo = load_lab_file(ap.prog, args.topology, then="survey its lab.resolved.yaml")
        try:
            args.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise unreadable(ap.prog, args.out, exc) from None
    except InputError as exc:
        return exc.report()
    result = survey(topo, args.out)
    sys.stdout.write(render(result))
    return result.exit_status


if __name__ == "__main__":
    sys.exit(main())
