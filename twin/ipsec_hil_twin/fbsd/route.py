"""route(8) of FreeBSD 14 (netlink flavour): add / delete / get.

`add`/`delete` of a destination inside an installed SA's traffic selectors is told to
the engine (`{"op":"route",...}`): on FreeBSD an inner destination needs a route even
though the policy wraps the packet (the 000 page), and in the twin the engine owns the
path into its TUN.  Anything else (or an engine without that op) becomes a real Linux
route in the namespace.  `get` reads the kernel's real answer (`ip -j route get`),
including a cached path MTU, in FreeBSD's `route -n get` layout.
"""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

from ipsec_hil_twin.fbsd import _common as c

IP = next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip") if os.path.exists(p)), "/sbin/ip")
"""iproute2 by absolute path: PATH starts with DIR/bin (never recurse into a wrapper)."""

PROG = "route"


def usage() -> int:
    sys.stderr.write("usage: route [-46dnqtv] command [[modifiers] args]\n")
    return 64


def _ip(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([IP] + args, capture_output=True, text=True)


def _family(flag: int | None, *addrs: str) -> int:
    if flag:
        return flag
    for a in addrs:
        if a == "default":
            continue
        try:
            return ipaddress.ip_network(a, strict=False).version
        except ValueError:
            pass
    return 4


def main(argv: list[str]) -> int:
    fam: int | None = None
    args = list(argv)
    quiet = False
    while args and args[0].startswith("-"):
        a = args.pop(0)
        if a in ("-6", "-inet6"):
            fam = 6
        elif a in ("-4", "-inet"):
            fam = 4
        elif a == "-q":
            quiet = True
        elif a in ("-n", "-v", "-d", "-t"):
            pass
        else:
            sys.stderr.write(f"route: illegal option -- {a[1:2]}\n")
            return usage()
    if not args:
        return usage()
    cmd = args.pop(0)
    if cmd == "get":
        return get(fam, args)
    if cmd in ("add", "delete", "change"):
        return modify(cmd, fam, args, quiet)
    sys.stderr.write(f"route: {cmd}: invalid command\n")
    return usage()


def _parse_mod(args: list[str], fam: int | None) -> tuple[str, str, str | None, int | None] | None:
    kind = "net"
    rest = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-net", "-host"):
            kind = a[1:]
        elif a in ("-6", "-inet6"):
            fam = 6
        elif a in ("-4", "-inet"):
            fam = 4
        elif a == "-interface":
            pass
        elif a in ("-fib", "-mtu", "-netmask", "-prefixlen") and i + 1 < len(args):
            if a == "-prefixlen" and rest:
                rest[0] = f"{rest[0]}/{args[i + 1]}"
            i += 1
        elif a.startswith("-"):
            pass
        else:
            rest.append(a)
        i += 1
    if not rest:
        return None
    dest = rest[0]
    gw = rest[1] if len(rest) > 1 else None
    if "/" not in dest and dest != "default" and kind == "host":
        pass
    return kind, dest, gw, fam


def _inside_selectors(hd, dest: str) -> bool:
    try:
        sas = c.engine(hd, {"op": "list_sas"}).get("sas") or []
    except c.EngineError:
        return False
    try:
        net = ipaddress.ip_network(dest, strict=False)
    except ValueError:
        return False
    for sa in sas:
        if sa.get("direction", "out") != "out":
            continue
        for ts in sa.get("remote_ts") or []:
            try:
                tsn = ipaddress.ip_network(ts.split("[")[0], strict=False)
            except ValueError:
                continue
            if tsn.version == net.version and net.subnet_of(tsn):
                return True
    return False


def modify(cmd: str, fam: int | None, args: list[str], quiet: bool) -> int:
    parsed = _parse_mod(args, fam)
    if parsed is None:
        return usage()
    kind, dest, gw, fam = parsed
    fam = _family(fam, dest, gw or "")
    head = f"{cmd} {kind} {dest}" + (f": gateway {gw}" if gw else "")
    hd = c.host_dir()
    error: str | None = None
    done = False
    if cmd != "change" and _inside_selectors(hd, dest):
        try:
            c.engine(hd, {"op": "route", "action": cmd, "dst": dest, "gateway": gw, "family": fam})
            done = True
        except c.EngineError as exc:
            msg = str(exc).lower()
            if "unknown op" in msg or "unknown" in msg and "op" in msg:
                done = False  # older engine: fall back to a kernel route
            elif "exist" in msg:
                error = "EEXIST"
            elif "not found" in msg or "no such" in msg:
                error = "ESRCH"
            else:
                error = str(exc)
    if not done and error is None:
        dst = dest if dest == "default" or "/" in dest or kind == "net" else dest + ("/128" if fam == 6 else "/32")
        ipcmd = [f"-{fam}", "route", {"add": "add", "delete": "del", "change": "change"}[cmd], dst]
        if gw:
            ipcmd += ["via", gw]
        r = _ip(ipcmd)
        if r.returncode != 0:
            e = r.stderr.lower()
            if "file exists" in e:
                error = "EEXIST"
            elif "no such process" in e or "not found" in e:
                error = "ESRCH"
            elif "unreachable" in e or "nexthop has invalid gateway" in e:
                error = "ENETUNREACH"
            elif "network is down" in e:
                error = "ENETDOWN"
            else:
                error = r.stderr.strip().split(":")[-1].strip() or "failed"
    if error is None:
        if not quiet:
            print(head)
        return 0
    text = {"EEXIST": ("route already in table", "File exists"),
            "ESRCH": ("not in table", "No such process"),
            "ENETUNREACH": ("Network is unreachable", "Network is unreachable"),
            "ENETDOWN": ("Network is down", "Network is down")}.get(error, (error, error))
    sys.stderr.write(f"route: message indicates error: {text[1]}\n")
    if not quiet:
        print(f"{head} fib 0: {text[0]}")
    return 1


def _mask(net: ipaddress._BaseNetwork) -> str:
    if net.version == 4:
        return str(net.netmask)
    return str(net.netmask)


def get(fam: int | None, args: list[str]) -> int:
    targets = [a for a in args if not a.startswith("-")]
    if not targets:
        return usage()
    target = targets[0]
    fam = _family(fam, target)
    if "-6" in args or "-inet6" in args:
        fam = 6
    try:
        addr = ipaddress.ip_address(target.split("/")[0])
    except ValueError:
        sys.stderr.write(f"route: bad address: {target}\n")
        return 1
    r = _ip(["-j", f"-{fam}", "route", "get", str(addr)])
    if r.returncode != 0:
        sys.stderr.write("route: route has not been found\n")
        return 1
    info = (json.loads(r.stdout or "[]") or [{}])[0]
    if info.get("type") in ("unreachable", "prohibit", "blackhole"):
        sys.stderr.write("route: route has not been found\n")
        return 1
    table = _ip(["-j", f"-{fam}", "route", "show", "table", "main"])
    best = None
    best_route: dict = {}
    for rt in json.loads(table.stdout or "[]"):
        d = rt.get("dst", "")
        if d == "default":
            net = ipaddress.ip_network("::/0" if fam == 6 else "0.0.0.0/0")
        else:
            try:
                net = ipaddress.ip_network(d, strict=False)
            except ValueError:
                continue
        if rt.get("type") not in (None, "unicast"):
            continue
        if addr in net and (best is None or net.prefixlen > best.prefixlen):
            best, best_route = net, rt
    dev = info.get("dev", "")
    gw = info.get("gateway")
    mtu = None
    for m in info.get("metrics", []) or []:
        if isinstance(m, dict) and "mtu" in m:
            mtu = int(m["mtu"])
    if mtu is None:
        lk = _ip(["-j", "link", "show", "dev", dev]) if dev else None
        try:
            mtu = int(json.loads(lk.stdout)[0]["mtu"]) if lk and lk.returncode == 0 else 1500
        except (ValueError, IndexError, KeyError):
            mtu = 1500
    out = [f"   route to: {addr}"]
    host = best is not None and best.prefixlen == best.max_prefixlen
    if best is None or best.prefixlen == 0:
        out.append("destination: default")
        out.append("       mask: default")
    else:
        out.append(f"destination: {best.network_address}")
        if not host:
            out.append(f"       mask: {_mask(best)}")
    if gw:
        out.append(f"    gateway: {gw}")
    out.append("        fib: 0")
    out.append(f"  interface: {'lo0' if dev == 'lo' else dev}")
    flags = ["UP"]
    if gw:
        flags.append("GATEWAY")
    if host:
        flags.append("HOST")
    flags.append("DONE")
    if best_route.get("protocol") == "kernel":
        flags.append("PINNED")
    else:
        flags.append("STATIC")
    out.append(f"      flags: <{','.join(flags)}>")
    out.append(" recvpipe  sendpipe  ssthresh  rtt,msec    mtu        weight    expire")
    out.append(f"{0:8d}{0:10d}{0:10d}{0:10d}{mtu:10d}{1:10d}{0:10d}")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    c.run_main(main)
