"""ipsec_hil.lab.traffic.bench: see the modules."""
