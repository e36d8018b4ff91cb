"""ipsec_hil_twin.shell: see the modules."""
