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
import select
import signal
import sys
import threading
import time
from pathlib import Path

from ipsec_hil_twin.machinery.labprocs import FileChanges, fork_worker, name_process, stop_workers

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


#: Seconds between the control's looks at its faults when nothing woke it (a fallback: a
#: change of faults.json and a worker's exit wake it at once).
CONTROL_IDLE_S = 1.0


def _control_loop(d: Path, state: EngineState, pids: dict[str, int], stop: threading.Event, stop_r: int) -> int:
    """Until ``stop``: apply faults.json when it changes (FileChanges), end when a worker
    exits (its pidfd). Returns the engine's exit code (1: a worker died).

    Why woken, not polling: the loop this replaced looked at both ten times a second for
    the engine's whole life, 3.9 ms of CPU a second per idle appliance, and a virtual lab
    is idle most of its life (issue 39). Where inotify is missing it still polls."""
    try:
        faults: FileChanges | None = FileChanges(d, "faults.json")
    except OSError as exc:
        print(f"engine: {exc}; faults.json looked at every 0.1 s", file=sys.stderr)
        faults = None
    workers = {os.pidfd_open(pid): (name, pid) for name, pid in pids.items()}
    waits: list = [stop_r, *workers, *([faults] if faults is not None else [])]
    try:
        while not stop.is_set():
            ready = select.select(waits, [], [], CONTROL_IDLE_S if faults is not None else 0.1)[0]
            state.check_faults(force=faults is not None and faults in ready and faults.changed())
            for fd in ready:
                if fd in workers:
                    name, pid = workers[fd]
                    _, status = os.waitpid(pid, 0)
                    print(f"engine: {name} worker exited ({status}); stopping", file=sys.stderr)
                    return 1
        return 0
    finally:
        for fd in workers:
            os.close(fd)
        if faults is not None:
            faults.close()


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
    ports = tuple((p.ifname, p.addresses) for p in host.ports)  # each port's drops are counted apart
    state = EngineState(d, host, counters, None)
    state.publish()  # empty state file before the workers read it
    pids = {
        "tx": fork_worker(lambda: _run(TxLoop(d, tun, host.driver, queue, cpu_ns, wake_r, ports, args.tun),
                                       d / "profile-tx"), "twin-engine-tx"),
        "rx": fork_worker(lambda: _run(RxLoop(d, tun, host.driver, lan_Bps, cpu_ns, ports), d / "profile-rx"),
                          "twin-engine-rx"),
    }
    state.pids = pids
    routes = Routes(args.tun)
    routes.setup_rules()
    state.routes = routes
    state.bypass = BypassCost([p.ifname for p in host.ports])  # removes what an earlier engine left
    server = ControlServer(d / "engine.sock", state)
    stop = threading.Event()
    stop_r, stop_w = os.pipe()  # a signal's byte ends the control's wait (_control_loop)
    os.set_blocking(stop_w, False)

    def on_signal(signum, frame):  # noqa: ARG001
        stop.set()
        _poke(stop_w)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    rc = 0
    try:
        rc = _control_loop(d, state, pids, stop, stop_r)
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
