"""A survey of a lab: every command the suite reads, saved, parsed and compared (issue 43).

Why: the first run on real hardware meets counter names, output formats and kernel
versions the virtual lab guessed. The survey turns that day into one table and a bundle of
real outputs instead of a hundred red tests: ``ipsec-hil-survey TOPOLOGY --out DIR``
(``python -m ipsec_hil.lab.survey``), read-only and under each appliance's lease.

    from ipsec_hil.lab.survey import survey, render
    result = survey(load_topology("lab.yaml", models=REGISTRY), Path("bundle"))
    print(render(result)); result.exit_status

Parts: :mod:`.reads` (the commands, as the suite sends them), :mod:`.mask` (setkey's keys),
:mod:`.run` (lease, read, save, parse), :mod:`.counters` (profile against the driver's
tree, the proposed ``--hil-profiles`` file), :mod:`.table`, :mod:`.golden` (a bundle into
tests/golden cases).
"""

from ipsec_hil.lab.survey.run import SurveyResult, survey
from ipsec_hil.lab.survey.table import render

__all__ = ["SurveyResult", "render", "survey"]
