"""The engine's control process: SA table, driver state, routes, and engine.sock.

Why the control process owns the SA table: twin.ike and the FreeBSD commands talk to
one socket; the datapath processes only read the published state file
(DIR/engine.state.json, mode 0600 because it holds keys) when the generation counter
in the shared counter block moves.  Requests are JSON lines (DESIGN.md "Engine control
API"); an error answers {"ok": false, "error": "..."} naming the field, never a key.

Offload decision (add_sa, set_driver): an SA is offloaded when it asks for it
(offload: true), the driver is loaded (set_driver), and the driver does not decline it
(fault `decline_ipv6_sa`: the driver refuses SAs whose outer family is IPv6).  Anything
not offloaded is run by "the kernel" and counts into FreeBSD's ESP statistics.
sa_count/sa_inet/sa_inet6 count offloaded SAs by outer family.

`reset` (reboot): SAs, FreeBSD-style routes and counters are gone; the driver's loaded
state is kept (twin.lab/twin.fbsd own module state and call set_driver after boot).
"""
from __future__ import annotations

import ipaddress
import json
import os
import socketserver
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pyroute2 import IPRoute

from .counters import MAX_SA, CounterBlock
from .faultview import JsonWatch, fault_params
from .hostcfg import HostConfig
from .routes import FWD_TABLE, OWN_TABLE, Routes, RouteSpec
from .sa import SaSpec
from .sizes import SOURCE as SIZES_SOURCE
from .sizes import forwarded_limit, max_inner


@dataclass
class Installed:
    spec: SaSpec
    slot: int
    offloaded: bool
    created: float = 0.0


class EngineState:
    def __init__(self, host_dir: Path, host: HostConfig, counters: CounterBlock,
                 routes: Routes | None) -> None:
        self.dir = Path(host_dir)
        self.host = host
        self.c = counters
        self.routes = routes
        self.lock = threading.RLock()
        self.sas: dict[tuple[int, str], Installed] = {}
        self.free = list(range(MAX_SA - 1, -1, -1))
        self.driver_loaded = host.driver_loaded
        self.driver_name = host.driver
        self.driver_md5: str | None = None
        self.fbsd_routes: dict[str, str | None] = {}  # dest prefix -> gateway
        self.faults = JsonWatch(self.dir / "faults.json")
        self.own_big = False
        self.leaked: set[tuple[int, str]] = set()  # SAs kept by fault leak_sa_on_delete
        self.pids: dict[str, int] = {}
        self.started = time.time()

    # -- helpers -----------------------------------------------------------------------
    def _offload(self, spec: SaSpec) -> bool:
        if not spec.offload or not self.driver_loaded:
            return False
        if spec.outer == "ipv6" and fault_params(self.faults, "decline_ipv6_sa") is not None:
            return False
        return True

    def _own_addrs(self) -> list[str]:
        out = []
        try:
            with IPRoute() as ipr:
                for m in ipr.get_addr():
                    a = m.get_attr("IFA_ADDRESS") or m.get_attr("IFA_LOCAL")
                    if a:
                        out.append(a)
        except Exception as exc:  # pragma: no cover
            print(f"engine: cannot list addresses: {exc}", file=sys.stderr)
        for p in self.host.ports:
            out.extend(str(ipaddress.ip_interface(x).ip) for x in p.addresses)
        return sorted(set(out))

    def _sa_entry(self, inst: Installed) -> dict[str, Any]:
        s = inst.spec
        port = self.host.port_for(s.src)
        mtu = port.mtu if port else 1500
        e = s.model_dump()
        e.update(slot=inst.slot, offloaded=inst.offloaded, path_mtu=mtu,
                 own_limit=max_inner(s.cipher, s.outer, mtu),
                 fwd_limit=forwarded_limit(mtu, s.outer),
                 rate_mbit=(port.rate_mbit if port else None))
        return e

    def publish(self) -> None:
        """Write the state file, resync routes and sa_* counters, bump the generation."""
        with self.lock:
            own = self._own_addrs()
            entries = [self._sa_entry(i) for i in self.sas.values()]
            state = {"sas": entries, "own_addrs": own, "driver": self.host.driver,
                     "own_output_step": self._own_output_step(entries)}
            path = self.dir / "engine.state.json"
            tmp = path.with_name(".engine.state.json.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(state, fh)
            os.replace(tmp, path)
            off = [i for i in self.sas.values() if i.offloaded]
            self.c.set("sa_count", len(off))
            self.c.set("sa_inet", sum(1 for i in off if i.spec.outer == "ipv4"))
            self.c.set("sa_inet6", sum(1 for i in off if i.spec.outer == "ipv6"))
            if self.routes is not None:
                self.routes.sync(self._desired_routes(entries, own))
            self.c.add("gen:gen_sa")

    def _own_output_step(self, entries: list[dict]) -> list[str]:
        """Inner destinations whose FreeBSD route leaves by another port than the tunnel's.

        The 001 page: the appliance's own packets take the driver's offload path
        (npuep tx_accel) when routed out of the tunnel's port, and the association's
        output step (tx_taken) when the route names a gateway on another port.
        """
        out = []
        for dest, gw in self.fbsd_routes.items():
            if not gw:
                continue
            try:
                gwa = ipaddress.ip_address(gw)
            except ValueError:
                continue
            tunnel_nets = []
            for e in entries:
                port = self.host.port_for(e["src"])
                if port is not None:
                    tunnel_nets += [ipaddress.ip_interface(a).network for a in port.addresses]
            if not any(gwa.version == n.version and gwa in n for n in tunnel_nets):
                out.append(dest)
        return out

    def _desired_routes(self, entries: list[dict], own: list[str]) -> list[RouteSpec]:
        best: dict[tuple[int, str], RouteSpec] = {}
        fbsd = [ipaddress.ip_network(r, strict=False) for r in self.fbsd_routes]
        own_ips = [ipaddress.ip_address(a) for a in own]
        for e in entries:
            if e["direction"] != "out":
                continue
            spec = SaSpec.model_validate({k: e[k] for k in SaSpec.model_fields if k in e})
            prefsrc: dict[int, str] = {}
            for sel in spec.local_selectors():
                for ip in own_ips:
                    if ip.version == sel.net.version and ip in sel.net and not ip.is_link_local:
                        prefsrc.setdefault(ip.version, str(ip))
            own_mtu = e["path_mtu"] if self.own_big else e["own_limit"]
            for sel in spec.remote_selectors():
                nets = [sel.net]
                if sel.net.version == 6:
                    nets = []
                    for r in fbsd:
                        if r.version == 6 and r.overlaps(sel.net):
                            nets.append(r if r.prefixlen >= sel.net.prefixlen else sel.net)
                for net in nets:
                    ps = prefsrc.get(net.version)
                    for table, mtu in ((OWN_TABLE, own_mtu), (FWD_TABLE, e["path_mtu"])):
                        key = (table, str(net))
                        old = best.get(key)
                        if old is None or mtu < old.mtu:
                            best[key] = RouteSpec(table, str(net), mtu, ps if table == OWN_TABLE else None)
        return list(best.values())

    # -- operations --------------------------------------------------------------------
    def op_add_sa(self, req: dict) -> dict:
        raw = req.get("sa")
        if not isinstance(raw, dict):
            raise ValueError("sa: expected an object")
        try:
            spec = SaSpec.model_validate(raw)
        except ValidationError as exc:
            errs = "; ".join(f"sa.{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise ValueError(errs) from None
        with self.lock:
            self.faults.refresh(time.monotonic(), force=True)
            old = self.sas.pop(spec.key, None)
            self.leaked.discard(spec.key)
            if old is not None:
                self.free.append(old.slot)
            if not self.free:
                raise ValueError(f"sa: table full ({MAX_SA} SAs)")
            slot = self.free.pop()
            b = self.c.sa_slot(slot)
            self.c.a[b] = self.c.a[b + 1] = self.c.a[b + 2] = self.c.a[b + 3] = 0
            inst = Installed(spec, slot, self._offload(spec), time.time())
            self.sas[spec.key] = inst
            self.publish()
            return {"ok": True, "offloaded": inst.offloaded}

    def op_del_sa(self, req: dict) -> dict:
        try:
            key = (int(req["spi"]), str(ipaddress.ip_address(req["dst"])))
        except (KeyError, ValueError, TypeError):
            raise ValueError("del_sa: expected spi (int) and dst (address)") from None
        with self.lock:
            self.faults.refresh(time.monotonic(), force=True)
            if key in self.sas and fault_params(self.faults, "leak_sa_on_delete") is not None:
                # fault: answer as if deleted, keep the SA (a teardown that leaves state behind);
                # switching the fault off forgets it (check_faults), so the lab heals
                self.leaked.add(key)
                return {"ok": True}
            inst = self.sas.pop(key, None)
            if inst is None:
                return {"ok": False, "error": f"del_sa: no SA spi={key[0]:#x} dst={key[1]}"}
            self.free.append(inst.slot)
            self.publish()
        return {"ok": True}

    def op_flush(self, req: dict) -> dict:
        with self.lock:
            for inst in self.sas.values():
                self.free.append(inst.slot)
            self.sas.clear()
            self.leaked.clear()
            self.publish()
        return {"ok": True}

    def op_list_sas(self, req: dict) -> dict:
        out = []
        with self.lock:
            for inst in self.sas.values():
                b = self.c.sa_slot(inst.slot)
                d = inst.spec.model_dump()  # keys included: setkey -D shows them to root
                d.update(packets=self.c.a[b], bytes=self.c.a[b + 1], last_use=self.c.a[b + 2],
                         seq=self.c.a[b + 3], offloaded=inst.offloaded, created=inst.created)
                out.append(d)
        return {"ok": True, "sas": out}

    def op_counters(self, req: dict) -> dict:
        snap = self.c.snapshot(self.host.driver)
        return {"ok": True, **snap}

    def op_status(self, req: dict) -> dict:
        alive = {}
        for name, pid in self.pids.items():
            try:
                os.kill(pid, 0)
                alive[name] = True
            except ProcessLookupError:
                alive[name] = False
        return {"ok": True, "pid": os.getpid(), "driver_loaded": self.driver_loaded,
                "driver": self.driver_name, "md5": self.driver_md5, "host": self.host.name,
                "model": self.host.model, "workers": self.pids, "alive": alive,
                "sa_count": len(self.sas), "routes": sorted(self.fbsd_routes),
                "engine": self.c.engine_stats(), "sizes": SIZES_SOURCE,
                "uptime": round(time.time() - self.started, 3)}

    def op_set_driver(self, req: dict) -> dict:
        if "loaded" not in req:
            raise ValueError("set_driver: expected loaded (bool)")
        with self.lock:
            self.driver_loaded = bool(req["loaded"])
            self.driver_md5 = req.get("md5")
            if req.get("name"):
                self.driver_name = str(req["name"])
            self.faults.refresh(time.monotonic(), force=True)
            for inst in self.sas.values():
                inst.offloaded = self._offload(inst.spec)
            self.publish()
        return {"ok": True}

    def op_reset(self, req: dict) -> dict:
        with self.lock:
            self.sas.clear()
            self.free = list(range(MAX_SA - 1, -1, -1))
            self.leaked.clear()
            self.fbsd_routes.clear()
            self.c.zero()
            self.c.add("gen:gen_reset")
            self.publish()
        return {"ok": True}

    def op_route(self, req: dict) -> dict:
        action = req.get("action")
        raw = req.get("dest", req.get("dst"))  # twin.fbsd.route sends "dst"
        try:
            dest = str(ipaddress.ip_network(str(raw), strict=False))
        except ValueError:
            raise ValueError(f"route: dest: expected a prefix, found {raw!r}") from None
        with self.lock:
            if action == "add":
                if dest in self.fbsd_routes:
                    return {"ok": False, "error": f"route: {dest}: route already exists"}
                gw = req.get("gateway")
                self.fbsd_routes[dest] = str(gw) if gw else None
            elif action == "delete":
                if dest not in self.fbsd_routes:
                    return {"ok": False, "error": f"route: {dest}: not found"}
                self.fbsd_routes.pop(dest, None)
            else:
                raise ValueError(f"route: action: expected add or delete, found {action!r}")
            self.publish()
            installed = sorted({r.dst for r in (self.routes.installed.values() if self.routes else [])})
        return {"ok": True, "esp0_routes": installed}

    def op_faults(self, req: dict) -> dict:
        self.check_faults(force=True)
        self.c.add("gen:gen_faults")
        return {"ok": True, "faults": sorted(self.faults.data)}

    def check_faults(self, force: bool = False) -> None:
        """Route-affecting faults (own_too_big_fragmented) are applied here, and SAs kept
        by leak_sa_on_delete are dropped once that fault is off."""
        with self.lock:
            if self.faults.refresh(time.monotonic(), force=force):
                print(f"engine {self.host.name}: faults now {sorted(self.faults.data) or 'none'}",
                      file=sys.stderr, flush=True)
            big = fault_params(self.faults, "own_too_big_fragmented") is not None
            if big != self.own_big:
                self.own_big = big
                self.publish()
            if self.leaked and fault_params(self.faults, "leak_sa_on_delete") is None:
                for key in self.leaked:
                    inst = self.sas.pop(key, None)
                    if inst is not None:
                        self.free.append(inst.slot)
                self.leaked.clear()
                self.publish()

    OPS = ("add_sa", "del_sa", "flush", "list_sas", "counters", "status", "set_driver",
           "reset", "route", "faults")

    def handle(self, line: bytes) -> dict:
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            return {"ok": False, "error": f"request: invalid JSON: {exc}"}
        op = req.get("op")
        if op not in self.OPS:
            return {"ok": False, "error": f"op: expected one of {', '.join(self.OPS)}, found {op!r}"}
        try:
            return getattr(self, "op_" + op)(req)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:  # keep serving; say what failed
            print(f"engine: {op} failed: {exc!r}", file=sys.stderr)
            return {"ok": False, "error": f"{op}: internal error: {type(exc).__name__}: {exc}"}


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        state: EngineState = self.server.state  # type: ignore[attr-defined]
        for line in self.rfile:
            if not line.strip():
                continue
            resp = state.handle(line)
            self.wfile.write((json.dumps(resp) + "\n").encode())
            self.wfile.flush()


class ControlServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, state: EngineState) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self.state = state
        super().__init__(str(path), _Handler)
