"""The engine's control process: SA table, driver state, routes, and engine.sock.

Why the control process owns the SA table: ipsec_hil_twin.ike and the FreeBSD commands talk to
one socket; the datapath processes only read the published state -- the SA journal
(ipsec_hil_twin.engine.satable, DIR/engine.sas.jsonl, mode 0600 because it holds keys: one line
per SA added or removed, so N children cost O(N), not O(N^2)) and DIR/engine.state.json
(own addresses, driver) -- when the generation counter in the shared counter block
moves.  Requests are JSON lines (DESIGN.md "Engine control
API"); an error answers {"ok": false, "error": "..."} naming the field, never a key.

Offload decision (add_sa, set_driver): an SA is offloaded when it asks for it
(offload: true), the driver is loaded (set_driver), and the driver does not decline it
(fault `decline_ipv6_sa`: the driver refuses SAs whose outer family is IPv6; fault
`nic_refuses_sa`: it refuses every SA, or those of one cipher, as a NIC answers
if_sa_newkey with EOPNOTSUPP in FreeBSD 15's sys/netipsec/ipsec_offload.c -- the framework
marks the handle IFP_HS_REJECTED and the SA stays in software).  Anything not offloaded is
run by "the kernel" and counts into FreeBSD's ESP statistics.  A driver decides when an
SA is installed; switching `nic_refuses_sa` on or off re-decides the installed SAs at once
(check_faults), as set_driver does: the twin's stand-in for a tunnel brought up while the
NIC refused, without rebuilding it.
sa_count/sa_inet/sa_inet6 count offloaded SAs by outer family.

The loaded build's CPU factor (set_driver `cpu_factor`, ipsec_hil_twin.fbsd.kld's
`twin-cpu-factor`) and the host's noise (host.json `noise`) reach the datapath loops through
engine.state.json like the rest of the table-wide state; the loops charge each packet's CPU
and apply the noise's pace factor themselves (ipsec_hil_twin.engine.cost), the control
process only reports the current factors (`status` "cpu").

`reset` (reboot): SAs, FreeBSD-style routes and counters are gone; the driver's loaded
state is kept (ipsec_hil_twin.lifecycle.lab/twin.fbsd own module state and call set_driver after boot).
"""
from __future__ import annotations

import ipaddress
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pyroute2 import IPRoute

from ipsec_hil_twin.faults import JsonWatch, fault_params
from ipsec_hil_twin.jsonl import JsonlServer

from . import sa_events
from .bypass import BypassCost
from .cost import Cost, Noise, scaled_ns
from .counters import MAX_SA, CounterBlock
from .hostcfg import HostConfig
from .routes import FWD_TABLE, OWN_TABLE, Routes, RouteSpec
from .satable import SaJournalWriter
from .sa import SaSpec
from .sizes import SOURCE as SIZES_SOURCE
from .sizes import forwarded_limit, max_inner


@dataclass
class Installed:
    spec: SaSpec
    slot: int
    offloaded: bool
    created: float = 0.0
    seq_set: tuple[int, int] | None = None  # (request number, last sequence number sent)
    routes: tuple[Any, list[RouteSpec]] | None = None
    """(the route context they were computed in, this SA's esp0 route wishes): cached so a
    publish folds N cached lists instead of re-deriving N SAs' routes."""
    outer: str = ""
    """spec.outer, parsed once: publish counts SAs by outer family on every call."""
    expired: bool = False
    """Hard-expired (op_expire_sa): gone from the SAD -- setkey -D, sa_count, the datapath's
    SA lookup -- while its policy (the esp0 routes, the selectors) stays until del_sa."""

    def __post_init__(self) -> None:
        self.outer = self.spec.outer


def own_output_step(host: HostConfig, fbsd_routes: dict[str, str | None], srcs: set[str]) -> list[str]:
    """Inner destinations whose FreeBSD route leaves by another port than the tunnel's.

    The 001 page: the appliance's own packets take the driver's offload path
    (npuep tx_accel) when routed out of the tunnel's port, and the association's
    output step (tx_taken) when the route names a gateway on another port.
    """
    out = []
    for dest, gw in fbsd_routes.items():
        if not gw:
            continue
        try:
            gwa = ipaddress.ip_address(gw)
        except ValueError:  # an interface route (`-interface em1`): no gateway address to place
            continue
        tunnel_nets = []
        for src in srcs:
            port = host.port_for(src)
            if port is not None:
                tunnel_nets += [ipaddress.ip_interface(a).network for a in port.addresses]
        if not any(gwa.version == n.version and gwa in n for n in tunnel_nets):
            out.append(dest)
    return out


def own_addresses(host: HostConfig) -> list[str]:
    """Every address of the namespace plus the ports' configured ones (the datapath's
    test for an appliance's own packet)."""
    out = []
    try:
        with IPRoute() as ipr:
            for m in ipr.get_addr():
                a = m.get_attr("IFA_ADDRESS") or m.get_attr("IFA_LOCAL")
                if a:
                    out.append(a)
    except Exception as exc:  # pragma: no cover
        print(f"engine: cannot list addresses: {exc}", file=sys.stderr)
    for p in host.ports:
        out.extend(str(ipaddress.ip_interface(x).ip) for x in p.addresses)
    return sorted(set(out))


def sa_route_wishes(spec: SaSpec, entry: dict[str, Any], fbsd: list, own_ips: list,
                    own_big: bool) -> list[RouteSpec]:
    """One outbound SA's esp0 routes: the own table at the exact ESP MTU (the path MTU
    under own_too_big_fragmented), the forwarded table at the path MTU; IPv6 remote
    selectors only where a FreeBSD route covers them."""
    prefsrc: dict[int, str] = {}
    for sel in spec.local_selectors():
        for ip in own_ips:
            if ip.version == sel.net.version and ip in sel.net and not ip.is_link_local:
                prefsrc.setdefault(ip.version, str(ip))
    own_mtu = entry["path_mtu"] if own_big else entry["own_limit"]
    out = []
    for sel in spec.remote_selectors():
        nets = [sel.net]
        if sel.net.version == 6:
            nets = [r if r.prefixlen >= sel.net.prefixlen else sel.net
                    for r in fbsd if r.version == 6 and r.overlaps(sel.net)]
        for net in nets:
            ps = prefsrc.get(net.version)
            for table, mtu in ((OWN_TABLE, own_mtu), (FWD_TABLE, entry["path_mtu"])):
                out.append(RouteSpec(table, str(net), mtu, ps if table == OWN_TABLE else None))
    return out


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
        self.rate_factor = 1.0  # the loaded build's engine speed (ipsec_hil_twin.fbsd.kld: twin-rate-factor)
        self.cpu_factor = 1.0  # the loaded build's CPU per packet (ipsec_hil_twin.fbsd.kld: twin-cpu-factor)
        self.noise = Noise.of(host.extra.get("noise"), host.name)  # the lab file's noise: (None: off)
        self.cost = Cost(scaled_ns(host.personality, [p.rate_mbit for p in host.ports if p.rate_mbit]))  # status only
        self.fbsd_routes: dict[str, str | None] = {}  # dest prefix -> gateway
        self.faults = JsonWatch(self.dir / "faults.json")
        self.own_big = False
        self.refusing: str | None = None  # fault nic_refuses_sa's cipher while it is on
        self.leaked: set[tuple[int, str]] = set()  # SAs kept by fault leak_sa_on_delete
        self.seq_requests = 0
        self.pids: dict[str, int] = {}
        self.started = time.time()
        self.published: dict[tuple[int, str], dict[str, Any]] = {}  # what the journal holds
        self.journal = SaJournalWriter(self.dir)
        self.bypass: BypassCost | None = None  # fault bypass_tax's tc (set by ipsec_hil_twin.engine.__main__)

    # -- helpers -----------------------------------------------------------------------
    def _offload(self, spec: SaSpec) -> bool:
        if not spec.offload or not self.driver_loaded:
            return False
        if spec.outer == "ipv6" and fault_params(self.faults, "decline_ipv6_sa") is not None:
            return False
        refuse = fault_params(self.faults, "nic_refuses_sa")
        if refuse is not None and str(refuse.get("cipher") or "any") in ("any", spec.cipher):
            return False  # if_sa_newkey -> EOPNOTSUPP: IFP_HS_REJECTED, the SA stays in software
        if spec.encap and not self.host.personality.offloads_udp_encap:
            return False  # the driver does not take NAT-T associations: the kernel runs them
        return spec.outer != "ipv6" or self.host.offloads_ipv6_outer  # ipsec_hil_twin.personality

    def _sa_entry(self, inst: Installed) -> dict[str, Any]:
        s = inst.spec
        port = self.host.port_for(s.src)
        mtu = port.mtu if port else 1500
        e = s.model_dump()
        e.update(slot=inst.slot, offloaded=inst.offloaded, path_mtu=mtu, expired=inst.expired,
                 own_limit=max_inner(s.cipher, s.outer, mtu, s.encap),
                 fwd_limit=forwarded_limit(mtu, s.outer),
                 rate_mbit=self._pace_mbit(port, inst.offloaded), seq_set=inst.seq_set)
        return e

    def _put(self, inst: Installed) -> None:
        """Queue an added (or re-offloaded) SA for the next publish."""
        entry = self._sa_entry(inst)
        self.published.pop(inst.spec.key, None)  # a replaced SA moves to the end, as the readers do
        self.published[inst.spec.key] = entry
        self.journal.put(entry)

    def _drop(self, key: tuple[int, str]) -> None:
        """Queue a removed SA for the next publish."""
        if self.published.pop(key, None) is not None:
            self.journal.drop(key)

    def _pace_mbit(self, port, offloaded: bool) -> float | None:
        """The rate the transmit loop paces an SA to: its port's rate, or for an SA the
        driver runs under a slower build (rate factor < 1) that factor times the host's
        slowest port -- the engine, not a link, is then the path's bottleneck. With the
        lab file's noise on, the transmit loop multiplies an offloaded SA's pace by the
        epoch's n_rate itself (ipsec_hil_twin.engine.cost: the draw changes every epoch, the
        journal is not rewritten for it)."""
        if offloaded and self.rate_factor < 1.0:
            rates = [p.rate_mbit for p in self.host.ports if p.rate_mbit]
            if rates:
                return self.rate_factor * min(rates)
        return port.rate_mbit if port else None

    def publish(self) -> None:
        """Append the queued SA changes, write the table-wide state, resync routes and sa_*
        counters, bump the generation; no SA is re-serialised (route wishes are cached)."""
        with self.lock:
            self.journal.flush(self.published)
            own = own_addresses(self.host)
            srcs = {i.spec.src for i in self.sas.values()}
            state = {"own_addrs": own, "driver": self.host.driver,
                     "own_output_step": own_output_step(self.host, self.fbsd_routes, srcs),
                     # what the loops charge and pace by (ipsec_hil_twin.engine.cost)
                     "host": self.host.name, "cpu_factor": self.cpu_factor,
                     "noise": self.host.extra.get("noise")}
            path = self.dir / "engine.state.json"
            tmp = path.with_name(".engine.state.json.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(state, fh)
            os.replace(tmp, path)
            off = [i for i in self.sas.values() if i.offloaded and not i.expired]
            self.c.set("sa_count", len(off))
            self.c.set("sa_inet", sum(1 for i in off if i.outer == "ipv4"))
            self.c.set("sa_inet6", sum(1 for i in off if i.outer == "ipv6"))
            if self.routes is not None:
                self.routes.sync(desired_routes(self, own))
            self.c.bump()  # the SA table changed

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
                self._drop(spec.key)
            if not self.free:
                raise ValueError(f"sa: table full ({MAX_SA} SAs)")
            slot = self.free.pop()
            self.c.clear_sa(slot)
            inst = Installed(spec, slot, self._offload(spec), time.time())
            self.sas[spec.key] = inst
            self._put(inst)
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
            self._drop(key)
            self.publish()
        return {"ok": True}

    def op_expire_sa(self, req: dict) -> dict:
        return sa_events.expire_sa(self, req)

    def op_flush(self, req: dict) -> dict:
        with self.lock:
            for inst in self.sas.values():
                self.free.append(inst.slot)
            self.sas.clear()
            self.leaked.clear()
            self._unpublish_all()
            self.publish()
        return {"ok": True}

    def _unpublish_all(self) -> None:
        """No SA left (flush, reset): the journal starts over empty."""
        self.published.clear()
        self.journal.rewrite({})

    def op_list_sas(self, req: dict) -> dict:
        out = []
        with self.lock:
            for inst in self.sas.values():
                if inst.expired:
                    continue  # freed by the kernel: setkey -D no longer shows it
                d = inst.spec.model_dump()  # keys included: setkey -D shows them to root
                d.update(self.c.sa_record(inst.slot), offloaded=inst.offloaded, created=inst.created)
                out.append(d)
        return {"ok": True, "sas": out}

    def op_set_seq(self, req: dict) -> dict:
        return set_seq(self, req)

    def op_counters(self, req: dict) -> dict:
        drops = self.c.port_drops()  # each port's (counters.PORT_DROP_KINDS), by interface name
        return {"ok": True, **self.c.snapshot(self.host.driver),
                "ports": {p.ifname: drops[k] for k, p in enumerate(self.host.ports[:len(drops)])}}

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
                "fbsd_routes": dict(self.fbsd_routes),  # with their gateways: netstat -r lists them
                "engine": self.c.engine_stats(), "sizes": SIZES_SOURCE, "cpu": cost_now(self),
                "uptime": round(time.time() - self.started, 3)}

    def op_set_driver(self, req: dict) -> dict:
        if "loaded" not in req:
            raise ValueError("set_driver: expected loaded (bool)")
        factor, cpu = build_factors(req)
        with self.lock:
            self.driver_loaded = bool(req["loaded"])
            self.driver_md5 = req.get("md5")
            self.rate_factor = factor if self.driver_loaded else 1.0
            self.cpu_factor = cpu if self.driver_loaded else 1.0
            if req.get("name"):
                self.driver_name = str(req["name"])
            self.faults.refresh(time.monotonic(), force=True)
            self._redecide()
            self._sync_bypass()
        return {"ok": True}

    def _redecide(self) -> None:
        """Every installed SA offered to the driver again (the caller holds the lock)."""
        for inst in self.sas.values():
            inst.offloaded = self._offload(inst.spec)
            self._put(inst)
        self.publish()

    def op_reset(self, req: dict) -> dict:
        with self.lock:
            self.sas.clear()
            self.free = list(range(MAX_SA - 1, -1, -1))
            self.leaked.clear()
            self.fbsd_routes.clear()
            self.c.zero()
            self.c.bump(reset=True)
            self._unpublish_all()
            self.publish()
        return {"ok": True}

    def op_route(self, req: dict) -> dict:
        action = req.get("action")
        raw = req.get("dest", req.get("dst"))  # ipsec_hil_twin.fbsd.route sends "dst"
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
        self.c.bump()  # faults re-read
        return {"ok": True, "faults": sorted(self.faults.data)}

    def check_faults(self, force: bool = False) -> None:
        sa_events.refresh_faults(self, force)

    def _sync_bypass(self) -> None:
        """Fault bypass_tax costs per packet only while the driver is loaded: its hooks
        are the driver's (ipsec_hil_twin.engine.bypass)."""
        if self.bypass is not None:
            p = fault_params(self.faults, "bypass_tax")
            self.bypass.sync(float(p.get("us", 0)) if p is not None and self.driver_loaded else None)

    def op_link(self, req: dict) -> dict:
        return sa_events.link(self, req)

    OPS = ("add_sa", "del_sa", "expire_sa", "flush", "list_sas", "counters", "status", "set_driver",
           "reset", "route", "faults", "set_seq", "link")

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


class ControlServer(JsonlServer):
    """engine.sock: ipsec_hil_twin.jsonl's threaded server answering with EngineState.handle."""

    def __init__(self, path: Path, state: EngineState) -> None:
        self.state = state
        super().__init__(path, state.handle)


def build_factors(req: dict) -> tuple[float, float]:
    """set_driver's (rate_factor, cpu_factor) of the build being attached (ipsec_hil_twin.fbsd.kld's
    markers; 1.0 each when absent), each checked: a rate in (0, 1], a CPU factor > 0."""
    try:
        rate, cpu = float(req.get("rate_factor") or 1.0), float(req.get("cpu_factor") or 1.0)
    except (TypeError, ValueError):
        raise ValueError("set_driver: rate_factor, cpu_factor: expected numbers, found "
                         f"{req.get('rate_factor')!r}, {req.get('cpu_factor')!r}") from None
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"set_driver: rate_factor {rate} out of (0, 1]")
    if not 0.0 < cpu < float("inf"):
        raise ValueError(f"set_driver: cpu_factor {cpu} out of (0, inf)")
    return rate, cpu


def cost_now(state: "EngineState") -> dict[str, Any]:
    """What the loops charge and pace by now (`status` "cpu"): the same draws as theirs
    (ipsec_hil_twin.engine.cost), computed here, never asked of them."""
    state.cost.configure(state.cpu_factor, state.noise)
    return state.cost.status()


def desired_routes(state: "EngineState", own: list[str]) -> list[RouteSpec]:
    """The esp0 routes every outbound SA asks for, the smallest MTU per (table, prefix)."""
    ctx = (tuple(own), tuple(sorted(state.fbsd_routes)), state.own_big)
    fbsd = [ipaddress.ip_network(r, strict=False) for r in state.fbsd_routes]
    own_ips = [ipaddress.ip_address(a) for a in own]
    best: dict[tuple[int, str], RouteSpec] = {}
    for inst in state.sas.values():
        if inst.spec.direction != "out":
            continue
        if inst.routes is None or inst.routes[0] != ctx:
            entry = state.published.get(inst.spec.key) or state._sa_entry(inst)
            inst.routes = (ctx, sa_route_wishes(inst.spec, entry, fbsd, own_ips, state.own_big))
        for r in inst.routes[1]:
            old = best.get((r.table, r.dst))
            if old is None or r.mtu < old.mtu:
                best[(r.table, r.dst)] = r
    return list(best.values())


def set_seq(state: "EngineState", req: dict) -> dict:
    """Start an outbound association's sequence number at `seq` (the next frame carries
    seq + 1): how the lab reaches 2^32 (ESN) in a test's time.  `dst` is needed only
    when two associations share the SPI."""
    try:
        spi, seq = int(req["spi"]), int(req["seq"])
    except (KeyError, ValueError, TypeError):
        raise ValueError("set_seq: expected spi (int) and seq (int)") from None
    if not 0 <= seq < 1 << 64:
        raise ValueError(f"set_seq: seq {seq} outside 0..2^64-1")
    with state.lock:
        hits = [i for (s, d), i in state.sas.items() if s == spi and i.spec.direction == "out"
                and ("dst" not in req or d == str(ipaddress.ip_address(req["dst"])))]
        if len(hits) != 1:
            return {"ok": False, "error": f"set_seq: {len(hits)} outbound SAs with spi={spi:#x}; "
                                          "expected exactly one (give dst)"}
        if seq > 0xFFFFFFFF and not hits[0].spec.esn:
            raise ValueError(f"set_seq: seq {seq} needs an ESN association (spi={spi:#x} has none)")
        state.seq_requests += 1
        hits[0].seq_set = (state.seq_requests, seq)
        state._put(hits[0])  # the journal carries the new seq_set: the tx loop applies it once
        state.publish()
    return {"ok": True}
