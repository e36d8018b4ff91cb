"""ipsec_hil.lab.reporting: see the modules."""
