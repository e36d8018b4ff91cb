"""sha256(1) of FreeBSD 14 (implementation in ipsec_hil_twin.fbsd.digest)."""
from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd.digest import run


def main(argv: list[str]) -> int:
    return run("sha256", argv)


if __name__ == "__main__":
    c.run_main(main)
