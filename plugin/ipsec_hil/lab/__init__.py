"""The lab library: plain Python (no pytest import anywhere below this package).

Everything that talks to an appliance works from a Python prompt; the pytest plugin
only wires it up. Sub-modules are imported explicitly by their users
(``from ipsec_hil.lab.topology import load_topology``) to keep imports cheap.
"""
