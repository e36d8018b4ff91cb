"""ping6: FreeBSD 14's ping invoked under the name ping6 (forces IPv6, KAME-style texts)."""
from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd.ping import main_for


def main(argv: list[str]) -> int:
    return main_for("ping6", argv)


if __name__ == "__main__":
    c.run_main(main)
