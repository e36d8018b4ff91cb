"""host.json -> HostConfig: what the engine needs to know about its appliance.

Why lenient about shape: ipsec_hil_twin.lifecycle.lab writes host.json, ipsec_hil_twin.engine.minilab and the shell
tests write smaller ones; ports may be a list of {name, ifname, addresses|ipv4/ipv6, mtu,
rate_mbit} or a mapping name -> same.  The driver must be one ipsec_hil_twin.personality emulates
(its counting rules come from there).  Anything missing that the engine needs raises
ValueError naming file and field.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ipsec_hil_twin.personality import PERSONALITIES, Personality, PersonalityError, for_driver
from ipsec_hil_twin.machinery.runtime import read_json

from .counters import MAX_PORTS


@dataclass(frozen=True)
class PortCfg:
    name: str
    ifname: str
    addresses: tuple[str, ...]  # CIDR strings
    mtu: int = 1500
    rate_mbit: float | None = None
    queue_bytes: int | None = None  # the port's stated egress buffer (topology queue_kib)

    def has(self, addr: str) -> bool:
        a = ipaddress.ip_address(addr)
        return any(ipaddress.ip_interface(x).ip == a for x in self.addresses)


@dataclass(frozen=True)
class HostConfig:
    name: str
    model: str
    driver: str  # a driver of ipsec_hil_twin.personality (octep, npuep, ...)
    counters: dict[str, str]
    ports: tuple[PortCfg, ...]
    replay_window: int = 32
    driver_loaded: bool = True
    offloads_ipv6_outer: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def personality(self) -> Personality:
        return for_driver(self.driver)

    def port_for(self, addr: str) -> PortCfg | None:
        for p in self.ports:
            if p.has(addr):
                return p
        return None


def load_host(path: Path) -> HostConfig:
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")

    def need(d: dict, k: str, where: str) -> Any:
        if k not in d:
            raise ValueError(f"{path}: {where}{k}: missing")
        return d[k]

    name = str(need(data, "name", ""))
    model = str(data.get("model", ""))
    driver = str(data.get("driver") or (PERSONALITIES[model].driver if model in PERSONALITIES else ""))
    try:
        for_driver(driver)
    except PersonalityError as exc:
        raise ValueError(f"{path}: driver: {exc}") from None
    raw_ports = need(data, "ports", "")
    items = list(raw_ports.items()) if isinstance(raw_ports, dict) else [(p.get("name"), p) for p in raw_ports]
    ports = []
    for pname, p in items:
        where = f"ports.{pname}."
        addrs = list(p.get("addresses") or [])
        for fam in ("ipv4", "ipv6"):
            if p.get(fam):
                addrs.append(p[fam])
        for a in addrs:
            try:
                ipaddress.ip_interface(a)
            except ValueError:
                raise ValueError(f"{path}: {where}addresses: expected CIDR, found {a!r}") from None
        ports.append(PortCfg(name=str(pname), ifname=str(need(p, "ifname", where)),
                             addresses=tuple(addrs), mtu=int(p.get("mtu", 1500)),
                             rate_mbit=(float(p["rate_mbit"]) if p.get("rate_mbit") else None),
                             queue_bytes=(int(p["queue_bytes"]) if p.get("queue_bytes") else None)))
    if len(ports) > MAX_PORTS:
        raise ValueError(f"{path}: ports: the engine counts the drops of at most {MAX_PORTS} ports "
                         f"(ipsec_hil_twin.engine.counters.MAX_PORTS), found {len(ports)}")
    counters = data.get("counters") or {}
    if not isinstance(counters, dict):
        raise ValueError(f"{path}: counters: expected a mapping logical name -> oid")
    return HostConfig(name=name, model=model, driver=driver, counters=dict(counters),
                      ports=tuple(ports), replay_window=int(data.get("replay_window", 32)),
                      driver_loaded=bool(data.get("driver_loaded", True)),
                      offloads_ipv6_outer=bool(data.get("accepts_ipv6_sa", True)), extra=data)
