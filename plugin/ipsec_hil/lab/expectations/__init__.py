"""ipsec_hil.lab.expectations: see the modules."""
