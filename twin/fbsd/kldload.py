"""kldload(8) of FreeBSD 14 (implementation in twin.fbsd.kld)."""
from twin.fbsd import _common as c
from twin.fbsd.kld import kldload as main

if __name__ == "__main__":
    c.run_main(main)
