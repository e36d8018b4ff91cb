"""The virtual lab: emulated Sophos XGS appliances in Linux network namespaces.

Never imported by the suite (`ipsec_hil`); the suite reaches the twin only over SSH and the
network.
"""

from __future__ import annotations

from pathlib import Path

#: The directory that holds this package: ``twin/`` in a checkout, site-packages when
#: installed. The lab's own interpreters (``python -S`` commands, the components) get it
#: on PYTHONPATH, so they find the twin without site-packages.
SOURCE_ROOT = Path(__file__).resolve().parent.parent


def python_path() -> str:
    """PYTHONPATH for a lab process started from the twin: the twin's own root. (Only the
    supervisor, ``python -m ipsec_hil_twin up``, reads the suite's topology model; the suite
    starts it with both roots on its path, ipsec_hil.virtual_lab.)"""
    return str(SOURCE_ROOT)
