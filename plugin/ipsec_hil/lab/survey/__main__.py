"""``ipsec-hil-survey TOPOLOGY --out DIR`` (also ``python -m ipsec_hil.lab.survey``).

Reads every appliance and the bench of a lab file (read-only, each appliance under its
lease), saves the bundle in DIR and prints the table (ipsec_hil.lab.survey.table). Exit
status: 0 everything parsed and every profile matched; 4 a read was not parsed or failed;
8 a profile's counters differ from the appliance's (12: both); 3 a host could not be
surveyed (its lease is held, or it did not answer); 2 bad arguments or lab file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.survey.run import survey
from ipsec_hil.lab.survey.table import render
from ipsec_hil.lab.expectations.hardware import REGISTRY
from ipsec_hil.lab.topology import load_topology


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ipsec-hil-survey", description=__doc__.split("\n\n")[1])
    ap.add_argument("topology", type=Path, help="the lab file (a virtual lab's lab.resolved.yaml, or the real lab's)")
    ap.add_argument("--out", type=Path, required=True, help="the bundle's directory (created)")
    ap.add_argument("--hil-profiles", type=Path, default=None,
                    help="a profiles file whose models the lab file names (as pytest --hil-profiles)")
    args = ap.parse_args(argv)
    try:
        if args.hil_profiles is not None:
            from ipsec_hil.lab.expectations.profiles_file import load_profiles_file

            for p in load_profiles_file(args.hil_profiles):
                REGISTRY.register(p, source=str(args.hil_profiles))
        topo = load_topology(args.topology, models=REGISTRY)
    except (LabError, OSError) as exc:
        print(f"{args.topology}: {exc}", file=sys.stderr)
        return 2
    result = survey(topo, args.out)
    sys.stdout.write(render(result))
    return result.exit_status


if __name__ == "__main__":
    sys.exit(main())
