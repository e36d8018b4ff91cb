"""freebsd-version of the appliance's release (implementation in ipsec_hil_twin.fbsd.version)."""
from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd.version import freebsd_version as main

if __name__ == "__main__":
    c.run_main(main)
