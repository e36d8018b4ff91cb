"""ipsec_hil_twin.machinery: see the modules."""
