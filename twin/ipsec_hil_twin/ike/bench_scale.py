"""`python -m ipsec_hil_twin.ike.bench_scale [--counts 1,6,64,256]`: control-plane scale figures.

Why: the 002 page brings up six children at once and the suite may ask for more; this
prints how long one connection with N children (one TCP port each) takes to come up and
to go down in the twin, as seconds per child.  Needs root (two namespaces, prefix `tb` +
4 hex, removed at the end).  The engines are the recording test double (no packets), so
the figures are the negotiation's own cost: two daemons, one CLI call per child, as the
suite drives it (`swanctl --initiate --child X` for each child).
"""
from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
import time
from pathlib import Path


def run(counts: list[int]) -> list[dict]:
    from .pairlab import A4, B4, IkePair, conf  # the same two-namespace pair the tests use

    results = []
    pair = IkePair("tb" + secrets.token_hex(2), Path(tempfile.mkdtemp(prefix="ike-bench-"))).build()
    try:
        pair.start_engines_double()
        pair.start_daemon("a")
        pair.start_daemon("b")
        for n in counts:
            ports = [5201 + i for i in range(n)]
            a = conf("many", A4, B4, {f"p{p}": ("198.51.100.0/26[tcp]", f"203.0.113.0/26[tcp/{p}]") for p in ports})
            b = conf("many", B4, A4, {f"p{p}": (f"203.0.113.0/26[tcp/{p}]", "198.51.100.0/26[tcp]") for p in ports})
            for h, text in (("a", a), ("b", b)):
                pair.write_conf(h, text)
                r = pair.swanctl(h, "--load-all", "--noprompt")
                assert r.returncode == 0, r.stderr
            t0 = time.monotonic()
            for p in ports:
                r = pair.swanctl("a", "--initiate", "--child", f"p{p}")
                assert r.returncode == 0, r.stdout + r.stderr
            up = time.monotonic() - t0
            sas = len(pair.engines["a"].snapshot())
            assert sas == 2 * n, f"{sas} SAs for {n} children"
            t0 = time.monotonic()
            r = pair.swanctl("a", "--terminate", "--ike", "many")
            assert r.returncode == 0, r.stderr
            down = time.monotonic() - t0
            assert pair.engines["a"].snapshot() == [] and pair.engines["b"].snapshot() == []
            results.append({"children": n, "sas": sas, "up_s": up, "down_s": down,
                            "up_per_child_s": up / n, "down_per_child_s": down / n})
    finally:
        pair.close()
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ipsec_hil_twin.ike.bench_scale", description=__doc__.split("\n")[0])
    ap.add_argument("--counts", default="1,6,64,256")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.counts.split(",")]
    print(f"{'children':>8} {'SAs':>5} {'up s':>8} {'s/child up':>11} {'down s':>8} {'s/child down':>13}")
    for r in run(counts):
        print(f"{r['children']:>8} {r['sas']:>5} {r['up_s']:>8.2f} {r['up_per_child_s']:>11.3f} "
              f"{r['down_s']:>8.2f} {r['down_per_child_s']:>13.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
