"""ipsec_hil.lab.measuring: see the modules."""
