"""``python -m ipsec_hil.lab.sharing status|break TOPOLOGY [HOST...]`` (console script:
``ipsec-hil-lease``): who holds the shared lab's appliances, bench and place; break a lease."""

from ipsec_hil.lab.sharing.lease_cli import main

raise SystemExit(main())
