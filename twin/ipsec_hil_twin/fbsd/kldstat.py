"""kldstat(8) of FreeBSD 14 (implementation in ipsec_hil_twin.fbsd.kld)."""
from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd.kld import kldstat as main

if __name__ == "__main__":
    c.run_main(main)
