"""ipsec_hil.lab.sharing: see the modules."""
