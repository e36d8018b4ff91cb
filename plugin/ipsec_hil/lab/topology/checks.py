"""What pydantic cannot see field by field: the topology's cross-references and facts.

Links and tunnels must name hosts and ports that exist, a tunnel's ends must have the
addresses its families need, addresses are unique, the files a hardware lab names exist,
and -- the rule behind :meth:`Topology.path_mtu` -- a wire has ONE MTU: both ends of a
link state the same MTU, and so do both outer ports of a tunnel (its path MTU).
Every problem is reported through :class:`~ipsec_hil.lab.topology.lines.Located` (``FILE:LINE``).
"""

from __future__ import annotations

import re

from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.topology.lines import Located, Path_, dotted
from ipsec_hil.lab.topology.model import Topology
from ipsec_hil.lab.topology.parts import FAMILIES, Host
from ipsec_hil.lab.topology.registry import KnownModels
from ipsec_hil.lab.topology.tunnels import Tunnel

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_PORT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")


def check(topo: Topology, doc: Located, check_files: bool, models: KnownModels) -> None:
    """Add every cross-reference problem of ``topo`` to ``doc`` (``models`` judges the
    ``profile:`` overrides: the caller's registry, see :mod:`ipsec_hil.lab.topology.registry`)."""
    benches = [n for n, h in topo.hosts.items() if h.role == "bench"]
    if len(benches) != 1:
        doc.add(("hosts",), f"expected exactly one host with role: bench, found {len(benches)}" + (f" ({', '.join(benches)})" if benches else ""))
    if not topo.appliances():
        doc.add(("hosts",), "expected at least one host with role: appliance, found none")
    _check_hosts(topo, doc, models)
    _check_links(topo, doc)
    for tname, tun in topo.tunnels.items():
        _check_tunnel(topo, doc, tname, tun, check_files)
    if check_files and not topo.lab.virtual:
        _check_files(topo, doc)


def _check_hosts(topo: Topology, doc: Located, models: KnownModels) -> None:
    seen_addr: dict[str, Path_] = {}
    for hname, host in topo.hosts.items():
        hp = ("hosts", hname)
        if not _NAME_RE.match(hname):
            doc.add(hp, f"expected a host name of letters, digits, - or _ starting with a letter (max 32), found {hname!r}")
        for pname, port in host.ports.items():
            pp = hp + ("ports", pname)
            if not _PORT_RE.match(pname):
                doc.add(pp, f"expected a port name of letters, digits or _ starting with a letter, found {pname!r}")
            for fam in FAMILIES:
                ip = port.ip(fam)
                if ip is None:
                    continue
                if ip in seen_addr:
                    doc.add(pp + (fam,), f"expected a unique address, found {ip} again (also {dotted(seen_addr[ip])})")
                else:
                    seen_addr[ip] = pp + (fam,)
        _check_profile(doc, hp, host, models)
        from_labgrid = topo.lab.labgrid is not None and host.is_appliance
        if from_labgrid and (host.mgmt.address or host.mgmt.local):
            doc.add(hp + ("mgmt", "address" if host.mgmt.address else "local"),
                    "expected no mgmt.address or mgmt.local on an appliance of a lab with lab.labgrid "
                    "(its place's NetworkService gives address and user), found "
                    + (repr(host.mgmt.address) if host.mgmt.address else "local: true"))
        elif not from_labgrid and not topo.lab.virtual and not host.mgmt.local and not host.mgmt.address:
            doc.add(hp + ("mgmt",), "expected mgmt.address (SSH) or mgmt.local: true for a hardware lab, found neither")


def _check_profile(doc: Located, hp: Path_, host: Host, models: KnownModels) -> None:
    """Each ``profile:`` override on its own, so the error names the one that is wrong."""
    if host.model is None:
        return
    for key, value in host.profile.items():
        kp = hp + ("profile", key)
        items = value.items() if key in ("counters", "oids") and isinstance(value, dict) else [(None, value)]
        for sub, subval in items:
            try:
                models.check_profile(host.model, {key: {sub: subval} if sub is not None else subval})
            except (ValueError, LabError) as exc:
                doc.add(kp + ((sub,) if sub is not None else ()), f"expected what the {host.model} profile knows, found: {exc}")


def _check_links(topo: Topology, doc: Located) -> None:
    used: dict[tuple[str, str], Path_] = {}
    for i, link in enumerate(topo.links):
        lp = ("links", i)
        ends = link.ends
        for side, (h, p) in zip(("a", "b"), ends):
            if h not in topo.hosts:
                doc.add(lp + (side,), f"expected a host of this file ({', '.join(topo.hosts)}), found {h!r}")
            elif p not in topo.hosts[h].ports:
                doc.add(lp + (side,), f"expected a port of {h} ({', '.join(topo.hosts[h].ports)}), found {p!r}")
            elif (h, p) in used:
                doc.add(lp + (side,), f"expected each port on one link, found {h}.{p} already on {dotted(used[(h, p)])}")
            else:
                used[(h, p)] = lp
        if ends[0] == ends[1]:
            doc.add(lp + ("b",), f"expected two different ports, found {link.a} at both ends")
            continue
        if not all(h in topo.hosts and p in topo.hosts[h].ports for h, p in ends):
            continue
        pa, pb = (topo.hosts[h].ports[p] for h, p in ends)
        for fam in FAMILIES:
            xa, xb = pa.address(fam), pb.address(fam)
            if xa is not None and xb is not None and xb.ip not in xa.network:
                doc.add(lp + ("b",), f"expected {link.b}'s {fam} address in {link.a}'s network {xa.network}, found {xb}")
        if pa.mtu != pb.mtu:
            doc.add(lp + ("b",), f"expected the same MTU at both ends of a wire ({link.a} has {pa.mtu}), found {pb.mtu} on {link.b}")


def _check_tunnel(topo: Topology, doc: Located, tname: str, tun: Tunnel, check_files: bool) -> None:
    tp = ("tunnels", tname)
    if not _NAME_RE.match(tname):
        doc.add(tp, f"expected a tunnel name of letters, digits, - or _ starting with a letter, found {tname!r}")
    if _ends_exist(topo, doc, tp, tun):
        for side in ("local", "remote"):
            end = tun.end(side)
            for key, role, fams in (("port", "outer", tun.outer), ("lan", "inner", tun.inner)):
                port = topo.hosts[end.host].ports[getattr(end, key)]
                for fam in fams:
                    if port.address(fam) is None:
                        doc.add(tp + (role,), f"expected an {fam} address on {end.host}.{getattr(end, key)} for {role} {fam}, found none")
        mtu_local, mtu_remote = topo.outer_port(tun.local).mtu, topo.outer_port(tun.remote).mtu
        if mtu_local != mtu_remote:
            doc.add(tp + ("remote", "port"),
                    f"expected the MTU of {tun.local.host}.{tun.local.port} ({mtu_local}) on "
                    f"{tun.remote.host}.{tun.remote.port} too (a tunnel has one path MTU), found {mtu_remote}")
        if tun.inject is not None and tun.inject.via == "bench":
            _check_inject_port(topo, doc, tp, tun)
    if tun.psk.file is not None and check_files and not topo.lab.virtual and not tun.psk.file.is_file():
        doc.add(tp + ("psk", "file"), f"expected a readable file, found no file at {tun.psk.file}")


def _check_inject_port(topo: Topology, doc: Located, tp: Path_, tun: Tunnel) -> None:
    """``inject: {via: bench, port: P}``: P is a bench port with every outer family's address."""
    assert tun.inject is not None and tun.inject.port is not None
    bench = next((h for h in topo.hosts.values() if h.role == "bench"), None)
    ip = tp + ("inject", "port")
    if bench is None:
        return  # reported once for the whole file
    port = bench.ports.get(tun.inject.port)
    if port is None:
        doc.add(ip, f"expected a port of the bench ({', '.join(bench.ports)}), found {tun.inject.port!r}")
        return
    for fam in tun.outer:
        if port.address(fam) is None:
            doc.add(ip, f"expected an {fam} address on the bench's {tun.inject.port} for outer {fam}, found none")


def _ends_exist(topo: Topology, doc: Located, tp: Path_, tun: Tunnel) -> bool:
    """Both ends name an appliance and ports of it, on two different hosts."""
    ok = True
    for side in ("local", "remote"):
        end = tun.end(side)
        sp = tp + (side,)
        host = topo.hosts.get(end.host)
        if host is None:
            doc.add(sp + ("host",), f"expected a host of this file ({', '.join(topo.hosts)}), found {end.host!r}")
            ok = False
            continue
        if not host.is_appliance:
            doc.add(sp + ("host",), f"expected an appliance, found the bench host {end.host!r}")
            ok = False
        for key in ("port", "lan"):
            pname = getattr(end, key)
            if pname not in host.ports:
                doc.add(sp + (key,), f"expected a port of {end.host} ({', '.join(host.ports)}), found {pname!r}")
                ok = False
    if tun.local.host == tun.remote.host:
        doc.add(tp + ("remote", "host"), f"expected the other end on another host, found {tun.remote.host!r} at both ends")
        ok = False
    return ok


def _check_files(topo: Topology, doc: Located) -> None:
    """A hardware lab's known_hosts and key files exist (a virtual lab's are generated)."""
    kh = topo.lab.known_hosts
    ssh_hosts = [n for n, h in topo.hosts.items() if not h.mgmt.local]
    if kh is None and ssh_hosts:
        doc.add(("lab",), f"expected lab.known_hosts (host keys are pinned, never auto-added) for SSH hosts {', '.join(ssh_hosts)}, found none")
    elif kh is not None and not kh.is_file():
        doc.add(("lab", "known_hosts"), f"expected a known_hosts file, found no file at {kh}")
    for hname, host in topo.hosts.items():
        jump_key = host.mgmt.jump.key_file if host.mgmt.jump else None
        for kp, key in ((("mgmt", "key_file"), host.mgmt.key_file), (("mgmt", "jump", "key_file"), jump_key)):
            if key is not None and not key.is_file():
                doc.add(("hosts", hname) + kp, f"expected a private key file, found no file at {key}")
