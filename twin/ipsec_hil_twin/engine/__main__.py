"""`python -m ipsec_hil_twin.engine --host-dir DIR`: run the ESP engine in the current namespace.

Start-up order (why): counters and TUN first (both workers inherit them), then fork the
transmit and receive processes (before any thread or netlink socket exists in the
parent), then routes/rules and finally bind engine.sock -- its appearance means ready.
SIGTERM/SIGINT: stop workers, remove rules/routes (TUN vanishes with its fd), remove
the socket.  Workers die with the parent (PR_SET_PDEATHSIG); if a worker dies the engine
exits non-zero rather than run half a datapath.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ipsec_hil_twin.machinery.labprocs import fork_worker, name_process, stop_workers

from . import netio
from .bypass import BypassCost
from .cost import scaled_ns
from .control import ControlServer, EngineState
from .counters import CounterBlock
from .datapath import RxLoop, TxLoop
from .hostcfg import load_host
from .routes import Routes


def _run(loop, profile_path: Path) -> None:
    """Run a datapath loop; with TWIN_ENGINE_PROFILE=1 dump cProfile stats every 5 s
    (a diagnostic for the per-packet cost, off by default)."""
    if os.environ.get("TWIN_ENGINE_PROFILE") != "1":
        loop.run()
        return
    import cProfile

    prof = cProfile.Profile()

    def dump(signum=None, frame=None):  # noqa: ARG001
        prof.dump_stats(str(profile_path))
        signal.alarm(5)

    signal.signal(signal.SIGALRM, dump)
    signal.alarm(5)
    prof.runcall(loop.run)


def _poke(fd: int) -> None:
    """One byte on the wake pipe; a full pipe already holds a wake-up the loop has not read."""
    try:
        os.write(fd, b"\0")
    except BlockingIOError:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ipsec_hil_twin.engine", description=__doc__)
    ap.add_argument("--host-dir", required=True, type=Path)
    ap.add_argument("--tun", default="esp0")
    args = ap.parse_args(argv)
    name_process("twin-engine")
    d: Path = args.host_dir
    host = load_host(d / "host.json")
    counters = CounterBlock(d / "engine.counters", create=True)
    queue = netio.port_queue_bytes([p.queue_bytes for p in host.ports if p.rate_mbit])
    rates = [p.rate_mbit for p in host.ports if p.rate_mbit]
    lan_Bps = min(rates) * 125000.0 if rates else None  # the receive side's catch-up pace (pacer.CatchUp)
    cpu_ns = scaled_ns(host.personality, rates)  # a packet's CPU at this lab's scale
    # $TWIN_ENGINE_QUEUE=off: no queue model, esp0's 1,000-packet ring is the queue -- the
    # state before issue 41, whose hidden queue the NDR/PDR test's physical-limit check catches
    if os.environ.get("TWIN_ENGINE_QUEUE") == "off":
        queue = None
    tun = netio.open_tun_up(args.tun)
    wake_r, wake_w = os.pipe()  # every bump wakes the idle transmit loop (datapath.WOKEN_IDLE_POLL_MS)
    os.set_blocking(wake_w, False)
    counters.on_bump = lambda: _poke(wake_w)
    state = EngineState(d, host, counters, None)
    state.publish()  # empty state file before the workers read it
    pids = {
        "tx": fork_worker(lambda: _run(TxLoop(d, tun, host.driver, queue, cpu_ns, wake_r), d / "profile-tx"),
                          "twin-engine-tx"),
        "rx": fork_worker(lambda: _run(RxLoop(d, tun, host.driver, lan_Bps, cpu_ns), d / "profile-rx"), "twin-engine-rx"),
    }
    state.pids = pids
    routes = Routes(args.tun)
    routes.setup_rules()
    state.routes = routes
    state.bypass = BypassCost([p.ifname for p in host.ports])  # removes what an earlier engine left
    server = ControlServer(d / "engine.sock", state)
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    rc = 0
    try:
        while not stop.wait(0.1):
            state.check_faults()
            for name, pid in pids.items():
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    print(f"engine: {name} worker exited ({status}); stopping", file=sys.stderr)
                    rc = 1
                    stop.set()
    finally:
        server.shutdown()
        server.server_close()
        stop_workers(pids.values())
        state.bypass.clear()
        try:
            routes.teardown()
        except Exception as exc:  # noqa: BLE001
            print(f"engine: route teardown: {exc}", file=sys.stderr)
        for name in ("engine.sock",):
            try:
                os.unlink(d / name)
            except FileNotFoundError:
                pass
        os.close(tun)
        counters.close()
    return rc


if __name__ == "__main__":
    time.sleep(0)
    sys.exit(main())
