"""netstat(1) `-i` / `-I IF` [`-46bdnW`] [`-f inet|inet6|link`] of FreeBSD 14, text and `--libxo json`.

The format is usr.bin/netstat/if.c's intpr() (FreeBSD 14): one row a link-layer address
(`<Link#N>`, every counter) and one row an IPv4/IPv6 address (packets only, the error and
drop columns `-`); `-d` adds the output drops (`Drop`); `-b` the byte columns; `-W` widens
the name and address columns. In libxo's JSON a row is an "interface" instance whose
columns are keys, and a `-` column is no key at all (show_stat's `{D:}` is text only);
with `-d` the input drops and the output drops are both emitted as "dropped-packets", so
an instance holds that key twice, input first (if.c names both columns so).

Why here (issue 52: every frame the virtual lab drops is counted where FreeBSD counts it):
a port's counters are the namespace's real ones (`ip -s -j addr`: the veth's packets,
bytes, errors and drops), plus the drops FreeBSD would count there that Linux counts
elsewhere:
- output drops (if_data.ifi_oqdrops, IFCOUNTER_OQDROPS: the interface's send queue full):
  the port's root qdisc's drops (the shaped link's tbf, `tc -s -j qdisc`) and the
  engine's own (ipsec_hil_twin.engine.counters.port_drop "odrop": its model of the port's
  queue refused the packet, or esp0's ring did);
- input drops (ifi_iqdrops, IFCOUNTER_IQDROPS: the NIC's receive ring full): the engine's
  "idrop" (an ESP frame its receive socket for the port had no room for).
Names follow ifconfig: `lo` is lo0, the engine's TUN (esp0) is hidden, enc0 is shown.
Addresses are always numeric (as with `-n`): the appliance resolves no names. An address
row repeats its link's packet counts: FreeBSD counts packets per address too (the ifaddr's
own counters), the twin has only the port's.
"""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd import ifconfig

PROG = "netstat"
TC = next((p for p in ("/usr/sbin/tc", "/sbin/tc", "/usr/bin/tc", "/bin/tc") if os.path.exists(p)), "/sbin/tc")
"""iproute2's tc by absolute path (PATH starts with the appliance's bin/)."""

ENC0_MTU = 1536
FAMILIES = {"inet": "inet", "inet6": "inet6", "link": "link"}


def _tc_drops() -> dict[str, int]:
    """Each interface's root qdisc drops (the shaped link's tbf), by Linux name."""
    r = subprocess.run([TC, "-s", "-j", "qdisc", "show"], capture_output=True, text=True)
    if r.returncode != 0:
        return {}
    return {q["dev"]: int(q.get("drops", 0)) for q in json.loads(r.stdout or "[]") if q.get("root")}


def _engine_drops() -> dict[str, dict[str, int]]:
    """The engine's per-port drops (its `counters` reply's "ports"); none without an engine."""
    try:
        reply = c.engine(c.host_dir(), {"op": "counters"}, timeout=5.0)
    except (c.EngineError, OSError, ValueError):
        return {}
    return reply.get("ports") or {}


class Row:
    """One line of intpr(): an interface's link row (``family`` "link") or one of its addresses."""

    __slots__ = ("name", "up", "flags", "mtu", "family", "network", "address", "s")

    def __init__(self, name, up, flags, mtu, family, network, address, s) -> None:
        self.name, self.up, self.flags, self.mtu = name, up, flags, mtu
        self.family, self.network, self.address, self.s = family, network, address, s


def interfaces() -> list[Row]:
    """Every row FreeBSD's getifaddrs() walk would print, in its order: lo0 and the ports by
    index, each link row first, then enc0."""
    links = [l for l in ifconfig._ip_json(["-s", "addr", "show"]) if l.get("ifname") not in ifconfig.HIDDEN]
    qdrops, eng = _tc_drops(), _engine_drops()
    rows: list[Row] = []
    for l in sorted(links, key=lambda x: x.get("ifindex", 0)):
        ifn = l["ifname"]
        st = l.get("stats64") or {}
        rx, tx = st.get("rx") or {}, st.get("tx") or {}
        e = eng.get(ifn) or {}
        s = {"ipackets": rx.get("packets", 0), "ierrors": rx.get("errors", 0),
             "iqdrops": rx.get("dropped", 0) + e.get("idrop", 0), "ibytes": rx.get("bytes", 0),
             "opackets": tx.get("packets", 0), "oerrors": tx.get("errors", 0), "obytes": tx.get("bytes", 0),
             "collisions": tx.get("collisions", 0),
             "oqdrops": tx.get("dropped", 0) + qdrops.get(ifn, 0) + e.get("odrop", 0)}
        flags, _bits = ifconfig.if_flags(l)
        name, up, mtu = ifconfig.fbsd_name(ifn), bool(flags & 1), int(l.get("mtu", 1500))
        address = l.get("address", "") if l.get("link_type") == "ether" else name
        rows.append(Row(name, up, flags, mtu, "link", f"<Link#{l.get('ifindex', 0)}>", address, s))
        for a in l.get("addr_info", []):
            fam = a.get("family")
            if fam not in ("inet", "inet6"):
                continue
            iface = ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}")
            addr, net = str(iface.ip), f"{iface.network.network_address}/{iface.network.prefixlen}"
            if fam == "inet6" and iface.ip.is_link_local:
                addr, net = f"{addr}%{name}", f"fe80::%{name}/{iface.network.prefixlen}"
            rows.append(Row(name, up, flags, mtu, fam, net, addr, s))
    ipsec = False
    try:
        ipsec = c.module_loaded(c.load_state(c.host_dir()), "ipsec")
    except Exception:  # noqa: BLE001 -- outside a twin host: no enc0 state to read
        pass
    zero = dict.fromkeys(("ipackets", "ierrors", "iqdrops", "ibytes", "opackets", "oerrors", "obytes",
                          "collisions", "oqdrops"), 0)
    rows.append(Row("enc0", ipsec, 0x41 if ipsec else 0, ENC0_MTU, "link", f"<Link#{len(links) + 1}>", "enc0", zero))
    return rows


def _stat(out: list[str], js: dict, fmt: str, width: int, key: str, value: int, show: bool) -> None:
    """if.c show_stat(): the value right-aligned in ``width`` (a `-` when not ``show``), the
    separators its ``LS``/``NRS`` prefixes ask for; the JSON key only when shown."""
    lsep, rsep = "", " "
    if fmt.startswith("LS"):
        lsep, fmt = " ", fmt[2:]
    if fmt.startswith("NRS"):
        rsep, fmt = "", fmt[3:]
    if not show:
        out.append(f"{lsep}{'-':>{width}}{rsep}")
        return
    out.append(f"{lsep}{value:>{width}}{rsep}")
    js.setdefault("__pairs", []).append((key, value))


def intpr(given: list[tuple[str, str | None]], style: str | None) -> int:
    """`netstat -i` / `-I IF` with the options ``given`` (letter, argument) in the order typed."""
    flags = {ch for ch, _v in given}
    want = next((v for ch, v in given if ch == "I"), None)
    fam_arg = next((v for ch, v in reversed(given) if ch == "f"), None)
    af = "inet" if "4" in flags else "inet6" if "6" in flags else None
    if fam_arg is not None:
        if fam_arg not in FAMILIES:
            c.err(PROG, f"{fam_arg}: unknown address family")
            return 1
        af = FAMILIES[fam_arg]
    bflag, dflag, wflag = "b" in flags, "d" in flags, "W" in flags
    try:
        rows = interfaces()
    except (RuntimeError, OSError, ValueError) as exc:
        c.err(PROG, str(exc))
        return 1
    if want is not None:
        rows = [r for r in rows if r.name == want]
        if not rows:
            c.err(PROG, f"interface {want} not found")  # fill_iftot's EX_DATAERR text
            return 65
    if af is not None:
        rows = [r for r in rows if r.family == af]
    name_w, net_w, addr_w = 5, 13, 17
    if wflag:
        name_w = max([5] + [len(r.name) + (0 if r.up else 1) for r in rows])
        net_w, addr_w = (24, 39) if any(r.family == "inet6" for r in rows) else (18, 17)
    head = f"{'Name':<{name_w}.{name_w}} {'Mtu':>5.5} {'Network':<{net_w}.{net_w}} {'Address':<{addr_w}.{addr_w}} " \
           f"{'Ipkts':>8.8} {'Ierrs':>5.5} {'Idrop':>5.5}"
    if bflag:
        head += f" {'Ibytes':>10.10}"
    head += f" {'Opkts':>8.8} {'Oerrs':>5.5}"
    if bflag:
        head += f" {'Obytes':>10.10}"
    head += f" {'Coll':>5}"
    if dflag:
        head += f" {'Drop':>5.5}"
    lines, instances = [head], []
    for r in rows:
        link = r.family == "link"
        xname = r.name if r.up else r.name + "*"
        out = [f"{xname:<{name_w}.{name_w}}"]
        js: dict = {"__pairs": [("name", r.name), ("flags", f"0x{r.flags:x}")]}
        _stat(out, js, "", 6, "mtu", r.mtu, bool(r.mtu))
        if wflag and not link:
            out.append(f"{r.network:<{net_w}} {r.address:<{addr_w}} ")
        else:
            out.append(f"{r.network:<{net_w}.{net_w}} {r.address:<{addr_w}.{addr_w}} ")
        js["__pairs"] += [("network", r.network), ("address", r.address)]
        s = r.s
        _stat(out, js, "", 8, "received-packets", s["ipackets"], True)
        _stat(out, js, "", 5, "received-errors", s["ierrors"], link)
        _stat(out, js, "", 5, "dropped-packets", s["iqdrops"], link)
        if bflag:
            _stat(out, js, "", 10, "received-bytes", s["ibytes"], True)
        _stat(out, js, "", 8, "sent-packets", s["opackets"], True)
        _stat(out, js, "", 5, "send-errors", s["oerrors"], link)
        if bflag:
            _stat(out, js, "", 10, "sent-bytes", s["obytes"], True)
        _stat(out, js, "NRS", 5, "collisions", s["collisions"], link)
        if dflag:
            _stat(out, js, "LS", 5, "dropped-packets", s["oqdrops"], link)
        lines.append("".join(out))
        instances.append(js["__pairs"])
    style_set = set((style or "").split(","))
    if "json" in style_set:
        sys.stdout.write(_json(instances, "pretty" in style_set))
    else:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _json(instances: list[list[tuple[str, object]]], pretty: bool) -> str:
    """libxo's JSON of the rows: each instance's keys in emission order, a repeated key
    ("dropped-packets" with -d) written twice, as libxo writes it."""
    ind = "  " if pretty else ""
    nl = "\n" if pretty else ""
    sep = ": " if pretty else ":"

    def obj(pairs: list[tuple[str, object]], depth: int) -> str:
        pad = ind * depth
        body = f",{nl}".join(f"{pad}{ind}{json.dumps(k)}{sep}{json.dumps(v)}" for k, v in pairs)
        return "{" + nl + body + nl + pad + "}"

    items = f",{nl}".join(ind * 3 + obj(p, 3) for p in instances)
    return (f'{{{nl}{ind}"__version"{sep}"1",{nl}{ind}"statistics"{sep}{{{nl}{ind * 2}"interface"{sep}[{nl}'
            f"{items}{nl}{ind * 2}]{nl}{ind}}}{nl}}}\n")
